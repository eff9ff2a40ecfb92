package graph

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestTextRoundTrip(t *testing.T) {
	g, err := Parse(sampleText)
	if err != nil {
		t.Fatal(err)
	}
	if got := Print(g); got != sampleText {
		t.Fatalf("round trip differs:\n%s\nwant:\n%s", got, sampleText)
	}
	if err := Check(g, newTestOps()); err != nil {
		t.Fatalf("sample graph should check: %v", err)
	}
	attrs := g.Values[7].Attrs
	if _, ok := attrs["scale"].(float64); !ok {
		t.Errorf("scale=2.0 parsed as %T, want float64", attrs["scale"])
	}
	if _, ok := attrs["list"].([]int64); !ok {
		t.Errorf("list parsed as %T, want []int64", attrs["list"])
	}
	if g.Values[2].Name != "odd name #1" {
		t.Errorf("quoted name parsed as %q", g.Values[2].Name)
	}
	if got := g.Values[12].Type.String(); got != "f32[T,2,8]" {
		t.Errorf("reshape type %s", got)
	}
}

func TestParseRenumbersHandWrittenIDs(t *testing.T) {
	g, err := Parse("graph x\nv10 = input <f32[4]> @a\nv3 = add <f32[4]> v10 v10\noutput o = v3\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "graph x\nv0 = input <f32[4]> @a\nv1 = add <f32[4]> v0 v0\noutput o = v1\n"
	if got := Print(g); got != want {
		t.Fatalf("got\n%s", got)
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"undefined arg":   "v0 = add <f32[4]> v1 v1",
		"duplicate id":    "v0 = input <f32[4]> @a\nv0 = input <f32[4]> @b",
		"bad dtype":       "v0 = input <f31[4]> @a",
		"bad dim":         "v0 = input <f32[4,Q]> @a",
		"quant no group":  "v0 = weight <q4[4]> @a",
		"no type":         "v0 = input @a",
		"bad attr":        "v0 = input <f32[4]> {eps} @a",
		"unterminated":    "v0 = input <f32[4]> {eps=\"x} @a",
		"output undef":    "output o = v4",
		"value after out": "v0 = input <f32[4]> @a\noutput o = v0\nv1 = add <f32[4]> v0 v0",
		"text after name": "v0 = input <f32[4]> @a v1",
	}
	for name, text := range cases {
		if _, err := Parse(text); err == nil {
			t.Errorf("%s: parsed without error:\n%s", name, text)
		} else if !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: error does not name the line: %v", name, err)
		}
	}
}

func TestTypeText(t *testing.T) {
	for _, s := range []string{"f32[T,2048]", "q4g64[256,512,2048]", "q8g32[1,8]", "(f32[T,4096],f32[32,128,128])",
		"i32[]", "f32[8*T,N-1]", "((f32[2],i32[2]),bf16[3])"} {
		ty, err := ParseType(s)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		if ty.String() != s {
			t.Errorf("%s printed back as %s", s, ty)
		}
		b, _ := json.Marshal(struct{ T Type }{ty})
		var back struct{ T Type }
		if err := json.Unmarshal(b, &back); err != nil || !back.T.Equal(ty) {
			t.Errorf("%s: JSON round trip %s -> %v (%v)", s, b, back.T, err)
		}
	}
	if ty := TensorType(F32, T, D(8)).Substitute(SymT, 4); ty.String() != "f32[4,8]" {
		t.Errorf("substitute T=4: %s", ty)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	g, err := Parse(sampleText)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var back Graph
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if Print(&back) != sampleText {
		t.Fatalf("JSON round trip changed the graph:\n%s", Print(&back))
	}
	dot := DOT(g, newTestOps())
	for _, want := range []string{`digraph "sample"`, "v5 -> v6;", "shape=doubleoctagon", `label="y"`} {
		if !strings.Contains(dot, want) {
			t.Errorf("DOT lacks %q", want)
		}
	}
}
