package ops

import (
	"slices"
	"strings"
	"testing"
)

// routedRows groups rows by expert in order of first use, rows in order, and leaves its
// pooled expert table all zero after a bad id as after a good call, so a later call with
// other experts groups as if it were the first.
func TestRoutedRowsGroupsByFirstUse(t *testing.T) {
	for round := 0; round < 2; round++ {
		// Three tokens, top-2, of 6 experts: 4 twice (rows 1 and 4), 0 twice (rows 2, 5).
		rowsOf, used, err := routedRows("op", []int32{5, 4, 0, 3, 4, 0}, 2, 6)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{5, 4, 0, 3}; !slices.Equal(used, want) {
			t.Fatalf("round %d: used %v, want %v", round, used, want)
		}
		want := [][]int{{0}, {1, 4}, {2, 5}, {3}}
		if !slices.EqualFunc(rowsOf, want, slices.Equal[[]int]) {
			t.Fatalf("round %d: rows %v, want %v", round, rowsOf, want)
		}
		_, _, err = routedRows("expert_matmul", []int32{1, 3, 6, 0}, 2, 6)
		if err == nil || !strings.Contains(err.Error(), "expert_matmul: expert id 6 at (1, 0) is outside [0, 6)") {
			t.Fatalf("round %d: an id past E: %v", round, err)
		}
		_, _, err = routedRows("expert_matmul", []int32{-1}, 1, 6)
		if err == nil || !strings.Contains(err.Error(), "expert id -1 at (0, 0)") {
			t.Fatalf("round %d: a negative id: %v", round, err)
		}
	}
}
