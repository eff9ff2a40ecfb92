package tokenizer

// StreamDecoder turns ids into text one at a time for streaming output. It never emits a
// partial UTF-8 character: bytes of an incomplete character are held until the character
// completes (or proves invalid), so the concatenation of all Push results and Flush equals
// Decode of all the ids.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte
}

// NewStreamDecoder starts an empty stream.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t}
}

// Push adds one id and returns the text that is now complete (possibly "").
func (sd *StreamDecoder) Push(id int32) string {
	sd.pending = append(sd.pending, sd.t.tokenBytes(id)...)
	cut := completePrefix(sd.pending)
	if cut == 0 {
		return ""
	}
	out := lossyUTF8(sd.pending[:cut])
	sd.pending = append(sd.pending[:0], sd.pending[cut:]...)
	return out
}

// Flush returns whatever is held back (an incomplete character becomes U+FFFD, as in
// Decode) and resets the stream.
func (sd *StreamDecoder) Flush() string {
	out := lossyUTF8(sd.pending)
	sd.pending = sd.pending[:0]
	return out
}

// completePrefix is the length of b without its trailing incomplete (but so far valid)
// UTF-8 sequence. Everything before that point decodes the same whatever follows.
func completePrefix(b []byte) int {
	// An incomplete sequence is at most 3 bytes long; look for its lead byte.
	for back := 1; back <= 3 && back <= len(b); back++ {
		start := len(b) - back
		c := b[start]
		if c < 0x80 {
			return len(b) // ASCII: nothing incomplete after it
		}
		if c >= 0xC0 { // a lead byte (or an invalid one)
			if validPrefixLen(b[start:]) == back {
				return start
			}
			return len(b)
		}
	}
	return len(b)
}
