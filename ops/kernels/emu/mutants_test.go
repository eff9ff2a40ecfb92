package emu

import (
	"strings"
	"testing"

	"pistil/metal/kernelcheck"
	"pistil/ops/kernels"
)

// The schedule is fixed, so the reverse order runs every case again with each pair of
// threads in the other order between synchronisation points.
func TestKernelsMatchReferencesReverseSchedule(t *testing.T) {
	m := machine(t)
	for _, c := range kernelcheck.Cases() {
		t.Run(c.Name(), func(t *testing.T) {
			if err := runCase(m, c, Options{Reverse: true}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Deliberate bugs in the Metal source that the emulator must catch: each makes at least
// one of the named cases fail (wrong numbers, or an emulator fault naming the line).
func TestEmulatorCatchesMutants(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	src := kernels.MetalSource()
	mutants := []struct {
		name, old, new string
		cases          []string
		want           string // in the error, when the emulator itself reports the fault
	}{
		{name: "missing barrier (group_sum reads partial sums before they are written)",
			old: "\tif (LANE == 0) scratch[SIMD_ID] = v;\n\tBARRIER();", new: "\tif (LANE == 0) scratch[SIMD_ID] = v;",
			cases: []string{"rms_norm bf16 w", "l2_norm"}},
		{name: "missing barrier (matmul tile used before it is loaded)",
			old:   "\t\tUNROLL for (i32 i = 0; i < 8; i++) xs[(lk + i) * (TILE_N + 1) + lr] = v[i];\n\t\tBARRIER();",
			new:   "\t\tUNROLL for (i32 i = 0; i < 8; i++) xs[(lk + i) * (TILE_N + 1) + lr] = v[i];",
			cases: []string{"matmul_tiled q4"}},
		{name: "a barrier only some threads reach",
			old: "\tv = SIMD_SUM(v);\n\tBARRIER();", new: "\tv = SIMD_SUM(v);\n\tif (LANE == 0) BARRIER();",
			cases: []string{"rms_norm bf16 w"}, want: "barrier of line"},
		{name: "a SIMD op only some lanes reach",
			old: "\tv = SIMD_SUM(v);\n", new: "\tif (LANE < 16) v = SIMD_SUM(v);\n",
			cases: []string{"rms_norm bf16 w"}, want: "deadlock"},
		{name: "wrong shuffle mask (gated_delta reduces lanes of other columns)",
			old: "\t\tmem += SIMD_XOR(mem, 4);", new: "\t\tmem += SIMD_XOR(mem, 8);",
			cases: []string{"gated_delta"}},
		{name: "gated_delta_step maps value heads to key heads round-robin instead of in runs",
			old: "\ti32 kh = j / (a.Hv / a.Hk);\n\ti32 rows = a.Dk / DELTA_LANES;\n\t// The state's", new: "\ti32 kh = j % a.Hk;\n\ti32 rows = a.Dk / DELTA_LANES;\n\t// The state's",
			cases: []string{"gated_delta_step Hk 2 Hv 4 Dk 32 Dv 24 bf16 conv state"}},
		{name: "conv1d_silu_l2 leaves one lane out of a head's sum of squares",
			old: "f32 ss = SIMD_SUM(inQ || inK ? last * last : 0.0f);", new: "f32 ss = SIMD_SUM((inQ || inK) && LANE != 31 ? last * last : 0.0f);",
			cases: []string{"conv1d_silu_l2 decode Ch 333, heads of 64 from mid-group, k before q, bf16 state", "conv1d_silu_l2 decode Ch 200, heads of 32, 3 taps"}},
		{name: "matvec_q8_norm sums the squares of its first SIMD group only",
			old: "for (i32 k = 0; k < MV_THREADS / 32; k++) ss += red[k * (MV8_ROWS + 1) + MV8_ROWS];", new: "for (i32 k = 0; k < 1; k++) ss += red[k * (MV8_ROWS + 1) + MV8_ROWS];",
			cases: []string{"matvec_q8_norm odd M", "matvec_q8_norm K 2048, f32 norm weight"}},
		{name: "matvec_q8_norm's groups each leave the last chunk of their share of the sum unwritten",
			old: "c >= GROUP_ID_X * per + per) return;", new: "c >= GROUP_ID_X * per + per - 1) return;",
			cases: []string{"matvec_q8_norm odd M", "matvec_q8_norm K 2048, f32 norm weight"}},
		{name: "matvec_q8_norm writes the row without the norm's scale",
			old: "row.y = (sum.y * inv) * g[4 * i + 1];", new: "row.y = sum.y * g[4 * i + 1];",
			cases: []string{"matvec_q8_norm odd M"}},
		{name: "conv1d_silu_l2 sums a head's first SIMD group only",
			old: "for (i32 i = 0; i < simds; i++) sum += head_ss[first + i];", new: "for (i32 i = 0; i < 1; i++) sum += head_ss[first + i];",
			cases: []string{"conv1d_silu_l2 decode Ch 333, heads of 64 from mid-group, k before q, bf16 state"}},
		{name: "gated_delta_norm leaves one column out of its head's sum of squares",
			old: "f32 sq = SIMD_SUM(live && sub == 0 ? o * o : 0.0f);", new: "f32 sq = SIMD_SUM(live && sub == 0 && c != 1 ? o * o : 0.0f);",
			cases: []string{"gated_delta_norm Hk 2 Hv 4 Dk 32 Dv 22", "gated_delta_norm Hk = Hv 3 Dk 64 Dv 40"}},
		{name: "missing barrier (gated_delta_norm sums its SIMD groups' partial sums before they are written)",
			old: "\tif (LANE == 0) head_ss[SIMD_ID] = sq;\n\tBARRIER();", new: "\tif (LANE == 0) head_ss[SIMD_ID] = sq;",
			cases: []string{"gated_delta_norm Hk 2 Hv 4 Dk 32 Dv 22", "gated_delta_norm Hk = Hv 3 Dk 64 Dv 40"}},
		{name: "conv_state_shift keeps the oldest row",
			old: "i32 src = r + a.T; // row of [state; x]", new: "i32 src = r + a.T - 1; // row of [state; x]",
			cases: []string{"conv_state_shift decode bf16", "conv_state_shift 5 tokens f32"}},
		{name: "router tie rule inverted (higher expert id wins a tie)",
			old:   "if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }\n\t\t}\n\t\t// A row",
			new:   "if (ov > bv || (ov == bv && oi > bi)) { bv = ov; bi = oi; }\n\t\t}\n\t\t// A row",
			cases: []string{"router ties", "router 256 experts ties"}},
		{name: "argmax tie rule inverted across SIMD groups",
			old: "if (bestv[w] > bv || (bestv[w] == bv && besti[w] < bi))", new: "if (bestv[w] > bv || (bestv[w] == bv && besti[w] > bi))",
			cases: []string{"argmax ties"}},
		{name: "bf16 stores truncate instead of rounding to nearest even",
			old: "\tb += 0x7fffu + ((b >> 16) & 1u);\n", new: "\n",
			cases: []string{"kv_append bf16 store", "conv1d bf16 state"}},
		{name: "attention_gqa key tile of the wrong width (FA_PARTS lanes not combined)",
			old: "for (i32 m2 = FA_KEYS; m2 < SIMD_WIDTH; m2 <<= 1)", new: "for (i32 m2 = 2 * FA_KEYS; m2 < SIMD_WIDTH; m2 <<= 1)",
			cases: []string{"attention_gqa prefill"}},
		{name: "gated_rms_norm_matvec_q4 sums a head over half its lanes",
			old: "for (i32 m = 1; m < head_chunks; m <<= 1) ss += SIMD_XOR(ss, m);", new: "for (i32 m = 1; m < head_chunks / 2; m <<= 1) ss += SIMD_XOR(ss, m);",
			cases: []string{"gated_rms_norm_matvec_q4", "gated_rms_norm_matvec_q4 gdn heads"}},
		{name: "gated_rms_norm_matvec_q4 reads the norm weight from the head's start for every chunk",
			old: "load_dense(a.Norm.Data, a.Norm.DType, d0 + e)", new: "load_dense(a.Norm.Data, a.Norm.DType, e)",
			cases: []string{"gated_rms_norm_matvec_q4", "gated_rms_norm_matvec_q4 gdn heads"}},
		{name: "gated_rms_norm_matvec_q4 lanes past the row leave the loop before its shuffles",
			old:   "for (i32 c0 = 0; c0 < cpr; c0 += L) {\n\t\ti32 c = c0 + t;\n\t\tbool live = c < cpr;",
			new:   "for (i32 c = t; c < cpr; c += L) {\n\t\tbool live = true;",
			cases: []string{"gated_rms_norm_matvec_q4 partial pass"}, want: "while other lanes wait"},
		{name: "rope into a cache writes row t instead of C+t",
			old: "i64 y = (a.Append != 0 ? (i64)C * a.Heads + row : row) * a.D;", new: "i64 y = row * a.D;",
			cases: []string{"rms_norm_rope_append f32", "rms_norm_rope_append bf16"}},
		{name: "rope reads a sliced row as if dense",
			old: "PTR(const f32, a.X) + row * a.XRow;", new: "PTR(const f32, a.X) + row * a.D;",
			cases: []string{"slice_rms_norm_rope"}},
		{name: "shared expert slot multiplies its up rows by the gate weight",
			old: "\t\twu = a.SW2;", new: "\t\twu = a.SW;",
			cases: []string{"expert_matvec_swiglu_shared_q4"}},
		{name: "shared expert's down projection not scaled by its sigmoid gate",
			old: "a.SX + 4 * (u64)((i64)t * a.SK + c * 32), gate, acc);", new: "a.SX + 4 * (u64)((i64)t * a.SK + c * 32), 1.0f, acc);",
			cases: []string{"expert_matvec_combine_shared_q4"}},
		{name: "every routed slot takes the token's first pick",
			old: "if (LANE == j) expert = id;", new: "if (LANE == 0) expert = id;",
			cases: []string{"expert_matvec_swiglu_routed_q4"}},
		{name: "the shared gate's q8 row read in half",
			old: "for (i32 c = THREAD_ID; c < K / 16; c += GROUP_SIZE) {", new: "for (i32 c = THREAD_ID; c < K / 32; c += GROUP_SIZE) {",
			cases: []string{"expert_matvec_swiglu_routed_q4"}},
	}
	byName := map[string]kernelcheck.Case{}
	for _, c := range kernelcheck.Cases() {
		byName[c.Name()] = c
	}
	for _, mu := range mutants {
		t.Run(mu.name, func(t *testing.T) {
			if strings.Count(src, mu.old) != 1 {
				t.Fatalf("the Metal source contains %q %d times, want once; update the mutant", mu.old, strings.Count(src, mu.old))
			}
			m, err := Build(strings.Replace(src, mu.old, mu.new, 1))
			if err != nil {
				t.Fatal(err)
			}
			var failures []string
			for _, name := range mu.cases {
				c, ok := byName[name]
				if !ok {
					t.Fatalf("no case %q", name)
				}
				if err := runCase(m, c, Options{}); err != nil {
					failures = append(failures, name+": "+err.Error())
				}
			}
			if len(failures) == 0 {
				t.Fatalf("every case passes with the bug in place: the emulator missed it")
			}
			if mu.want != "" && !strings.Contains(strings.Join(failures, "\n"), mu.want) {
				t.Errorf("failures do not mention %q:\n%s", mu.want, strings.Join(failures, "\n"))
			}
			t.Logf("caught: %s", firstLine(failures[0]))
		})
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
