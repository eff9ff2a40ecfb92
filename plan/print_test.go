package plan

import (
	"strings"
	"testing"

	"pistil/graph"
)

func smallPlan() *Plan {
	f := graph.TensorType(graph.F32, graph.D(1), graph.D(8))
	p := &Plan{
		Model: "m", Phase: "decode", Tokens: 1, Context: 16,
		Buffers: []Buffer{
			{ID: 0, Kind: Scratch, Name: "arena", Bytes: 512},
			{ID: 1, Kind: Weight, Name: "w", Type: graph.QuantType(graph.Q4, 64, graph.D(8), graph.D(64)), Bytes: 320},
			{ID: 2, Kind: State, Name: "layers.0.k_cache", Type: graph.TensorType(graph.BF16, graph.N, graph.D(4)), PerN: 8},
			{ID: 3, Kind: State, Name: "layers.1.recurrent_state", Type: graph.TensorType(graph.F32, graph.D(4)), Bytes: 16},
		},
		Dispatches: []Dispatch{
			{Index: 0, Op: "a", Results: []Operand{{Buffer: 0, Type: f}}, Writes: []Range{{0, 0, 32}}, Group: 0, WeightBytesRead: 320, BytesRead: 400,
				Attrs: graph.Attrs{"eps": 1e-6, "k": int64(8), "theta": 2.0, "form": "recurrent", "dims": []int64{1, 2}}},
			{Index: 1, Op: "b", Args: []Operand{{Buffer: 0, Type: f}}, Results: []Operand{{Buffer: 0, Offset: 256, Type: f}},
				Reads: []Range{{0, 0, 32}}, Writes: []Range{{2, 0, ToEnd}}, Group: 1},
			{Index: 2, Op: "c", Results: []Operand{{Buffer: 3, Type: f}}, Group: 1},
		},
		Groups: []Group{{First: 0, Last: 0}, {First: 1, Last: 2, Barrier: "RAW: d1 b reads arena[0,32) written by d0 a"}},
		Edges:  []Edge{{From: 0, To: 1}},
	}
	p.Totals = ComputeTotals(p)
	return p
}

func TestTotalsAndText(t *testing.T) {
	p := smallPlan()
	tot := p.Totals
	if tot.Dispatches != 3 || tot.Groups != 2 || tot.Barriers != 1 || tot.LongestChain != 2 ||
		tot.ScratchBytes != 512 || tot.StateBytes != 16 || tot.KVBytesPerToken != 8 || tot.WeightBytesRead != 320 {
		t.Errorf("totals %+v", tot)
	}
	text := p.Text()
	for _, want := range []string{
		"dispatches 3, concurrent groups 2, barriers 1, longest dependency chain 2",
		"  -- barrier: RAW: d1 b reads arena[0,32) written by d0 a",
		"  g01 d1 b (concurrent) -> layers.0.k_cache[0,end)",
		"  g00 d0 a -> arena[0,32)",
		"b2 state layers.0.k_cache bf16[N,4] 0 B + 8 B*N",
		"recurrent_state 16 B",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("plan text lacks %q:\n%s", want, text)
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	p := smallPlan()
	data, err := Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Marshal(back)
	if string(again) != string(data) {
		t.Fatalf("round trip changed the plan:\n%s\n%s", data, again)
	}
	a := back.Dispatches[0].Attrs
	if _, ok := a["theta"].(float64); !ok {
		t.Errorf("theta=2.0 came back as %T", a["theta"])
	}
	if _, ok := a["k"].(int64); !ok {
		t.Errorf("k came back as %T", a["k"])
	}
	if !back.Buffers[1].Type.Equal(p.Buffers[1].Type) || back.Dispatches[1].Writes[0].End != ToEnd {
		t.Errorf("types or ranges changed: %+v", back.Buffers[1])
	}
}

func TestValidate(t *testing.T) {
	cases := map[string]func(p *Plan){
		"buffer id":  func(p *Plan) { p.Buffers[1].ID = 5 },
		"dispatch":   func(p *Plan) { p.Dispatches[1].Index = 7 },
		"operand":    func(p *Plan) { p.Dispatches[1].Args[0].Buffer = 9 },
		"group gap":  func(p *Plan) { p.Groups[1].First = 2 },
		"uncovered":  func(p *Plan) { p.Groups[1].Last = 1 },
		"edge order": func(p *Plan) { p.Edges[0] = Edge{From: 1, To: 0} },
		"group idx":  func(p *Plan) { p.Dispatches[0].Group = 4 },
	}
	for name, breakIt := range cases {
		p := smallPlan()
		breakIt(p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: Validate accepted a broken plan", name)
		}
	}
	if _, err := Unmarshal([]byte(`{"buffers": [{"id": 0, "type": "f33[2]"}]}`)); err == nil {
		t.Error("a bad type string decoded")
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567", 1669563648: "1,669,563,648"} {
		if got := Commas(n); got != want {
			t.Errorf("Commas(%d) = %s", n, got)
		}
	}
	if got := Bytes(62914560); got != "62,914,560 B (60.00 MiB)" {
		t.Errorf("Bytes: %s", got)
	}
	if got := LongestChain(4, []Edge{{0, 1}, {1, 3}, {0, 2}}); got != 3 {
		t.Errorf("LongestChain %d", got)
	}
}
