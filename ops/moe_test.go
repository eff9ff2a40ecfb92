package ops

import (
	"fmt"
	"math"
	"math/rand"
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

// routeTokens keeps the top k in one pass; it must pick what k passes over the
// probabilities pick, each taking the largest left with ties to the lower id, with the
// same weights to the bit: on random logits, on logits with many ties (few distinct
// values), with k from 1 to E, and with a non-finite logit, which both report.
func TestRouteTokensMatchesPasses(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for _, E := range []int{1, 3, 8, 37, 256} {
		for _, k := range []int{1, 2, min(8, E), E} {
			for _, distinct := range []int{0, 1, 3} { // 0: continuous values
				const T = 5
				logits := make([]float32, T*E)
				for i := range logits {
					if distinct > 0 {
						logits[i] = float32(rng.Intn(distinct))
					} else {
						logits[i] = float32(rng.NormFloat64() * 3)
					}
				}
				if E > 2 && k == 2 { // one non-finite logit: still routable, with NaN weights after +Inf
					logits[1*E+E/2] = float32([]float64{math.NaN(), math.Inf(1), math.Inf(-1)}[distinct%3])
				}
				if E >= 8 && k == min(8, E) { // NaN in all but k-1 logits: fewer than k to pick
					for e := k - 1; e < E; e++ {
						logits[3*E+e] = float32(math.NaN())
					}
				}
				w, ids := make([]float32, T*k), make([]int32, T*k)
				wantW, wantIDs := make([]float32, T*k), make([]int32, T*k)
				got := routeTokens(true, logits, w, ids, E, k, 0, T)
				want := routeTokensByPasses(logits, wantW, wantIDs, E, k, 0, T)
				name := fmt.Sprintf("E=%d k=%d distinct=%d", E, k, distinct)
				if (E >= 8 && k == min(8, E)) != (want == 3) {
					t.Fatalf("%s: the passes report token %d as the first bad one", name, want)
				}
				if got != want {
					t.Fatalf("%s: first bad token %d, the passes say %d", name, got, want)
				}
				n := T * k
				if want >= 0 {
					n = want * k // the tokens before the bad one
				}
				for i := 0; i < n; i++ {
					if ids[i] != wantIDs[i] || math.Float32bits(w[i]) != math.Float32bits(wantW[i]) {
						t.Fatalf("%s: pick %d of token %d: expert %d weight %v, the passes: expert %d weight %v",
							name, i%k, i/k, ids[i], w[i], wantIDs[i], wantW[i])
					}
				}
			}
		}
	}
}

// routeTokensByPasses is routeTokens as k passes, each taking the largest probability
// left (ties to the lower id): the definition the one-pass list is held to.
func routeTokensByPasses(logits, weights []float32, ids []int32, E, k, lo, hi int) int {
	p := make([]float32, E)
	for t := lo; t < hi; t++ {
		row := logits[t*E : (t+1)*E]
		maxL := float32(math.Inf(-1))
		for _, l := range row {
			maxL = max(maxL, l)
		}
		var sum float32
		for e, l := range row {
			p[e] = float32(math.Exp(float64(l - maxL)))
			sum += p[e]
		}
		var picked float32
		for j := 0; j < k; j++ {
			best := -1
			for e, pe := range p {
				if pe >= 0 && (best < 0 || pe > p[best]) {
					best = e
				}
			}
			if best < 0 {
				return t
			}
			ids[t*k+j] = int32(best)
			weights[t*k+j] = p[best] / sum
			picked += p[best] / sum
			p[best] = -1 // taken
		}
		for j := 0; j < k; j++ {
			weights[t*k+j] /= picked
		}
	}
	return -1
}
