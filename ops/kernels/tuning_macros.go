package kernels

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// tuningMacro matches a tuning macro's declaration in the kernel source: an #ifndef of a
// name whose next line defines it, so a -DNAME=VALUE given to the compiler replaces the
// default.
var tuningMacro = regexp.MustCompile(`(?m)^#ifndef ([A-Z][A-Z0-9_]*)\n#define ([A-Z][A-Z0-9_]*) (\S+)`)

var tuningMacros = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	for _, g := range tuningMacro.FindAllStringSubmatch(CUDASource(), -1) {
		if g[1] == g[2] {
			m[g[1]] = g[3]
		}
	}
	return m
})

// TuningMacros are the CUDA kernels' tuning macros with their defaults: the switches of
// kernel variants that compute the same values (MMA_UNGUARDED, MMA_PARTIAL_SUBTILES,
// launch bounds such as MMA_WIDE_MIN_GROUPS, ...), each declared in ops/kernels as
// `#ifndef NAME` / `#define NAME DEFAULT`. pipeline.toml [cuda] kernel_defines (and a
// developer's PISTIL_CUDA_DEFINES) set them.
func TuningMacros() map[string]string { return tuningMacros() }

// CheckTuningDefines checks a list of NAME=VALUE ([cuda] kernel_defines): each one
// ParseTuningDefine accepts, and no name set twice.
func CheckTuningDefines(defs []string) error {
	seen := map[string]string{}
	for _, d := range defs {
		name, _, err := ParseTuningDefine(d)
		if err != nil {
			return err
		}
		if first, dup := seen[name]; dup {
			return fmt.Errorf("kernel define %q: %s is already set by %q", d, name, first)
		}
		seen[name] = d
	}
	return nil
}

// ParseTuningDefine checks one NAME=VALUE of [cuda] kernel_defines: NAME one of
// TuningMacros, VALUE an integer (every tuning macro is one).
func ParseTuningDefine(def string) (name string, value int, err error) {
	name, v, ok := strings.Cut(def, "=")
	if !ok {
		return "", 0, fmt.Errorf("kernel define %q: want NAME=VALUE", def)
	}
	if _, known := TuningMacros()[name]; !known {
		names := make([]string, 0, len(TuningMacros()))
		for n := range TuningMacros() {
			names = append(names, n)
		}
		slices.Sort(names)
		return "", 0, fmt.Errorf("kernel define %q: %q is not one of the CUDA kernels' tuning macros (%s)", def, name, strings.Join(names, ", "))
	}
	value, err = strconv.Atoi(v)
	if err != nil {
		return "", 0, fmt.Errorf("kernel define %q: the value of %s must be an integer", def, name)
	}
	return name, value, nil
}
