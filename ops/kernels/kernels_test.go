package kernels

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The kernels must be portable: no CUDA (or Metal) spelling outside the preludes.
func TestDialectHasNoBackendSpelling(t *testing.T) {
	forbidden := []string{"threadIdx", "blockIdx", "blockDim", "gridDim", "__syncthreads", "__shfl", "__global__",
		"__device__", "__shared__", "extern \"C\"", "atomicAdd", "float4", "uint4", "__launch_bounds__",
		"threadgroup", "simd_sum", "[[", "#pragma", "__float_as_uint", "__uint_as_float", "expf(", "sqrtf("}
	for _, f := range Families {
		src, err := Family(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, word := range forbidden {
			if strings.Contains(src, word) {
				t.Errorf("%s.k uses %q; write the dialect's macro instead", f, word)
			}
		}
	}
}

// Every dialect name the kernels use is defined by the CUDA prelude.
func TestCUDAPreludeDefinesTheDialect(t *testing.T) {
	prelude, err := files.ReadFile("prelude_cuda.h")
	if err != nil {
		t.Fatal(err)
	}
	p := string(prelude)
	upper := regexp.MustCompile(`\b[A-Z][A-Z0-9_]{2,}\b`)
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`#define ([A-Za-z_0-9]+)`).FindAllStringSubmatch(p+TuningDecls(CUDA)+CDecls()+Dialect(), -1) {
		defined[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`DEVICE [a-z0-9_]+ ([A-Za-z_0-9]+)\(`).FindAllStringSubmatch(p, -1) {
		defined[m[1]] = true
	}
	for _, name := range []string{"KERNEL", "KERNEL_BOUNDED", "DEVICE", "GLOBAL", "TG_MEM", "TG_PTR", "PTR", "BARRIER",
		"THREAD_ID", "GROUP_SIZE", "GROUP_ID_X", "GROUP_ID_Y", "NUM_GROUPS_X", "LANE", "SIMD_ID", "NUM_SIMDS",
		"SIMD_WIDTH", "SIMD_BARRIER", "SIMD_SUM", "SIMD_MAX", "SIMD_XOR", "UNROLL", "ATOMIC_ADD_TG", "EXPF", "SQRTF", "POWF",
		"COSF", "SINF", "LOG1PF", "FMAXF", "NEG_INF", "CTX_", "CTX_ARG_"} {
		if !defined[name] {
			t.Errorf("the CUDA prelude does not define %s", name)
		}
	}
	// Any upper-case name a kernel uses must be defined somewhere (prelude, header or .k).
	structs := map[string]bool{}
	for _, l := range Layouts() {
		structs[l.Struct] = true
	}
	for _, f := range Families {
		src, _ := Family(f)
		fields := regexp.MustCompile(`\.[A-Za-z_][A-Za-z0-9_]*`)
		for _, name := range upper.FindAllString(fields.ReplaceAllString(stripComments(src), ""), -1) {
			if !defined[name] && !structs[name] {
				t.Errorf("%s.k uses %s, which neither the prelude nor the generated header defines", f, name)
			}
		}
	}
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// Names lists exactly the kernels the .k files declare.
func TestKernelNamesMatchDeclarations(t *testing.T) {
	decl := regexp.MustCompile(`KERNEL(?:_BOUNDED|_EARLY)?\(([a-z0-9_]+),\s*([A-Za-z0-9]+)`)
	declared := map[string]bool{}
	structs := map[string]bool{}
	for _, l := range Layouts() {
		structs[l.Struct] = true
	}
	for _, m := range decl.FindAllStringSubmatch(Dialect(), -1) {
		declared[m[1]] = true
		if !structs[m[2]] {
			t.Errorf("kernel %s takes %s, which is not an args struct of args.go", m[1], m[2])
		}
	}
	for _, n := range Names {
		if !declared[n] {
			t.Errorf("Names lists %s but no .k file declares it", n)
		}
		delete(declared, n)
	}
	for n := range declared {
		t.Errorf("kernel %s is declared but missing from Names", n)
	}
}

// The generated C structs, laid out by the C rules (natural alignment, padding to the
// largest member), put every field where Go does.
func TestGeneratedStructsMatchGoLayout(t *testing.T) {
	field := regexp.MustCompile(`^\t(struct [A-Za-z0-9]+|u64|i32|f32) ([A-Za-z0-9]+)(?:\[(\d+)\])?;$`)
	type info struct{ size, align int }
	types := map[string]info{"u64": {8, 8}, "i32": {4, 4}, "f32": {4, 4}}
	offsets := map[string]int{} // "Struct.Field" or "Struct.sizeof"
	var cur string
	var off, align int
	for _, line := range strings.Split(CDecls(), "\n") {
		switch {
		case strings.HasPrefix(line, "struct ") && strings.HasSuffix(line, " {"):
			cur, off, align = strings.TrimSuffix(strings.TrimPrefix(line, "struct "), " {"), 0, 1
		case line == "};":
			size := (off + align - 1) / align * align
			types["struct "+cur] = info{size, align}
			offsets[cur+".sizeof"] = size
		case cur != "" && strings.HasPrefix(line, "\t"):
			m := field.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("cannot parse generated line %q", line)
			}
			ti, ok := types[m[1]]
			if !ok {
				t.Fatalf("type %s used before its definition", m[1])
			}
			n := 1
			if m[3] != "" {
				n, _ = strconv.Atoi(m[3])
			}
			off = (off + ti.align - 1) / ti.align * ti.align
			offsets[cur+"."+m[2]] = off
			off += n * ti.size
			align = max(align, ti.align)
		}
	}
	for _, l := range Layouts() {
		got, ok := offsets[l.Struct+"."+l.Field]
		if !ok {
			t.Errorf("%s.%s is missing from the generated header", l.Struct, l.Field)
			continue
		}
		if uintptr(got) != l.Offset {
			t.Errorf("%s.%s: C offset %d, Go offset %d", l.Struct, l.Field, got, l.Offset)
		}
	}
}

// The whole translation unit carries the prelude, the header, every family and the probe.
func TestCUDASourceIsComplete(t *testing.T) {
	src := CUDASource()
	for _, want := range []string{"#define KERNEL(", "struct MatmulArgs {", "KERNEL(probe_layout, ProbeArgs)", "// ---- moe.k"} {
		if !strings.Contains(src, want) {
			t.Errorf("CUDASource lacks %q", want)
		}
	}
	if len(ProbeSource()) == 0 || !strings.Contains(ProbeSource(), "offsetof(struct Weight, Group)") {
		t.Error("the layout probe does not cover Weight.Group")
	}
}

// CUDANames lists exactly the kernels of the CUDA-only files, and the CUDA source has them
// while the Metal source does not.
func TestCUDANamesMatchDeclarations(t *testing.T) {
	decl := regexp.MustCompile(`KERNEL(?:_BOUNDED|_EARLY)?\(([a-z0-9_]+),\s*([A-Za-z0-9]+)`)
	declared := map[string]bool{}
	for _, m := range decl.FindAllStringSubmatch(CUDADialect(), -1) {
		declared[m[1]] = true
	}
	for _, n := range CUDANames {
		if !declared[n] {
			t.Errorf("CUDANames lists %s but no CUDA-only file declares it", n)
		}
		delete(declared, n)
	}
	for n := range declared {
		t.Errorf("kernel %s is declared but missing from CUDANames", n)
	}
	for _, f := range CUDAFamilies {
		if !strings.Contains(CUDASource(), "// ---- "+f+".k") || strings.Contains(MetalSource(), "// ---- "+f+".k") {
			t.Errorf("%s.k must be in the CUDA source only", f)
		}
	}
	if len(NamesFor("cuda")) != len(Names)+len(CUDANames) || len(NamesFor("metal")) != len(Names) {
		t.Error("NamesFor does not add the CUDA-only kernels to CUDA's alone")
	}
}
