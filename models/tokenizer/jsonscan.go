package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The vocabulary and merges are 300k small JSON strings; decoding them through
// encoding/json's reflection takes most of Load's time, so they are scanned directly.
// Load has already validated the whole document with encoding/json.

type jsonScanner struct {
	data []byte
	pos  int
}

func (s *jsonScanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (s *jsonScanner) peek() byte {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *jsonScanner) expect(c byte) error {
	if s.peek() != c {
		return fmt.Errorf("offset %d: want %q", s.pos, c)
	}
	s.pos++
	return nil
}

// str reads a JSON string; escapes are rare in vocabularies and go through encoding/json.
func (s *jsonScanner) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.pos
	escaped := false
	for i := start; i < len(s.data); i++ {
		switch s.data[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			s.pos = i + 1
			if !escaped {
				return string(s.data[start:i]), nil
			}
			var out string
			if err := json.Unmarshal(s.data[start-1:i+1], &out); err != nil {
				return "", fmt.Errorf("offset %d: %w", start, err)
			}
			return out, nil
		}
	}
	return "", fmt.Errorf("offset %d: unterminated string", start)
}

func (s *jsonScanner) integer() (int64, error) {
	s.skipSpace()
	start := s.pos
	for s.pos < len(s.data) && (s.data[s.pos] == '-' || (s.data[s.pos] >= '0' && s.data[s.pos] <= '9')) {
		s.pos++
	}
	n, err := strconv.ParseInt(string(s.data[start:s.pos]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("offset %d: want an integer id: %w", start, err)
	}
	return n, nil
}

// scanVocab parses {"token": id, ...}.
func scanVocab(raw []byte) (map[string]int32, error) {
	s := &jsonScanner{data: raw}
	if err := s.expect('{'); err != nil {
		return nil, fmt.Errorf("model.vocab: %w", err)
	}
	vocab := make(map[string]int32, len(raw)/16)
	for s.peek() != '}' {
		if len(vocab) > 0 {
			if err := s.expect(','); err != nil {
				return nil, fmt.Errorf("model.vocab: %w", err)
			}
		}
		tok, err := s.str()
		if err != nil {
			return nil, fmt.Errorf("model.vocab: %w", err)
		}
		if err := s.expect(':'); err != nil {
			return nil, fmt.Errorf("model.vocab: %w", err)
		}
		id, err := s.integer()
		if err != nil {
			return nil, fmt.Errorf("model.vocab[%q]: %w", tok, err)
		}
		vocab[tok] = int32(id)
	}
	return vocab, nil
}

// scanMerges parses both serialisations: [["a","b"], ...] and the older ["a b", ...].
func scanMerges(raw []byte) ([][2]string, error) {
	s := &jsonScanner{data: raw}
	if err := s.expect('['); err != nil {
		return nil, fmt.Errorf("model.merges: %w", err)
	}
	merges := make([][2]string, 0, len(raw)/16)
	for s.peek() != ']' {
		i := len(merges)
		if i > 0 {
			if err := s.expect(','); err != nil {
				return nil, fmt.Errorf("model.merges[%d]: %w", i, err)
			}
		}
		var pair [2]string
		var err error
		if s.peek() == '[' {
			s.pos++
			if pair[0], err = s.str(); err == nil {
				if err = s.expect(','); err == nil {
					if pair[1], err = s.str(); err == nil {
						err = s.expect(']')
					}
				}
			}
		} else {
			var line string
			if line, err = s.str(); err == nil {
				a, b, ok := strings.Cut(line, " ")
				if !ok || a == "" || b == "" || strings.Contains(b, " ") {
					err = fmt.Errorf("%q is not two space-separated tokens", line)
				}
				pair = [2]string{a, b}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("model.merges[%d]: %w", i, err)
		}
		merges = append(merges, pair)
	}
	return merges, nil
}
