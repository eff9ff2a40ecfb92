package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"
)

// /tokenize and /detokenize take llama-server's shapes, so its tools and scripts work:
//
//	POST /tokenize   {"content": "text", "parse_special": true, "with_pieces": false, "add_special": false}
//	              -> {"tokens": [ids]}   or, with_pieces, {"tokens": [{"id": 9707, "piece": "Hello"}]}
//	POST /detokenize {"tokens": [ids]} -> {"content": "text"}
//
// parse_special (default true, as in llama-server) reads "<|im_end|>" as the control
// token; false reads it as text. add_special would add a BOS token: the Qwen tokenizers
// have none, so it changes nothing. A piece that is not valid UTF-8 on its own (part of a
// character) is given as its bytes, as llama-server does.

type tokenizeRequest struct {
	Content      *string `json:"content"`
	AddSpecial   *bool   `json:"add_special"`
	ParseSpecial *bool   `json:"parse_special"`
	WithPieces   *bool   `json:"with_pieces"`
}

type tokenPiece struct {
	ID    int32 `json:"id"`
	Piece any   `json:"piece"` // a string, or a list of bytes
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	if e := s.checkReady(); e != nil {
		writeError(w, e)
		return
	}
	var out any
	_, ok := s.prepare(w, r, func(body []byte) (*prepared, *apiError) {
		var req tokenizeRequest
		if e := decodeObject(body, &req); e != nil {
			return nil, e
		}
		if req.Content == nil {
			return nil, badRequest("content", "missing_required_parameter", "content is required")
		}
		ids, _ := s.encodeRaw(*req.Content, req.ParseSpecial == nil || *req.ParseSpecial, -1)
		if req.WithPieces == nil || !*req.WithPieces {
			out = map[string]any{"tokens": nonNil(ids)}
			return nil, nil
		}
		pieces := make([]tokenPiece, len(ids))
		for i, id := range ids {
			pieces[i] = tokenPiece{ID: id, Piece: s.piece(id)}
		}
		out = map[string]any{"tokens": pieces}
		return nil, nil
	})
	if ok {
		writeJSON(w, http.StatusOK, out)
	}
}

// piece is one token's text, or its bytes when they are not whole characters.
func (s *Server) piece(id int32) any {
	if s.tok.IsAdded(id) {
		text, _ := s.tok.Token(id)
		return text
	}
	text := s.tok.Decode([]int32{id})
	raw := s.tok.TokenBytes(id)
	if utf8.Valid(raw) {
		return text
	}
	list := make([]int, len(raw))
	for i, b := range raw {
		list[i] = int(b)
	}
	return list
}

type detokenizeRequest struct {
	Tokens json.RawMessage `json:"tokens"`
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	if e := s.checkReady(); e != nil {
		writeError(w, e)
		return
	}
	var text string
	_, ok := s.prepare(w, r, func(body []byte) (*prepared, *apiError) {
		var req detokenizeRequest
		if e := decodeObject(body, &req); e != nil {
			return nil, e
		}
		if isNull(req.Tokens) {
			return nil, badRequest("tokens", "missing_required_parameter", "tokens is required")
		}
		var ids []int64
		if err := json.Unmarshal(req.Tokens, &ids); err != nil {
			return nil, invalidValue("tokens", "tokens must be an array of token ids")
		}
		vocab := s.tok.VocabSize()
		list := make([]int32, len(ids))
		for i, id := range ids {
			if id < 0 || id >= int64(vocab) {
				return nil, invalidValue(fmt.Sprintf("tokens[%d]", i), "token id %d is outside the vocabulary of %d", id, vocab)
			}
			list[i] = int32(id)
		}
		text = s.tok.Decode(list)
		return nil, nil
	})
	if ok {
		writeJSON(w, http.StatusOK, map[string]string{"content": text})
	}
}

func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}
