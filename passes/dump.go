package passes

import (
	"fmt"
	"sort"
	"strings"

	"pistil/graph"
)

// Dump is the text a -pass=NAME/dump prints after a pass: the graph in the text format,
// then every analysis present as '#' comment lines (which graph.Parse skips, so every
// dump reads back as a graph).
func Dump(u *Unit) string {
	var sb strings.Builder
	sb.WriteString(graph.Print(u.Graph))
	comment := func(format string, args ...any) {
		for _, line := range strings.Split(strings.TrimRight(fmt.Sprintf(format, args...), "\n"), "\n") {
			sb.WriteString("# " + line + "\n")
		}
	}
	if len(u.Stats) > 0 {
		keys := make([]string, 0, len(u.Stats))
		for k := range u.Stats {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			comment("stat %s = %d", k, u.Stats[k])
		}
	}
	if m := u.Memory; m != nil && u.Plan == nil {
		comment("memory: arena %d B", m.ArenaBytes())
		for _, b := range m.Buffers[1:] {
			comment("  b%d %s %s %s %d B + %d B*N", b.ID, b.Kind, b.Name, b.Type, b.Bytes, b.PerN)
		}
		for i, places := range m.Place {
			parts := make([]string, len(places))
			for j, p := range places {
				parts[j] = operandRange(m, p).Format(m.Buffers[p.Buffer].Name)
			}
			comment("  v%d -> %s", i, strings.Join(parts, " "))
		}
	}
	if s := u.Schedule; s != nil && u.Plan == nil {
		comment("schedule: %d dispatches, %d groups, %d edges, longest chain %d", len(s.Dispatches), len(s.Groups), len(s.Edges), s.LongestChain)
		for gi, g := range s.Groups {
			ids := make([]string, 0, g.Last-g.First+1)
			for d := g.First; d <= g.Last; d++ {
				ids = append(ids, fmt.Sprintf("d%d=%s", d, s.Dispatches[d].Value.Ref()))
			}
			line := fmt.Sprintf("  g%02d %s", gi, strings.Join(ids, " "))
			if g.Barrier != "" {
				line += "  after " + g.Barrier
			}
			comment("%s", line)
		}
	}
	if u.Plan != nil {
		comment("%s", u.Plan.Text())
	}
	return sb.String()
}
