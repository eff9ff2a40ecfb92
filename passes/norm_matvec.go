package passes

import (
	"slices"

	"pistil/gpu"
	"pistil/graph"
)

// normMatvec folds, on a GPU target with tensor cores (CUDA), each add_rms_norm of a
// decode step into the router projection (q8) that reads its normed row:
// add_rms_norm_matmuls on matvec_q8_norm, which sums the row's squares itself and scales
// its products by the norm (gpu/fused_norm_matvec.go), so the post-attention norm is no
// longer a launch and a stage of its own between the residual add and the router (40 of
// each in a decode step of the 35B-A3B). normMatvecQ4 does the same for the q4
// projections (the layers' input projections, the lm_head) on the staged twins.
func normMatvec(u *Unit) error { return foldNorms(u, "norm-matvec", graph.Q8) }

// normMatvecQ4 is normMatvec for q4 projections, on matvec_fused_norm_staged_q4: every
// layer's input projections but the first layer's (whose norm reads the embedding, no
// residual add) and the lm_head. Its kernel has the norm only in the staged tensor-core
// twins' form, so it fuses only when mma-matvec and staged-matvec will mark the dispatch
// for them (both on, imma-matvec off, the shape theirs). Off by default: slower on the
// H100 (cuda/README.md, nineteenth session).
func normMatvecQ4(u *Unit) error { return foldNorms(u, "norm-matvec-q4", graph.Q4) }

// foldNorms is the rewrite of both passes, for projections of weights of dtype dt. Of the
// norm's readers it takes the projection with the most rows (matmuls or qmatmul of the
// row alone): the router's gate rather than the shared expert's one-row gate. The fused
// op still writes the sum and, where another dispatch reads it, the normed row, so the
// residual stream and the other readers (the experts beside the router) are as before.
//
// It runs after expand-for-backend, so it sees the router's projection as the qmatmul
// that matmul_router expands into on a GPU. Metal keeps its norms: matvec_q8_norm is a
// portable kernel and passes the Metal emulator's cases, but no Mac has timed it.
func foldNorms(u *Unit, pass string, dt graph.DType) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || !t.GPU.TensorCores {
		return err
	}
	staged := u.passOn("mma-matvec") && u.passOn("staged-matvec") && !u.passOn("imma-matvec")
	bind := graph.Bindings{T: u.Phase.Tokens, N: 1}
	r := newRewriter(u, pass)
	for _, v := range u.Graph.Values {
		if !is(v, "add_rms_norm") || !r.free(v) {
			continue
		}
		sums, row, ok := normResults(r, v)
		if !ok {
			continue
		}
		var proj *graph.Value
		var args []*graph.Value
		rows := 0
		for _, c := range rowReaders(r, row) {
			x := c.Args[0]
			if !is(c, "matmuls", "qmatmul") || !r.free(c) || slices.Contains(c.Args[1:], x) || c.Args[1].Type.DType != dt {
				continue
			}
			cand := append([]*graph.Value{v.Args[0], v.Args[1], v.Args[2]}, c.Args[1:]...)
			if !t.GPU.NormMatvecShape(argOperands(cand, bind), staged) {
				continue
			}
			if n := projectionRows(c, bind); n > rows {
				proj, args, rows = c, cand, n
			}
		}
		if proj == nil {
			continue
		}
		absorbed := []*graph.Value{v, proj}
		if x := proj.Args[0]; x != row && r.only(x) {
			absorbed = append(absorbed, x) // the decode step's last_row of its one row
		}
		attrs := graph.Attrs{"eps": v.Attrs["eps"]}
		if rowReadOnlyBy(r, row, absorbed) {
			attrs[gpu.AttrNormRowUnread] = true
		}
		fused, err := r.fuse("add_rms_norm→"+proj.Op, "add_rms_norm_matmuls", proj.Name, attrs, args, absorbed...)
		if err != nil {
			return err
		}
		for _, s := range sums {
			if err := r.replace(s, r.elem(fused, 0, s.Name)); err != nil {
				return err
			}
		}
		if err := r.replace(row, r.elem(fused, 1, row.Name)); err != nil {
			return err
		}
		if proj.Op == "qmatmul" {
			if err := r.replace(proj, r.elem(fused, 2, proj.Name)); err != nil {
				return err
			}
			continue
		}
		for _, s := range r.users[proj.ID] { // matmuls: its results are selected
			if err := r.replace(s, r.elem(fused, 2+int(s.Attrs.Int("index")), s.Name)); err != nil {
				return err
			}
		}
	}
	r.finish()
	return nil
}

// normResults splits the readers of an add_rms_norm into the selects of its sum and the
// one select of its normed row; ok is false when anything else reads it or the row is
// selected more than once.
func normResults(r *rewriter, v *graph.Value) (sums []*graph.Value, row *graph.Value, ok bool) {
	for _, w := range r.users[v.ID] {
		if !is(w, graph.OpSelect) || !r.free(w) {
			return nil, nil, false
		}
		switch w.Attrs.Int("index") {
		case 0:
			sums = append(sums, w)
		case 1:
			if row != nil {
				return nil, nil, false
			}
			row = w
		}
	}
	return sums, row, row != nil
}

// rowReaders are the values that read a normed row as their first argument: its readers,
// and the readers of a last_row of it that is the row itself (the lm_head's, in a step of
// one token).
func rowReaders(r *rewriter, row *graph.Value) []*graph.Value {
	var out []*graph.Value
	for _, c := range r.users[row.ID] {
		if is(c, "last_row") && c.Type.Equal(row.Type) && r.free(c) {
			for _, cc := range r.users[c.ID] {
				if len(cc.Args) > 0 && cc.Args[0] == c {
					out = append(out, cc)
				}
			}
			continue
		}
		if len(c.Args) > 0 && c.Args[0] == row {
			out = append(out, c)
		}
	}
	return out
}

// rowReadOnlyBy says the normed row's every reader is among the fused values (the
// projection, a last_row of the row that only it reads), and it is no graph output: the
// fused kernel need not write it.
func rowReadOnlyBy(r *rewriter, row *graph.Value, fused []*graph.Value) bool {
	for _, o := range r.u.Graph.Outputs {
		if o.Value == row {
			return false
		}
	}
	for _, c := range r.users[row.ID] {
		if !slices.Contains(fused, c) {
			return false
		}
	}
	return true
}

// projectionRows is the output rows of a matmuls or qmatmul: the sum of its weights' rows.
func projectionRows(c *graph.Value, bind graph.Bindings) int {
	n := 0
	for _, w := range c.Args[1:] {
		if shape := w.Type.Shape.Eval(bind); len(shape) > 0 {
			n += shape[0]
		}
	}
	return n
}

// passOn says whether the named pass runs in this compilation (Run records which do; a
// unit no driver ran says none).
func (u *Unit) passOn(name string) bool { return u.enabled[name] }
