// Package verify compares pistil's logits with a reference produced by another
// implementation (Hugging Face transformers for the goldens in ../shared/golden): the
// engine reads the reference's tokens teacher-forced, and the report says how far the
// logits are, whether the argmax agrees, the perplexity of each side, and whether the
// greedy continuation matches. `pistil check` prints the report; tests assert on it.
package verify

import (
	"encoding/binary"
	"fmt"
	"math"

	"pistil/models/safetensors"
)

// Reference is the content of a reference.safetensors file.
type Reference struct {
	Tokens    []int32     // the prompt, [S]
	Logits    [][]float32 // teacher-forced logits at every prompt position, [S][V]
	GenTokens []int32     // the greedy continuation, [G]
	// GenLogits[i] are the logits after tokens + GenTokens[:i] ([G][V]).
	GenLogits [][]float32
	Vocab     int
}

// LoadReference reads tokens, logits, gen_tokens and gen_logits from path.
func LoadReference(path string) (*Reference, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ref := &Reference{}
	if ref.Tokens, err = readI32(f, path, "tokens"); err != nil {
		return nil, err
	}
	if ref.GenTokens, err = readI32(f, path, "gen_tokens"); err != nil {
		return nil, err
	}
	var vocab int
	if ref.Logits, vocab, err = readRows(f, path, "logits", len(ref.Tokens)); err != nil {
		return nil, err
	}
	var genVocab int
	if ref.GenLogits, genVocab, err = readRows(f, path, "gen_logits", len(ref.GenTokens)); err != nil {
		return nil, err
	}
	if genVocab != vocab {
		return nil, fmt.Errorf("%s: logits have %d columns but gen_logits %d", path, vocab, genVocab)
	}
	ref.Vocab = vocab
	return ref, nil
}

func readI32(f *safetensors.File, path, name string) ([]int32, error) {
	info, ok := f.Info(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", path, name)
	}
	if info.DType != safetensors.I32 || len(info.Shape) != 1 {
		return nil, fmt.Errorf("%s: %s is %s%v, want I32 [n]", path, name, info.DType, info.Shape)
	}
	data, err := f.Data(name)
	if err != nil {
		return nil, err
	}
	out := make([]int32, info.Shape[0])
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out, nil
}

func readRows(f *safetensors.File, path, name string, rows int) ([][]float32, int, error) {
	info, ok := f.Info(name)
	if !ok {
		return nil, 0, fmt.Errorf("%s: no tensor %q", path, name)
	}
	if info.DType != safetensors.F32 || len(info.Shape) != 2 || info.Shape[0] != rows {
		return nil, 0, fmt.Errorf("%s: %s is %s%v, want F32 [%d, vocab]", path, name, info.DType, info.Shape, rows)
	}
	data, err := f.Data(name)
	if err != nil {
		return nil, 0, err
	}
	cols := info.Shape[1]
	out := make([][]float32, rows)
	for r := range out {
		out[r] = make([]float32, cols)
		for c := range out[r] {
			out[r][c] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*(r*cols+c):]))
		}
	}
	return out, cols, nil
}
