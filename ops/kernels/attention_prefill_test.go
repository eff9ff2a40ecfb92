package kernels

import "testing"

// attention_prefill keeps only the K/V tile in group memory (queries and outputs are in
// registers): FA_KEYS·256·4 bytes for each of K and V, 32 KiB on CUDA's 16-key tiles and
// 16 KiB on Metal's 8-key tiles, within both budgets.
func TestPrefillAttentionGroupMemory(t *testing.T) {
	for _, tc := range []struct {
		tune Tuning
		want int
	}{{CUDA, 2 * 16 * 256 * 4}, {Metal, 2 * 8 * 256 * 4}} {
		gms, err := GroupMemoryOf(tc.tune)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, gm := range gms {
			if gm.Kernel != KernelAttentionPrefill {
				continue
			}
			found = true
			if gm.Bytes != tc.want || gm.Padded > tc.tune.GroupMemoryLimit {
				t.Errorf("%s: attention_prefill declares %d bytes (%d padded), want %d within %d", tc.tune.Backend, gm.Bytes, gm.Padded, tc.want, tc.tune.GroupMemoryLimit)
			}
		}
		if !found {
			t.Errorf("%s: attention_prefill not measured", tc.tune.Backend)
		}
	}
}
