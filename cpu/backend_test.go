package cpu

import (
	"testing"

	"pistil/graph"
	"pistil/ops"
)

// TestCoverage: the CPU backend runs every compute op of the table through its
// reference, so an op added without one is caught here rather than at the first plan
// that uses it.
func TestCoverage(t *testing.T) {
	for _, name := range ops.Default.Names() {
		info, _ := ops.Default.Info(name)
		if info.Has(graph.Source) || info.Has(graph.View) {
			continue
		}
		if info.Ref == nil {
			t.Errorf("op %s has no reference: the CPU backend cannot run it", name)
		}
	}
}
