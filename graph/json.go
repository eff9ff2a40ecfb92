package graph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// MarshalJSON writes attrs as an object sorted by key whose numbers keep their kind: an
// integer prints bare and a float always carries a '.' or an exponent, so a JSON round
// trip gives back int64 and float64 exactly as the text format does.
func (a Attrs) MarshalJSON() ([]byte, error) {
	if a == nil {
		return []byte("null"), nil
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range a.Keys() {
		if i > 0 {
			buf.WriteByte(',')
		}
		key, _ := json.Marshal(k)
		buf.Write(key)
		buf.WriteByte(':')
		switch x := a[k].(type) {
		case string:
			s, _ := json.Marshal(x)
			buf.Write(s)
		case float64, float32:
			f := FormatAttr(x)
			if strings.ContainsAny(f, "IN") { // Inf and NaN have no JSON number form
				return nil, fmt.Errorf("attr %s = %s cannot be written as JSON", k, f)
			}
			buf.WriteString(f)
		default:
			if !ValidAttr(x) {
				return nil, fmt.Errorf("attr %s has unsupported type %T", k, x)
			}
			buf.WriteString(FormatAttr(x))
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON is the inverse of MarshalJSON.
func (a *Attrs) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*a = nil
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	out := make(Attrs, len(raw))
	for k, r := range raw {
		s := strings.TrimSpace(string(r))
		if strings.HasPrefix(s, "[") {
			var list []int64
			if err := json.Unmarshal(r, &list); err != nil {
				return fmt.Errorf("attr %s: %w", k, err)
			}
			if list == nil {
				list = []int64{}
			}
			out[k] = list
			continue
		}
		if strings.HasPrefix(s, `"`) {
			var str string
			if err := json.Unmarshal(r, &str); err != nil {
				return fmt.Errorf("attr %s: %w", k, err)
			}
			out[k] = str
			continue
		}
		v, err := ParseAttr(s)
		if err != nil {
			return fmt.Errorf("attr %s: %w", k, err)
		}
		out[k] = v
	}
	*a = out
	return nil
}

type jsonValue struct {
	ID    ID     `json:"id"`
	Op    string `json:"op"`
	Type  Type   `json:"type"`
	Attrs Attrs  `json:"attrs,omitempty"`
	Args  []ID   `json:"args,omitempty"`
	Name  string `json:"name,omitempty"`
}

type jsonOutput struct {
	Name  string `json:"name"`
	Value ID     `json:"value"`
}

type jsonGraph struct {
	Name    string       `json:"name"`
	Values  []jsonValue  `json:"values"`
	Outputs []jsonOutput `json:"outputs"`
}

// MarshalJSON writes the graph with args and outputs as value IDs.
func (g *Graph) MarshalJSON() ([]byte, error) {
	jg := jsonGraph{Name: g.Name, Values: make([]jsonValue, len(g.Values)), Outputs: []jsonOutput{}}
	for i, v := range g.Values {
		jv := jsonValue{ID: v.ID, Op: v.Op, Type: v.Type, Attrs: v.Attrs, Name: v.Name}
		for _, a := range v.Args {
			jv.Args = append(jv.Args, a.ID)
		}
		jg.Values[i] = jv
	}
	for _, o := range g.Outputs {
		jg.Outputs = append(jg.Outputs, jsonOutput{o.Name, o.Value.ID})
	}
	return json.Marshal(jg)
}

// UnmarshalJSON reads what MarshalJSON wrote; IDs must be dense and args defined first.
func (g *Graph) UnmarshalJSON(data []byte) error {
	var jg jsonGraph
	if err := json.Unmarshal(data, &jg); err != nil {
		return err
	}
	out := Graph{Name: jg.Name, Values: make([]*Value, len(jg.Values))}
	for i, jv := range jg.Values {
		if int(jv.ID) != i {
			return fmt.Errorf("value %d has id %d: ids must be dense", i, jv.ID)
		}
		v := &Value{ID: jv.ID, Op: jv.Op, Type: jv.Type, Attrs: jv.Attrs, Name: jv.Name}
		for _, a := range jv.Args {
			if a < 0 || int(a) >= i {
				return fmt.Errorf("v%d: arg v%d is not defined before it", i, a)
			}
			v.Args = append(v.Args, out.Values[a])
		}
		out.Values[i] = v
	}
	for _, o := range jg.Outputs {
		if o.Value < 0 || int(o.Value) >= len(out.Values) {
			return fmt.Errorf("output %s: no value v%d", o.Name, o.Value)
		}
		out.Outputs = append(out.Outputs, Output{o.Name, out.Values[o.Value]})
	}
	*g = out
	return nil
}

// DOT writes g for Graphviz: sources as boxes labelled with their binding, state updates
// as double octagons, outputs as bold ellipses.
func DOT(g *Graph, ops OpSet) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "digraph %s {\n  rankdir=TB;\n  node [fontname=\"monospace\" fontsize=10];\n", strconv.Quote(g.Name))
	for _, v := range g.Values {
		label := v.Ref() + " " + v.Op
		if len(v.Attrs) > 0 {
			label += " " + FormatAttrs(v.Attrs)
		}
		label += "\n" + v.Type.String()
		if v.Name != "" {
			label += "\n" + v.Name
		}
		shape := "ellipse"
		if def, ok := ops.Lookup(v.Op); ok {
			switch {
			case def.Has(Source):
				shape = "box"
			case def.Has(StateUpdate):
				shape = "doubleoctagon"
			case def.Has(View):
				shape = "note"
			}
		}
		fmt.Fprintf(&sb, "  %s [label=%s shape=%s];\n", v.Ref(), strconv.Quote(label), shape)
		for _, a := range v.Args {
			fmt.Fprintf(&sb, "  %s -> %s;\n", a.Ref(), v.Ref())
		}
	}
	for i, o := range g.Outputs {
		fmt.Fprintf(&sb, "  out%d [label=%s shape=ellipse style=bold];\n  %s -> out%d;\n", i, strconv.Quote(o.Name), o.Value.Ref(), i)
	}
	sb.WriteString("}\n")
	return sb.String()
}
