package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// clangCheck type-checks an MSL source against the MSL model with clang++ and returns
// the diagnostics (empty when it is clean). It skips the test when clang++ is absent.
func clangCheck(t *testing.T, src string) string {
	t.Helper()
	clang, err := exec.LookPath("clang++")
	if err != nil {
		t.Skip("clang++ not installed (apt-get install clang); the MSL type-check needs it")
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "msl_model.h")
	file := filepath.Join(dir, "pistil.metal")
	if err := os.WriteFile(model, []byte(MSLModel()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(clang, "-std=c++20", "-fsyntax-only", "-nostdinc", "-nostdinc++", "-DPZ_CHECK",
		"-include", model, "-x", "c++", "-Wno-unknown-attributes", "-ferror-limit=0", file).CombinedOutput()
	if err != nil && len(out) == 0 {
		t.Fatalf("clang++: %v", err)
	}
	if err == nil {
		return ""
	}
	return string(out)
}

// The MSL of every kernel type-checks against the MSL model.
func TestMetalSourceTypeChecks(t *testing.T) {
	if diag := clangCheck(t, MetalSource()); diag != "" {
		t.Fatalf("the Metal source does not type-check:\n%s", diag)
	}
}

// Mutants of the Metal source that must not type-check: each is a mistake MSL rejects
// (or a name it lacks), and the check must say so with the expected diagnostic.
func TestMetalTypeCheckCatchesMutants(t *testing.T) {
	src := MetalSource()
	mutants := []struct {
		name, old, new, want string
	}{
		{"device pointer where a threadgroup one is required",
			"ss = group_sum(CTX_ARG_ ss, scratch);", "ss = group_sum(CTX_ARG_ ss, PTR(f32, a.Y));", "no matching function for call to 'group_sum'"},
		{"device pointer where a thread one is required",
			"dot_rows(CTX_ARG_ a.W, m, a.K, a.X, a.Rows, acc);", "dot_rows(CTX_ARG_ a.W, m, a.K, a.X, a.Rows, PTR(f32, a.Y));", "no matching function for call to 'dot_rows'"},
		{"threadgroup pointer assigned to a device one",
			"const GLOBAL f32* x = PTR(const f32, a.X) + (row / a.RowsPerOuter)", "const GLOBAL f32* x = scratch + (row / a.RowsPerOuter)", "cannot initialize"},
		{"libc maths in a kernel",
			"f32 inv = 1.0f / SQRTF(ss / (f32)a.D + a.Eps);", "f32 inv = 1.0f / sqrtf(ss / (f32)a.D + a.Eps);", "poisoned identifier"},
		{"log1p, which MSL lacks, for LOG1PF",
			"#define LOG1PF(x) pz_log1p(x)", "#define LOG1PF(x) log1p(x)", "poisoned identifier"},
		{"a kernel writing its constant args",
			"KERNEL(argmax, ArgmaxArgs) {", "KERNEL(argmax, ArgmaxArgs) {\n\ta.T = 0;", "cannot assign to variable 'a' with const-qualified type"},
		{"as_type between sizes that differ",
			"return as_type<f32>(((u32)h) << 16);", "return as_type<f32>((u16)h);", "as_type: sizes differ"},
		{"a helper reading the thread index without the context",
			"DEVICE void dot_rows(CTX_ const struct Weight w,", "DEVICE void dot_rows(const struct Weight w,", "undeclared identifier 'pz_lane'"},
		{"the dialect without CTX_ (helpers assume a global thread index)",
			"#define CTX_ uint pz_tid, uint pz_tgsize, uint pz_lane, uint pz_simd, uint pz_nsimd,\n#define CTX_ARG_ pz_tid, pz_tgsize, pz_lane, pz_simd, pz_nsimd,",
			"#define CTX_\n#define CTX_ARG_", "undeclared identifier 'pz_tid'"},
		{"threadgroup memory declared in a helper",
			"DEVICE f32 group_sum(CTX_ f32 v, TG_PTR(f32) scratch) {", "DEVICE f32 group_sum(CTX_ f32 v, TG_PTR(f32) scratch) {\n\tTG_MEM f32 extra[4];", "undeclared identifier 'pz_kernel_scope'"},
		{"a CUDA barrier", "#define BARRIER() threadgroup_barrier(", "#define BARRIER() __syncthreads(); threadgroup_barrier(", "poisoned identifier"},
		{"a device-scope fence, which MSL before 3.2 lacks",
			"\tf32 inv = 1.0f / L;\n\tGLOBAL f32* o = PTR(f32, a.O) + (i64)row * a.D;", "\tf32 inv = 1.0f / L;\n\tFENCE_DEVICE();\n\tGLOBAL f32* o = PTR(f32, a.O) + (i64)row * a.D;",
			"undeclared identifier 'FENCE_DEVICE'"},
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			if !strings.Contains(src, m.old) {
				t.Fatalf("the Metal source no longer contains %q; update the mutant", m.old)
			}
			diag := clangCheck(t, strings.Replace(src, m.old, m.new, 1))
			if diag == "" {
				t.Fatalf("the mutant type-checks; the check missed it")
			}
			if !strings.Contains(diag, m.want) {
				t.Errorf("diagnostics lack %q:\n%s", m.want, firstLines(diag, 12))
			}
		})
	}
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}
