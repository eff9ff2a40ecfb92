package passes

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"pistil/gpu"
)

// Config controls one compilation. It is a value handed to Compile, never a global, so
// concurrent compilations and tests do not interfere.
type Config struct {
	// Off switches optional passes off by name. Required passes cannot be switched off.
	Off map[string]bool
	// Dump and Time request a dump or a timing line after the named passes.
	Dump map[string]bool
	Time map[string]bool
	// Check runs graph.Check (and the memory and schedule verifiers, once those analyses
	// exist) after every pass.
	Check bool
	// DumpTo receives each requested dump; nil writes it to Log.
	DumpTo func(phase string, seq int, pass string, text string) error
	// Log receives timing lines (and dumps when DumpTo is nil); nil discards them.
	Log io.Writer
	// KeyBlockSplitFrom is the context (keys a query sees) from which split-attention's
	// GPU decode ranges are fixed blocks of gpu.BlockSplitKeys keys instead of a fixed
	// number of ranges: 0 means DefaultKeyBlockSplitFrom, a negative value never
	// (pipeline.toml [attention] key_block_split_from).
	KeyBlockSplitFrom int
	// KeyBlockKeys is the keys of each of those blocks, a multiple of
	// kernels.AttnKeyBlock; 0 means gpu.BlockSplitKeys (pipeline.toml [attention]
	// key_block_keys).
	KeyBlockKeys int
}

// keyBlockKeys resolves KeyBlockKeys.
func (c *Config) keyBlockKeys() int {
	if c.KeyBlockKeys <= 0 {
		return gpu.BlockSplitKeys
	}
	return c.KeyBlockKeys
}

// DefaultKeyBlockSplitFrom is where decode attention switches to fixed key blocks
// unless the configuration says otherwise: the context from which the published engine
// measured the switch to pay (+7.7% decode at 32K, +27.4% at 64K, +40.2% at 128K).
const DefaultKeyBlockSplitFrom = 32768

// keyBlockSplitFrom resolves KeyBlockSplitFrom: the context from which the fixed-block
// split applies, 0 for never.
func (c *Config) keyBlockSplitFrom() int {
	switch {
	case c.KeyBlockSplitFrom == 0:
		return DefaultKeyBlockSplitFrom
	case c.KeyBlockSplitFrom < 0:
		return 0
	}
	return c.KeyBlockSplitFrom
}

// O0 is the configuration with every optional pass off: the correctness baseline.
func O0() Config {
	c := Config{Off: map[string]bool{}}
	for _, p := range Passes {
		if !p.Required {
			c.Off[p.Name] = true
		}
	}
	return c
}

// Enabled reports whether a pass runs under c.
func (c *Config) Enabled(p Pass) bool {
	if p.Required {
		return true
	}
	if off, set := c.Off[p.Name]; set {
		return !off
	}
	return !p.DefaultOff
}

// DefaultOff says whether the named optional pass runs only when switched on.
func DefaultOff(name string) bool {
	p, ok := lookupPass(name)
	return ok && p.DefaultOff
}

// ApplyFlag applies one -pass value: a comma-separated list of name/action where name is
// a pass, "all" (every pass) or "check", and action is on, off, time or dump:
//
//	-pass=fuse-dequant/off   -pass=fuse-dequant/dump   -pass=all/time   -pass=check/on
//
// Switching a required pass off is an error. "help" is answered with ErrHelp after
// HelpText has been printed by the caller.
func (c *Config) ApplyFlag(spec string) error {
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if item == "help" {
			return ErrHelp
		}
		name, action, ok := strings.Cut(item, "/")
		if !ok {
			return fmt.Errorf("-pass=%s: want name/action (on, off, time, dump); -pass=help lists the passes", item)
		}
		if name == "check" {
			switch action {
			case "on":
				c.Check = true
			case "off":
				c.Check = false
			default:
				return fmt.Errorf("-pass=%s: check takes on or off", item)
			}
			continue
		}
		var targets []Pass
		if name == "all" {
			targets = Passes
		} else {
			p, ok := lookupPass(name)
			if !ok {
				return fmt.Errorf("-pass=%s: unknown pass %q (passes: %s)", item, name, strings.Join(PassNames(), ", "))
			}
			targets = []Pass{p}
		}
		for _, p := range targets {
			if err := c.apply(p, action, name == "all"); err != nil {
				return fmt.Errorf("-pass=%s: %w", item, err)
			}
		}
	}
	return nil
}

func (c *Config) apply(p Pass, action string, all bool) error {
	set := func(m *map[string]bool, v bool) {
		if *m == nil {
			*m = map[string]bool{}
		}
		(*m)[p.Name] = v
	}
	switch action {
	case "on":
		set(&c.Off, false)
	case "off":
		if p.Required {
			if all {
				return nil // all/off switches off every optional pass, leaving the required ones
			}
			return fmt.Errorf("pass %s is required and cannot be switched off", p.Name)
		}
		set(&c.Off, true)
	case "time":
		set(&c.Time, true)
	case "dump":
		set(&c.Dump, true)
	default:
		return fmt.Errorf("unknown action %q: want on, off, time or dump", action)
	}
	return nil
}

// ErrHelp is returned by ApplyFlag for -pass=help.
var ErrHelp = fmt.Errorf("pass help requested")

// HelpText lists the passes and the flag grammar.
func HelpText() string {
	var sb strings.Builder
	sb.WriteString("passes, in order (* = required, cannot be switched off):\n")
	width := 0
	for _, p := range Passes {
		width = max(width, len(p.Name))
	}
	for _, p := range Passes {
		mark := " "
		if p.Required {
			mark = "*"
		}
		fmt.Fprintf(&sb, "  %s %-*s %s\n", mark, width, p.Name, p.Doc)
	}
	sb.WriteString("\n-pass=NAME/ACTION[,NAME/ACTION...], ACTION one of on, off, time, dump;\n")
	sb.WriteString("NAME may be all (all/time, all/dump, all/off = -O0) or check (check/on runs graph.Check after every pass).\n")
	return sb.String()
}

// Describe is a one-line summary of which optional passes are on.
func (c *Config) Describe() string {
	var on, off []string
	for _, p := range Passes {
		if p.Required {
			continue
		}
		if c.Enabled(p) {
			on = append(on, p.Name)
		} else {
			off = append(off, p.Name)
		}
	}
	sort.Strings(on)
	sort.Strings(off)
	split := "never"
	if from := c.keyBlockSplitFrom(); from > 0 {
		split = fmt.Sprintf("of %d from %d keys", c.keyBlockKeys(), from)
	}
	return fmt.Sprintf("optional passes on: [%s], off: [%s]; GPU decode attention in fixed key blocks %s", strings.Join(on, " "), strings.Join(off, " "), split)
}
