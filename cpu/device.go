package cpu

import (
	"bufio"
	"os"
	"strings"

	"golang.org/x/sys/cpu"

	"pistil/ops"
)

// Device describes the processor and the kernels this backend runs, for `pistil bench`'s
// header and its JSON report, so that every CPU figure carries its machine (the same
// instruction sets differ by processor: cpu/README.md measures each tuning on one) and
// the kernel choices that produced it: the processor's model name (/proc/cpuinfo, where
// there is one), the vector extensions the fast kernels use, and the activations, int8
// and attention kernels in force (process-wide, as the last model opened set them).
func (b *Backend) Device() string {
	var parts []string
	if name := processorName("/proc/cpuinfo"); name != "" {
		parts = append(parts, name)
	}
	if f := vectorFeatures(); f != "" {
		parts = append(parts, f)
	}
	kernels := b.Kernels
	if kernels == "" {
		kernels = ops.KernelsFast
	}
	act := b.Activations
	if act == "" {
		act = ops.ActivationsF32
	}
	k := "kernels " + kernels + ", activations " + act
	if strings.HasPrefix(act, "int8") {
		k += " (int8 kernel " + ops.Int8KernelName() + ")"
	}
	parts = append(parts, k+", attention kernel "+ops.AttentionKernel())
	return strings.Join(parts, "; ")
}

// processorName is the first processor's "model name" of a /proc/cpuinfo-format file,
// with its "cpu family" and "model" where given (virtual machines often name the vendor's
// line only, "AMD EPYC", which the family and model tell apart: 25 and 17 are Zen 4); ""
// if it has no model name or cannot be read.
func processorName(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fields := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			if len(fields) > 0 {
				break // the first processor's block ends at a blank line
			}
			continue
		}
		key = strings.TrimSpace(key)
		if _, seen := fields[key]; !seen {
			fields[key] = strings.TrimSpace(value)
		}
	}
	name := fields["model name"]
	if name == "" {
		return ""
	}
	if fam, model := fields["cpu family"], fields["model"]; fam != "" && model != "" {
		name += " (family " + fam + " model " + model + ")"
	}
	return name
}

// vectorFeatures names the extensions the fast kernels choose between (ops' amd64
// kernels; arm64 runs the portable Go ones).
func vectorFeatures() string {
	var have []string
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"avx2", cpu.X86.HasAVX2 && cpu.X86.HasFMA},
		{"avx-vnni", cpu.X86.HasAVXVNNI},
		{"avx512f", cpu.X86.HasAVX512F},
		{"avx512bw", cpu.X86.HasAVX512BW},
		{"avx512vnni", cpu.X86.HasAVX512VNNI},
		{"avx512bf16", cpu.X86.HasAVX512BF16},
		{"asimd", cpu.ARM64.HasASIMD},
	} {
		if f.has {
			have = append(have, f.name)
		}
	}
	return strings.Join(have, " ")
}
