package serve

import (
	"fmt"

	"pistil/models/synth"
	"pistil/models/tokenizer"
)

// writeTinyModel writes synth's "tiny" preset (random MLX 4-bit weights of the real
// architecture at toy width) with a synthetic byte-level tokenizer and the Qwen3.6 chat
// template.
func writeTinyModel(dir string) error {
	res, err := synth.Write(synth.Options{Preset: "tiny", Layout: synth.MLXQ4, Seed: 7, Out: dir, Workers: 2})
	if err != nil {
		return err
	}
	if err := tokenizer.WriteSynthetic(dir, res.Config.VocabSize); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	return nil
}
