package graph

import (
	"strings"
	"testing"
)

// mutate parses the sample, applies edit to its text and returns the Check error.
func checkEdited(t *testing.T, old, new string) error {
	t.Helper()
	text := strings.Replace(sampleText, old, new, 1)
	if text == sampleText {
		t.Fatalf("edit %q not applied", old)
	}
	g, err := Parse(text)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return Check(g, newTestOps())
}

func TestCheckFindsViolations(t *testing.T) {
	cases := []struct{ name, old, new, want string }{
		{"arg count", "v6 = matmul <f32[T,16]> v5 v1", "v6 = matmul <f32[T,16]> v5 v1 v1", "has 3 args"},
		{"wrong type", "v6 = matmul <f32[T,16]>", "v6 = matmul <f32[T,17]>", "args give f32[T,16]"},
		{"infer error", "v6 = matmul <f32[T,16]> v5 v1", "v6 = matmul <f32[T,16]> v5 v2", "type inference"},
		{"missing attr", "{eps=1e-06} ", "", `missing attr "eps"`},
		{"unknown op", "v11 = read", "v11 = frob", `unknown op "frob"`},
		{"source args", "v2 = weight <bf16[8]> @\"odd name #1\"", "v2 = weight <bf16[8]> v0 @w", "source op with 1 args"},
		{"source unnamed", "v0 = input <f32[T,8]> @tokens", "v0 = input <f32[T,8]>", "without a binding name"},
		{"read stale state", "v11 = read <f32[T,8]> v5 v10", "v11 = read <f32[T,8]> v5 v3", "after v10 updated it in place"},
		{"double update", "v11 = read <f32[T,8]> v5 v10", "v11 = append <f32[N,8]> v3 v5", "already updated by v10"},
		{"final not output", "output layers.0.cache = v10\n", "", "final version v10 is not the output named layers.0.cache"},
		{"stale output", "output h = v11", "output h = v3", "superseded"},
		{"dup output", "output h = v11", "output y = v11", "listed twice"},
	}
	for _, c := range cases {
		err := checkEdited(t, c.old, c.new)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestCheckStructure(t *testing.T) {
	g, _ := Parse(sampleText)
	g.Values[5].Args[0] = &Value{ID: 0, Op: "input"} // not of this graph
	if err := Check(g, newTestOps()); err == nil || !strings.Contains(err.Error(), "not a value of this graph") {
		t.Errorf("foreign arg: %v", err)
	}
	g, _ = Parse(sampleText)
	g.Values[5].Args[0] = g.Values[6] // use before def
	if err := Check(g, newTestOps()); err == nil || !strings.Contains(err.Error(), "topological order") {
		t.Errorf("order: %v", err)
	}
	g, _ = Parse(sampleText)
	g.Values[3].ID = 7
	if err := Check(g, newTestOps()); err == nil || !strings.Contains(err.Error(), "dense") {
		t.Errorf("ids: %v", err)
	}
	g, _ = Parse(sampleText)
	g.Values[5].Attrs["eps"] = struct{}{}
	if err := Check(g, newTestOps()); err == nil || !strings.Contains(err.Error(), "unsupported type") {
		t.Errorf("attr type: %v", err)
	}
}

// A state update that also reads another state: its updated state is the version of its
// result's type; the other is a read, which must come before that state's own update.
func TestCheckStateUpdateReadingAnotherState(t *testing.T) {
	// step reads the conv state (v4) and updates the cache (v10); the scan after it then
	// updates the conv state.
	const reads = `graph reads
v0 = input <f32[T,8]> @tokens
v1 = state <f32[N,8]> @layers.0.cache
v2 = state <bf16[3,16]> @layers.0.conv_state
v3 = step <(f32[3,16],f32[N,8])> v2 v1
v4 = select <f32[N,8]> {index=1} v3
v5 = scan <(f32[T,8],bf16[3,16])> {flag=true, form="recurrent", list=[1,-2], scale=2.0} v0 v2
v6 = select <bf16[3,16]> {index=1} v5
output layers.0.cache = v4
output layers.0.conv_state = v6
`
	g, err := Parse(reads)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(g, newTestOps()); err != nil {
		t.Fatalf("a read of another state: %v", err)
	}
	_, stateArg, err := StateVersions(g, newTestOps())
	if err != nil || stateArg[3] != 1 {
		t.Errorf("step's state argument %d (%v), want 1 (the cache, its result's state type)", stateArg[3], err)
	}
	// Both args of the updated state's type: which one is updated is ambiguous.
	g, _ = Parse(strings.Replace(reads, "v3 = step <(f32[3,16],f32[N,8])> v2 v1", "v3 = step <(f32[N,8],f32[N,8])> v1 v1", 1))
	if _, _, err := StateVersions(g, newTestOps()); err == nil || !strings.Contains(err.Error(), "two state versions of its updated state's type") {
		t.Errorf("ambiguous update: %v", err)
	}
	// The read after the conv state's update would read it stale.
	g, _ = Parse(reads)
	g.Values[3], g.Values[5] = g.Values[5], g.Values[3]
	g.Values[4], g.Values[6] = g.Values[6], g.Values[4]
	g.Renumber()
	if err := Check(g, newTestOps()); err == nil || !strings.Contains(err.Error(), "updated it in place") {
		t.Errorf("a read of the conv state after its update: %v", err)
	}
}
