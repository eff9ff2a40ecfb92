package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"pistil/internal/regularfile"
)

// tokenizerFile is the part of Hugging Face's tokenizer.json this package understands.
type tokenizerFile struct {
	AddedTokens  []addedTokenJSON `json:"added_tokens"`
	Normalizer   *componentJSON   `json:"normalizer"`
	PreTokenizer *componentJSON   `json:"pre_tokenizer"`
	Decoder      *componentJSON   `json:"decoder"`
	Model        *modelJSON       `json:"model"`
}

type addedTokenJSON struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// componentJSON covers normalizers, pre-tokenizers and decoders, including Sequence.
type componentJSON struct {
	Type          string          `json:"type"`
	Normalizers   []componentJSON `json:"normalizers"`
	PreTokenizers []componentJSON `json:"pretokenizers"`
	Pattern       *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       bool   `json:"use_regex"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// maxTokenizerBytes bounds tokenizer.json (Qwen's is 11 MB; the largest published ones
// are a few tens of MB).
const maxTokenizerBytes = 512 << 20

// Load reads dir/tokenizer.json (a byte-level BPE tokenizer of the Qwen2/3/3.5/3.6
// family). Anything the encoder would not reproduce exactly is refused with an error that
// names the field.
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := regularfile.Read(path, maxTokenizerBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// Parse builds a Tokenizer from the bytes of a tokenizer.json.
func Parse(data []byte) (*Tokenizer, error) {
	var f tokenizerFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	if err := checkNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	sp, err := checkPreTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	if f.Decoder != nil && f.Decoder.Type != "ByteLevel" {
		return nil, fmt.Errorf("decoder: type %q is not supported (want ByteLevel)", f.Decoder.Type)
	}
	m := f.Model
	if err := checkModel(m); err != nil {
		return nil, err
	}
	vocab, err := scanVocab(m.Vocab)
	if err != nil {
		return nil, err
	}
	merges, err := scanMerges(m.Merges)
	if err != nil {
		return nil, err
	}

	t := &Tokenizer{splitter: sp, vocab: vocab}
	for tok, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab: token %q has negative id %d", tok, id)
		}
		t.maxID = max(t.maxID, id)
	}
	for b := 0; b < 256; b++ {
		s := string(byteToRune[b])
		id, ok := vocab[s]
		if !ok {
			return nil, fmt.Errorf("model.vocab: no token for byte 0x%02x (%q); byte-level BPE needs all 256", b, s)
		}
		t.bpe.byteIDs[b] = id
	}
	t.bpe.merges = make(map[uint64]merge, len(merges))
	t.bpe.cache = make(map[string][]int32)
	for rank, p := range merges {
		a, okA := vocab[p[0]]
		b, okB := vocab[p[1]]
		ab, okAB := vocab[p[0]+p[1]]
		if !okA || !okB || !okAB {
			return nil, fmt.Errorf("model.merges[%d]: %q %q refers to a token missing from model.vocab", rank, p[0], p[1])
		}
		key := pairKey(a, b)
		if _, dup := t.bpe.merges[key]; !dup { // the first (lowest) rank wins
			t.bpe.merges[key] = merge{rank: int32(rank), id: ab}
		}
	}
	if err := t.setAddedTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	// ids index dense tables; a stray huge id would otherwise allocate gigabytes
	if limit := 2*(len(vocab)+len(f.AddedTokens)) + 1024; int(t.maxID) >= limit {
		return nil, fmt.Errorf("token id %d is far beyond the %d tokens defined (ids must be dense)", t.maxID, len(vocab)+len(f.AddedTokens))
	}
	t.buildIDTable()
	return t, nil
}

func checkNormalizer(n *componentJSON) error {
	if n == nil {
		return nil
	}
	switch n.Type {
	case "NFC":
		return nil
	case "Sequence":
		if len(n.Normalizers) == 0 {
			return nil
		}
		if len(n.Normalizers) == 1 && n.Normalizers[0].Type == "NFC" {
			return nil
		}
	}
	return fmt.Errorf("normalizer: type %q is not supported (want NFC or none)", n.Type)
}

// checkPreTokenizer accepts Sequence[Split(known regex, Isolated), ByteLevel(use_regex=false)].
func checkPreTokenizer(p *componentJSON) (splitter, error) {
	if p == nil {
		return splitter{}, errors.New("pre_tokenizer: missing (want Sequence[Split, ByteLevel])")
	}
	if p.Type != "Sequence" || len(p.PreTokenizers) != 2 {
		return splitter{}, fmt.Errorf("pre_tokenizer: type %q with %d parts is not supported (want Sequence[Split, ByteLevel])", p.Type, len(p.PreTokenizers))
	}
	split, bl := p.PreTokenizers[0], p.PreTokenizers[1]
	if split.Type != "Split" {
		return splitter{}, fmt.Errorf("pre_tokenizer.pretokenizers[0]: type %q is not supported (want Split)", split.Type)
	}
	if split.Pattern == nil || split.Pattern.Regex == nil {
		return splitter{}, errors.New("pre_tokenizer.pretokenizers[0].pattern.Regex: missing")
	}
	marks, known := splitPatterns[*split.Pattern.Regex]
	if !known {
		return splitter{}, fmt.Errorf("pre_tokenizer.pretokenizers[0].pattern.Regex: %q is not one of the Qwen2/Qwen3.5 split patterns this tokenizer implements", *split.Pattern.Regex)
	}
	if split.Behavior != "Isolated" || split.Invert {
		return splitter{}, fmt.Errorf("pre_tokenizer.pretokenizers[0]: behavior %q invert %v is not supported (want Isolated, false)", split.Behavior, split.Invert)
	}
	if bl.Type != "ByteLevel" || bl.AddPrefixSpace || bl.UseRegex {
		return splitter{}, fmt.Errorf("pre_tokenizer.pretokenizers[1]: %s(add_prefix_space=%v, use_regex=%v) is not supported (want ByteLevel without prefix space or regex)", bl.Type, bl.AddPrefixSpace, bl.UseRegex)
	}
	return splitter{marks: marks}, nil
}

func checkModel(m *modelJSON) error {
	switch {
	case m == nil:
		return errors.New("model: missing")
	case m.Type != "BPE":
		return fmt.Errorf("model.type: %q is not supported (want BPE)", m.Type)
	case m.Vocab == nil:
		return errors.New("model.vocab: missing")
	case m.Merges == nil:
		return errors.New("model.merges: missing")
	case m.ByteFallback:
		return errors.New("model.byte_fallback: true is not supported")
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("model.dropout: %v is not supported", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("model.continuing_subword_prefix: %q is not supported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("model.end_of_word_suffix: %q is not supported", *m.EndOfWordSuffix)
	case m.IgnoreMerges:
		return errors.New("model.ignore_merges: true is not supported")
	}
	return nil
}

func (t *Tokenizer) setAddedTokens(list []addedTokenJSON) error {
	t.added = make(map[string]int32, len(list))
	t.addedByID = make(map[int32]addedToken, len(list))
	for i, a := range list {
		switch {
		case a.Content == "":
			return fmt.Errorf("added_tokens[%d]: empty content", i)
		case a.ID < 0:
			return fmt.Errorf("added_tokens[%d] %q: negative id %d", i, a.Content, a.ID)
		case a.SingleWord || a.LStrip || a.RStrip:
			return fmt.Errorf("added_tokens[%d] %q: single_word/lstrip/rstrip are not supported", i, a.Content)
		}
		t.added[a.Content] = a.ID
		t.addedByID[a.ID] = addedToken{content: a.Content, special: a.Special}
		t.maxID = max(t.maxID, a.ID)
	}
	t.matcher = newAddedMatcher(t.added)
	return nil
}

// buildIDTable makes the id -> token string table used by decode.
func (t *Tokenizer) buildIDTable() {
	t.idToken = make([]string, t.maxID+1)
	t.idBytes = make([][]byte, t.maxID+1)
	for tok, id := range t.vocab {
		t.idToken[id] = tok
	}
	for id, a := range t.addedByID {
		t.idToken[id] = a.content
	}
	for id, tok := range t.idToken {
		if tok != "" {
			t.idBytes[id] = tokenBytes(tok)
		}
	}
	for _, id := range t.vocab {
		if _, isAdded := t.addedByID[id]; !isAdded {
			t.maxTokenBytes = max(t.maxTokenBytes, len(t.idBytes[id]))
		}
	}
	t.maxTokenBytes = max(t.maxTokenBytes, 1)
}
