package serve

import (
	"testing"
)

// Tests for bugs found in an adversarial review of the server. Each one failed before
// its fix.

// top_p 0 asks for the smallest nucleus there is: the single most probable token. The
// engine's sampler reads 0 as "no nucleus filter", so the server must translate it, or
// top_p 0 samples from the whole distribution, the opposite of what the client asked.
func TestReviewTopPZeroIsGreedy(t *testing.T) {
	ts := startServer(t, nil)
	greedy := ts.chat(t, chatBody("the top token only", map[string]any{"max_tokens": 12}))
	for _, seed := range []int{1, 2, 3} {
		got := ts.chat(t, chatBody("the top token only", map[string]any{"max_tokens": 12, "temperature": 1, "top_p": 0, "seed": seed}))
		if got.reasoning() != greedy.reasoning() || got.content() != greedy.content() {
			t.Fatalf("seed %d: top_p 0 gave %q/%q, greedy gave %q/%q", seed,
				got.reasoning(), got.content(), greedy.reasoning(), greedy.content())
		}
	}
}
