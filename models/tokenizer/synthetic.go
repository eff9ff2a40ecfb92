package tokenizer

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Qwen36ChatTemplate is the Qwen3.6 chat template written for synthetic models from
// model-spec.md §5.4 (no verbatim 3.6 template ships with this repository).
//
//go:embed qwen36_chat_template.jinja
var Qwen36ChatTemplate string

//go:embed synthetic_corpus.txt
var syntheticCorpus string

// qwenAddedTokens are the Qwen3.5/3.6 added tokens in id order, with their special flag.
var qwenAddedTokens = []struct {
	content string
	special bool
}{
	{"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true},
	{"<|object_ref_start|>", true}, {"<|object_ref_end|>", true},
	{"<|box_start|>", true}, {"<|box_end|>", true},
	{"<|quad_start|>", true}, {"<|quad_end|>", true},
	{"<|vision_start|>", true}, {"<|vision_end|>", true},
	{"<|vision_pad|>", true}, {"<|image_pad|>", true}, {"<|video_pad|>", true},
	{"<tool_call>", false}, {"</tool_call>", false},
	{"<|fim_prefix|>", false}, {"<|fim_middle|>", false}, {"<|fim_suffix|>", false}, {"<|fim_pad|>", false},
	{"<|repo_name|>", false}, {"<|file_sep|>", false},
	{"<tool_response>", false}, {"</tool_response>", false},
	{"<think>", false}, {"</think>", false},
	{"<|audio_start|>", true}, {"<|audio_end|>", true},
	{"<tts_pad>", true}, {"<tts_text_bos>", true}, {"<tts_text_eod>", true}, {"<tts_text_bos_single>", true},
	{"<|audio_pad|>", true},
}

// maxSyntheticMerges caps the learned merges ("a few hundred"); the built-in training text
// runs out of pairs (every word one token) not far beyond it.
const maxSyntheticMerges = 600

// WriteSynthetic writes tokenizer.json and tokenizer_config.json for a random test model:
// 256 byte tokens, merges learned deterministically by BPE training on a built-in text
// (as many as fit, at most maxSyntheticMerges), the Qwen3.5/3.6 added tokens right after
// them, the Qwen3.5 split pattern, and the Qwen3.6 chat template. Every id is below
// vocabSize.
func WriteSynthetic(dir string, vocabSize int) error {
	minSize := 256 + len(qwenAddedTokens)
	if vocabSize < minSize {
		return fmt.Errorf("synthetic tokenizer: vocab size %d is below the %d ids of 256 bytes and %d added tokens", vocabSize, minSize, len(qwenAddedTokens))
	}
	tokens, merges := trainBPE(syntheticCorpus, min(vocabSize-minSize, maxSyntheticMerges))

	vocab := make(map[string]int, len(tokens))
	for id, tok := range tokens {
		vocab[tok] = id
	}
	type addedJSON struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	added := make([]addedJSON, len(qwenAddedTokens))
	decoder := make(map[string]any, len(qwenAddedTokens))
	for i, a := range qwenAddedTokens {
		id := len(tokens) + i
		added[i] = addedJSON{ID: id, Content: a.content, Special: a.special}
		decoder[fmt.Sprint(id)] = map[string]any{
			"content": a.content, "lstrip": false, "normalized": false, "rstrip": false,
			"single_word": false, "special": a.special,
		}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	tokenizerJSON := map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patternQwen35}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}},
		"post_processor": byteLevel,
		"decoder":        byteLevel,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges,
		},
	}
	config := map[string]any{
		"add_bos_token":                false,
		"add_prefix_space":             false,
		"added_tokens_decoder":         decoder,
		"bos_token":                    nil,
		"chat_template":                Qwen36ChatTemplate,
		"clean_up_tokenization_spaces": false,
		"eos_token":                    "<|im_end|>",
		"errors":                       "replace",
		"model_max_length":             262144,
		"pad_token":                    "<|endoftext|>",
		"split_special_tokens":         false,
		"tokenizer_class":              "Qwen2Tokenizer",
		"unk_token":                    nil,
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synthetic tokenizer: %w", err)
	}
	for name, v := range map[string]any{"tokenizer.json": tokenizerJSON, "tokenizer_config.json": config} {
		if err := writeJSON(filepath.Join(dir, name), v); err != nil {
			return fmt.Errorf("synthetic tokenizer: %w", err)
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// trainBPE learns up to n merges from text: pre-tokenize with the Qwen3.5 pattern, then
// repeatedly merge the most frequent adjacent pair (ties: the smaller pair of ids), the
// way BPE vocabularies are made. It returns the token strings by id (bytes first) and
// the merges in rank order.
func trainBPE(text string, n int) (tokens []string, merges [][2]string) {
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(byteToRune[b]))
	}
	ids := map[string]int{}
	for id, tok := range tokens {
		ids[tok] = id
	}
	counts := map[string]int{}
	sp := splitter{marks: true}
	sp.split(text, func(piece string) { counts[piece]++ })
	type word struct {
		syms  []int
		count int
	}
	pieces := make([]string, 0, len(counts))
	for p := range counts {
		pieces = append(pieces, p)
	}
	sort.Strings(pieces)
	words := make([]word, len(pieces))
	for i, p := range pieces {
		syms := make([]int, len(p))
		for j := 0; j < len(p); j++ {
			syms[j] = int(p[j])
		}
		words[i] = word{syms, counts[p]}
	}
	for len(merges) < n {
		pairs := map[[2]int]int{}
		for _, w := range words {
			for j := 0; j+1 < len(w.syms); j++ {
				pairs[[2]int{w.syms[j], w.syms[j+1]}] += w.count
			}
		}
		best, bestCount := [2]int{}, 0
		for p, c := range pairs {
			if c > bestCount || (c == bestCount && (p[0] < best[0] || (p[0] == best[0] && p[1] < best[1]))) {
				best, bestCount = p, c
			}
		}
		if bestCount == 0 {
			break // every word is one token
		}
		a, b := tokens[best[0]], tokens[best[1]]
		merged, ok := ids[a+b]
		if !ok {
			merged = len(tokens)
			tokens = append(tokens, a+b)
			ids[a+b] = merged
		}
		merges = append(merges, [2]string{a, b})
		for i := range words {
			syms := words[i].syms
			out := syms[:0]
			for j := 0; j < len(syms); j++ {
				if j+1 < len(syms) && syms[j] == best[0] && syms[j+1] == best[1] {
					out = append(out, merged)
					j++
				} else {
					out = append(out, syms[j])
				}
			}
			words[i].syms = out
		}
	}
	return tokens, merges
}
