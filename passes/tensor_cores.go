package passes

import (
	"pistil/gpu"
	"pistil/plan"
)

// tensorCores marks, for a GPU target with tensor-core kernels, every matmul-family
// dispatch of a multi-token step whose shape would run on a SIMT tile
// (gpu.Target.TensorCoreShape) with gpu.AttrTensorCores, so select-kernels gives it the
// mma kernel. It runs on the plan, after the fused ops a backend expands (at T > 1 most
// of them) are dispatches of their own, so their matmuls are marked too. Off, every
// matmul runs on the portable SIMT kernels.
func tensorCores(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || !t.GPU.TensorCores || u.Plan == nil || u.Plan.Tokens < 2 {
		return err
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		in, _ := dispatchOperands(u.Plan, d)
		if !t.GPU.TensorCoreShape(d.Op, in) {
			continue
		}
		setAttr(d, gpu.AttrTensorCores, true)
		u.count("tensor-cores: "+d.Op, 1)
	}
	return nil
}

// expertTiles sizes the mma expert tiles by expert load: the height (routed rows per
// tile) that holds the rows an expert receives on average, T·k/E (gpu.ExpertTileFor).
// Off, every expert tile is 16 rows high.
func expertTiles(u *Unit) error {
	if u.Plan == nil {
		return nil
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if !d.Attrs.Bool(gpu.AttrTensorCores) || (d.Op != "expert_matmul" && d.Op != "expert_qmatmul") {
			continue
		}
		in, _ := dispatchOperands(u.Plan, d)
		w, ids := in[1], in[2]
		if len(w.Shape) != 3 || len(ids.Shape) != 2 {
			continue // the lowering reports the bad shape
		}
		tile := gpu.ExpertTileFor(ids.Shape[0]*ids.Shape[1], w.Shape[0])
		setAttr(d, gpu.AttrExpertTile, int64(tile))
		u.count("expert-tiles: "+d.Op, 1)
	}
	return nil
}

// batchedMatvec marks, for a GPU target, the q4 matmuls of a multi-token step with few
// rows (gpu.BatchedMatvecShape: a step of at most 128 tokens, routed experts receiving at
// most 8 rows each on average: an agent's turn of a few hundred tokens) with
// gpu.AttrBatchedMatvec, so select-kernels gives them the batched matrix-vector kernels,
// which read each weight once per 8 rows. Dispatches the tensor-cores pass marked keep
// their mma kernel. Off, they run on the SIMT tiles, which at a few rows per tile pay for
// staging a full tile (expert_tiled: the whole expert's weights times 16).
func batchedMatvec(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || u.Plan == nil || u.Plan.Tokens < 2 {
		return err
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if d.Attrs.Bool(gpu.AttrTensorCores) {
			continue
		}
		in, _ := dispatchOperands(u.Plan, d)
		if !gpu.BatchedMatvecShape(d.Op, in) {
			continue
		}
		setAttr(d, gpu.AttrBatchedMatvec, true)
		u.count("batched-matvec: "+d.Op, 1)
	}
	return nil
}

// setAttr sets one attribute on a copy of the dispatch's attributes (lower may share
// the map with the graph value, and fusions share maps between values).
func setAttr(d *plan.Dispatch, key string, v any) {
	a := d.Attrs.Clone()
	if a == nil {
		a = map[string]any{}
	}
	a[key] = v
	d.Attrs = a
}
