package passes

import (
	"errors"
	"strings"
	"testing"
)

// TestPassOrder enforces the ordering constraints on the table (in a test, not init, so
// the package has no side effects at load).
func TestPassOrder(t *testing.T) {
	if err := CheckOrder(Passes, PassOrder); err != nil {
		t.Fatal(err)
	}
	// Every pair of required passes that exchange analyses has a constraint, and a
	// swapped table is caught.
	swapped := append([]Pass(nil), Passes...)
	pos := map[string]int{}
	for i, p := range swapped {
		pos[p.Name] = i
	}
	a, b := pos["plan-memory"], pos["schedule"]
	swapped[a], swapped[b] = swapped[b], swapped[a]
	if err := CheckOrder(swapped, PassOrder); err == nil || !strings.Contains(err.Error(), "plan-memory must run before schedule") {
		t.Errorf("swapped table: %v", err)
	}
	if err := CheckOrder(Passes, []Constraint{{"lower", "nope", "x"}}); err == nil {
		t.Error("a constraint naming an unknown pass passed")
	}
	if err := CheckOrder(Passes, []Constraint{{"plan-memory", "lower", ""}}); err == nil {
		t.Error("a constraint without a reason passed")
	}
}

func TestPassFlags(t *testing.T) {
	var c Config
	if err := c.ApplyFlag("fuse-dequant/off,all/time"); err != nil {
		t.Fatal(err)
	}
	if c.Enabled(Passes[1]) || !c.Time["lower"] || !c.Time["fuse-dequant"] {
		t.Errorf("config %+v", c)
	}
	if err := c.ApplyFlag("fuse-dequant/on"); err != nil || !c.Enabled(Passes[1]) {
		t.Errorf("on: %v", err)
	}
	if err := c.ApplyFlag("check/on,schedule/dump"); err != nil || !c.Check || !c.Dump["schedule"] {
		t.Errorf("check/dump: %v %+v", err, c)
	}
	if err := c.ApplyFlag("all/off"); err != nil || c.Enabled(Passes[1]) {
		t.Errorf("all/off: %v", err)
	}
	for _, bad := range []string{"plan-memory/off", "nosuch/off", "fuse-dequant", "fuse-dequant/sideways", "check/time"} {
		if err := c.ApplyFlag(bad); err == nil {
			t.Errorf("-pass=%s accepted", bad)
		}
	}
	if err := c.ApplyFlag("help"); !errors.Is(err, ErrHelp) {
		t.Errorf("help: %v", err)
	}
	help := HelpText()
	for _, p := range Passes {
		if !strings.Contains(help, p.Name) {
			t.Errorf("help lacks %s", p.Name)
		}
	}
	o0 := O0()
	for _, p := range Passes {
		if o0.Enabled(p) != p.Required {
			t.Errorf("-O0: %s enabled=%v", p.Name, o0.Enabled(p))
		}
	}
}
