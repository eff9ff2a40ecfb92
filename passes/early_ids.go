package passes

import (
	"pistil/gpu"
	"pistil/graph"
	"pistil/plan"
)

// earlyExpertIds marks, on a target with programmatic launch (CUDA), each
// expert_matmul_combine_shared whose router ids and weights it may read before its
// programmatic-launch wait (gpu.AttrIdsEarly), so that it issues its first (expert, chunk)
// pair's weight loads while the experts' gate/up before it finish: the activations are
// then the only loads after the wait. Safe when every earlier dispatch that writes those
// bytes is an ancestor of one of the combine's direct predecessors in the plan's edges: a
// programmatic launch starts a kernel only once every group of each of its predecessors
// has passed its own wait (or exited), and a predecessor passes its wait only when the
// dispatches it depends on have finished, and so on back. In a decode step the router
// writes the ids, the experts' gate/up read them and the combine reads the gate/up's
// output, so the router is two edges back; with fuse-expert-routing the gate/up kernel
// routes itself, the ids' writer is the combine's direct predecessor, and nothing is
// marked.
func earlyExpertIds(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || !t.GPU.ProgrammaticLaunch || u.Plan == nil {
		return err
	}
	p := u.Plan
	preds := make([][]int, len(p.Dispatches))
	for _, e := range p.Edges {
		preds[e.To] = append(preds[e.To], e.From)
	}
	for i := range p.Dispatches {
		d := &p.Dispatches[i]
		if d.Op != "expert_matmul_combine_shared" || len(d.Args) < 4 {
			continue
		}
		if writtenBeforePreds(p, preds, i, d.Args[2]) && writtenBeforePreds(p, preds, i, d.Args[3]) {
			setAttr(d, gpu.AttrIdsEarly, true)
			u.count("early-expert-ids: "+d.Op, 1)
		}
	}
	return nil
}

// writtenBeforePreds says every dispatch before i that writes operand o's bytes is a
// proper ancestor of one of i's direct predecessors (and o's extent is fixed).
func writtenBeforePreds(p *plan.Plan, preds [][]int, i int, o plan.Operand) bool {
	if o.Type.HasSym(graph.SymN) || o.Type.HasSym(graph.SymC) {
		return false
	}
	r := plan.Range{Buffer: o.Buffer, Off: o.Offset, End: o.Offset + o.Type.Bytes(graph.Bindings{})}
	// Every dispatch that reaches one of i's predecessors, the predecessors themselves not
	// counted unless another predecessor's ancestors include them.
	before := map[int]bool{}
	var climb func(j int)
	climb = func(j int) {
		for _, a := range preds[j] {
			if !before[a] {
				before[a] = true
				climb(a)
			}
		}
	}
	for _, q := range preds[i] {
		climb(q)
	}
	for j := 0; j < i; j++ {
		for _, w := range p.Dispatches[j].Writes {
			if w.Overlaps(r) && !before[j] {
				return false
			}
		}
	}
	return true
}
