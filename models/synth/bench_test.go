package synth

import (
	"testing"

	"pistil/models/safetensors"
)

// BenchmarkFill measures generation alone (no disk) for each kind of content, per byte.
func BenchmarkFill(b *testing.B) {
	buf := make([]byte, chunkBytes)
	for _, tc := range []struct {
		name string
		p    tensorPlan
	}{
		{"codes", tensorPlan{spec: safetensors.Spec{DType: safetensors.U32}, content: codes, bits: 4}},
		{"scales", tensorPlan{spec: safetensors.Spec{DType: safetensors.BF16}, content: scales, std: 0.02, bits: 4}},
		{"bf16", tensorPlan{spec: safetensors.Spec{DType: safetensors.BF16}, content: uniformValues, std: 0.02}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for i := 0; i < b.N; i++ {
				fill(&tc.p, 1, i, 0, buf)
			}
		})
	}
}
