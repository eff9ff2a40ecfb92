package ops

import (
	"math/rand"
	"testing"
)

// The AVX-VNNI kernels are the AVX2 kernels with another instruction for the same exact
// integer sums, so every result is the AVX2 kernel's to the bit: the tile kernel over odd
// and even row counts and chunks of longer rows, the row kernel over rows back to back,
// one to five blocks, with activations of both signs at full range (int8's ±127, where an
// int16 partial sum of the AVX2 kernel is largest). Skipped on machines without AVX-VNNI
// (and without AVX2, whose kernels are the reference).
func TestAVXVNNIKernelsGiveAVX2Bits(t *testing.T) {
	tile, row := int8TileKernelSets["avxvnni"], int8RowKernelSets["avxvnni"]
	tile2, row2 := int8TileKernelSets["avx2"], int8RowKernelSets["avx2"]
	if tile == nil || tile2 == nil {
		t.Skip("this machine has no AVX-VNNI kernels")
	}
	rng := rand.New(rand.NewSource(47))
	for blocks := 1; blocks <= 5; blocks++ {
		G := blocks * int8Groups
		for _, rows := range []int{1, 2, 7, 65} {
			in := newInt8TileInputs(rng, blocks, rows)
			w, acts := in.w, in.acts
			scales, biases := u16(w.Scales), u16(w.Biases)
			got, want := make([][8]float32, rows), make([][8]float32, rows)
			for r := range got {
				for p := range got[r] {
					got[r][p] = float32(r%3) - float32(p)
					want[r][p] = got[r][p]
				}
			}
			tile(w.Data, in.codeStride, scales, biases, in.rowGroups, blocks, acts, in.rowStride, got)
			tile2(w.Data, in.codeStride, scales, biases, in.rowGroups, blocks, acts, in.rowStride, want)
			for r := range got {
				if got[r] != want[r] {
					t.Fatalf("tile blocks=%d rows=%d: row %d %v, avx2 %v", blocks, rows, r, got[r], want[r])
				}
			}

			// The row kernel: rows of exactly the blocks read, back to back.
			dense := quantize(randTensor(rng, 0.1, rows, G*int8Group), 4, int8Group)
			one := acts[:int8RowBytes(G)]
			gotRow, wantRow := make([]float32, rows), make([]float32, rows)
			row(dense.Data, u16(dense.Scales), u16(dense.Biases), blocks, one, gotRow)
			row2(dense.Data, u16(dense.Scales), u16(dense.Biases), blocks, one, wantRow)
			for r := range gotRow {
				if gotRow[r] != wantRow[r] {
					t.Fatalf("row blocks=%d rows=%d: row %d %v, avx2 %v", blocks, rows, r, gotRow[r], wantRow[r])
				}
			}
		}
	}
}
