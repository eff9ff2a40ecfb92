//go:build linux

package cuda

import (
	"fmt"

	"pistil/ops/kernels"
	"pistil/plan"
)

// checkRouterQ8Order refuses a plan in which two router_q8 dispatches may run at once.
// Every router_q8 launch shares one counter and one logits array (module globals,
// ops/kernels/moe_cuda.k): two launches in flight together would count each other's
// groups and route from each other's logits. Plans never overlap one another (every plan
// runs on the device's one stream), so a plan is safe when each router_q8 dispatch is
// reached, through the plan's dependency edges, from the one before it: the CUDA graph
// then runs them one after another, and launched one by one in plan order they are too.
func checkRouterQ8Order(p *plan.Plan) error {
	var routers []int // positions in p.Dispatches, in plan order
	for i, d := range p.Dispatches {
		if d.Kernel == kernels.KernelRouterQ8 {
			routers = append(routers, i)
		}
	}
	if len(routers) < 2 {
		return nil
	}
	pos := make(map[int]int, len(p.Dispatches))
	for i, d := range p.Dispatches {
		pos[d.Index] = i
	}
	succ := make([][]int, len(p.Dispatches))
	for _, e := range p.Edges {
		from, ok1 := pos[e.From]
		to, ok2 := pos[e.To]
		if !ok1 || !ok2 {
			return fmt.Errorf("plan %s: edge %d -> %d names a dispatch the plan lacks", p.Phase, e.From, e.To)
		}
		succ[from] = append(succ[from], to)
	}
	for k := 1; k < len(routers); k++ {
		a, b := routers[k-1], routers[k]
		if !reaches(succ, a, b) {
			da, db := p.Dispatches[a], p.Dispatches[b]
			return fmt.Errorf("plan %s: dispatches %d (%s) and %d (%s) both run router_q8, which share one counter, but no dependency edge orders %d before %d, so they may run at once: compile with -pass=router-matvec/off (pipeline.toml [passes] router-matvec = false)",
				p.Phase, da.Index, da.Label, db.Index, db.Label, da.Index, db.Index)
		}
	}
	return nil
}

// reaches says whether dispatch position to is reachable from from along succ.
func reaches(succ [][]int, from, to int) bool {
	seen := make([]bool, len(succ))
	stack := []int{from}
	seen[from] = true
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, m := range succ[n] {
			if m == to {
				return true
			}
			if !seen[m] {
				seen[m] = true
				stack = append(stack, m)
			}
		}
	}
	return false
}
