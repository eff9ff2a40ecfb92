package plan

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// ComputeTotals derives a plan's totals from its dispatches, groups, edges and buffers.
func ComputeTotals(p *Plan) Totals {
	t := Totals{Dispatches: len(p.Dispatches), Groups: len(p.Groups)}
	if t.Groups > 0 {
		t.Barriers = t.Groups - 1
	}
	for _, b := range p.Buffers {
		switch b.Kind {
		case Scratch:
			t.ScratchBytes += b.Bytes
		case State:
			t.StateBytes += b.Bytes
			t.KVBytesPerToken += b.PerN
		}
	}
	for _, d := range p.Dispatches {
		t.BytesRead += d.BytesRead
		t.BytesWritten += d.BytesWritten
		t.Flops += d.Flops
		t.WeightBytesRead += d.WeightBytesRead
	}
	t.LongestChain = LongestChain(len(p.Dispatches), p.Edges)
	return t
}

// LongestChain is the number of dispatches on the longest path of the DAG given by
// edges over n dispatches (edges point forward).
func LongestChain(n int, edges []Edge) int {
	depth := make([]int, n)
	for i := range depth {
		depth[i] = 1
	}
	sorted := append([]Edge(nil), edges...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].To < sorted[j].To })
	longest := 0
	for _, e := range sorted {
		if e.From >= 0 && e.From < e.To && e.To < n {
			depth[e.To] = max(depth[e.To], depth[e.From]+1)
		}
	}
	for _, d := range depth {
		longest = max(longest, d)
	}
	return longest
}

// StateSplit groups the fixed-size state buffers by the last component of their name
// (recurrent_state, conv_state), for reports.
func (p *Plan) StateSplit() map[string]int64 {
	out := map[string]int64{}
	for _, b := range p.Buffers {
		if b.Kind == State && b.Bytes > 0 {
			kind := b.Name[strings.LastIndexByte(b.Name, '.')+1:]
			out[kind] += b.Bytes
		}
	}
	return out
}

// Summary is the per-phase header: counts, memory and traffic.
func (p *Plan) Summary() string {
	t := p.Totals
	var sb strings.Builder
	fmt.Fprintf(&sb, "plan %s %s T=%d C=%d", p.Model, p.Phase, p.Tokens, p.Context)
	if p.Backend != "" {
		fmt.Fprintf(&sb, " backend %s", p.Backend)
	}
	sb.WriteString("\n")
	fmt.Fprintf(&sb, "  passes: %s\n", strings.Join(p.Passes, " "))
	fmt.Fprintf(&sb, "  dispatches %d, concurrent groups %d, barriers %d, longest dependency chain %d\n",
		t.Dispatches, t.Groups, t.Barriers, t.LongestChain)
	fmt.Fprintf(&sb, "  scratch %s, state %s fixed", Bytes(t.ScratchBytes), Bytes(t.StateBytes))
	split := p.StateSplit()
	keys := make([]string, 0, len(split))
	for k := range split {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %s", k, Bytes(split[k]))
		}
		fmt.Fprintf(&sb, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&sb, " + KV %s B per context token\n", Commas(t.KVBytesPerToken))
	fmt.Fprintf(&sb, "  per step: weights read %s, bytes read %s, written %s, %s flops\n",
		Bytes(t.WeightBytesRead), Bytes(t.BytesRead), Bytes(t.BytesWritten), Commas(t.Flops))
	return sb.String()
}

// Text prints the whole plan: the summary, the buffers, then one line per dispatch in
// the form `g07 d3 qmatmul layers.12.mlp.experts.gate_proj (concurrent) -> arena[...]`,
// with each barrier and its reason on the line before the group it opens.
func (p *Plan) Text() string {
	var sb strings.Builder
	sb.WriteString(p.Summary())
	sb.WriteString("buffers:\n")
	for _, b := range p.Buffers {
		size := Commas(b.Bytes) + " B"
		if b.PerN != 0 {
			size += fmt.Sprintf(" + %s B*N", Commas(b.PerN))
		}
		typ := ""
		if b.Kind != Scratch {
			typ = " " + b.Type.String()
		}
		fmt.Fprintf(&sb, "  b%d %s %s%s %s\n", b.ID, b.Kind, b.Name, typ, size)
	}
	sb.WriteString("dispatches:\n")
	name := func(id int) string {
		if id >= 0 && id < len(p.Buffers) {
			return p.Buffers[id].Name
		}
		return fmt.Sprintf("b%d", id)
	}
	for gi, g := range p.Groups {
		if g.Barrier != "" {
			fmt.Fprintf(&sb, "  -- barrier: %s\n", g.Barrier)
		}
		for i := g.First; i <= g.Last && i < len(p.Dispatches); i++ {
			d := p.Dispatches[i]
			fmt.Fprintf(&sb, "  g%02d d%d %s", gi, d.Index, d.Op)
			if d.Label != "" {
				sb.WriteString(" " + d.Label)
			}
			if g.Last > g.First {
				sb.WriteString(" (concurrent)")
			}
			if d.Kernel != "" {
				fmt.Fprintf(&sb, " [%s %dx%dx%d x%d]", d.Kernel, d.Grid[0], d.Grid[1], d.Grid[2], d.Block)
			}
			writes := make([]string, len(d.Writes))
			for j, w := range d.Writes {
				writes[j] = w.Format(name(w.Buffer))
			}
			fmt.Fprintf(&sb, " -> %s\n", strings.Join(writes, " "))
		}
	}
	return sb.String()
}

// Marshal writes the plan as indented JSON (types in their text form).
func Marshal(p *Plan) ([]byte, error) { return json.MarshalIndent(p, "", " ") }

// Unmarshal reads a plan written by Marshal and checks that its indexes are consistent.
func Unmarshal(data []byte) (*Plan, error) {
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("plan JSON: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// UnmarshalList reads what `pistil compile -o` writes: one plan, or a JSON array of plans
// (one per phase).
func UnmarshalList(data []byte) ([]*Plan, error) {
	trimmed := strings.TrimSpace(string(data))
	if !strings.HasPrefix(trimmed, "[") {
		p, err := Unmarshal(data)
		if err != nil {
			return nil, err
		}
		return []*Plan{p}, nil
	}
	var plans []*Plan
	if err := json.Unmarshal(data, &plans); err != nil {
		return nil, fmt.Errorf("plan JSON: %w", err)
	}
	for _, p := range plans {
		if err := p.Validate(); err != nil {
			return nil, err
		}
	}
	return plans, nil
}

// Validate checks the plan's internal references: buffer IDs, dispatch indexes, groups
// that partition the dispatches in order, forward edges.
func (p *Plan) Validate() error {
	for i, b := range p.Buffers {
		if b.ID != i {
			return fmt.Errorf("plan %s: buffer %d has id %d", p.Phase, i, b.ID)
		}
	}
	okBuf := func(id int) bool { return id >= 0 && id < len(p.Buffers) }
	for i, d := range p.Dispatches {
		if d.Index != i {
			return fmt.Errorf("plan %s: dispatch %d has index %d", p.Phase, i, d.Index)
		}
		for _, o := range append(append([]Operand(nil), d.Args...), d.Results...) {
			if !okBuf(o.Buffer) {
				return fmt.Errorf("plan %s: dispatch %d (%s) uses buffer %d, which does not exist", p.Phase, i, d.Op, o.Buffer)
			}
		}
		if d.Group < 0 || d.Group >= len(p.Groups) {
			return fmt.Errorf("plan %s: dispatch %d is in group %d of %d", p.Phase, i, d.Group, len(p.Groups))
		}
	}
	next := 0
	for gi, g := range p.Groups {
		if g.First != next || g.Last < g.First {
			return fmt.Errorf("plan %s: group %d covers d%d..d%d, expected to start at d%d", p.Phase, gi, g.First, g.Last, next)
		}
		next = g.Last + 1
	}
	if next != len(p.Dispatches) {
		return fmt.Errorf("plan %s: groups cover %d of %d dispatches", p.Phase, next, len(p.Dispatches))
	}
	for _, e := range p.Edges {
		if e.From < 0 || e.From >= e.To || e.To >= len(p.Dispatches) {
			return fmt.Errorf("plan %s: edge d%d -> d%d is out of order or range", p.Phase, e.From, e.To)
		}
	}
	return nil
}

// Bytes prints a byte count exactly, with a binary-unit gloss: "1,669,563,648 B (1.55 GiB)".
func Bytes(n int64) string {
	s := Commas(n) + " B"
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	f := float64(n)
	u := -1
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if u >= 0 {
		s += fmt.Sprintf(" (%.2f %s)", f, units[u])
	}
	return s
}

// Commas prints an integer with thousands separators.
func Commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
