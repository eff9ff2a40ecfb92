package metal

import (
	"testing"

	"pistil/exec"
	"pistil/graph"
	"pistil/verify"
)

// The long-context options on emulated Metal, as TestCheckOnEmulatedMetal runs the golden
// model (12 tokens prefilled, 4 decoded): a bf16 KV cache, with decode's fixed-block key
// split switched on from 13 keys (every decode step past it, on the 512-range grid), held
// to the bf16-kv tolerance.
func TestBF16KVCacheOnEmulatedMetal(t *testing.T) {
	dir, ref := emulatedGolden(t)
	cfg := mustPassConfig(t)
	cfg.KeyBlockSplitFrom, cfg.KeyBlockKeys = emulatedPrefill+1, 16
	model, err := exec.Open(dir, exec.Options{Backend: "metal", AllLogits: true, Chunk: emulatedPrefill, Passes: cfg, KVCache: graph.BF16})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	if got, want := model.KVBytesPerToken(), int64(2*2*1*64*2); got != want {
		t.Errorf("KV bytes per token %d, want %d (2 attention layers, K and V, one kv head of 64, bf16)", got, want)
	}
	rep, err := verify.Run(t.Context(), model, ref, verify.Options{DecodeFrom: emulatedPrefill})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("emulated Metal, bf16 KV, fixed key blocks: %s", oneLine(rep.String()))
	tol, err := verify.LookupTolerance("bf16-kv")
	if err != nil {
		t.Fatal(err)
	}
	if fails := tol.Failures(rep); len(fails) > 0 {
		t.Errorf("bf16-kv: %v", fails)
	}
}
