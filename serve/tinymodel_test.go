package serve

import (
	"pistil/models/synth"
)

// writeTinyModel writes synth's "tiny" preset: random MLX 4-bit weights of the real
// architecture at toy width, with a synthetic byte-level tokenizer and the Qwen3.6 chat
// template.
func writeTinyModel(dir string) error {
	_, err := synth.Write(synth.Options{Preset: "tiny", Layout: synth.MLXQ4, Seed: 7, Out: dir, Workers: 2})
	return err
}
