package tokenizer

import "unicode/utf8"

// byteToRune is GPT-2's reversible byte->unicode map: printable Latin-1 bytes map to
// themselves, the remaining 68 bytes to U+0100 onwards, so every token string in the
// vocabulary is printable text.
var byteToRune [256]rune

// runeToByte inverts byteToRune; runes outside the map are absent.
var runeToByte map[rune]byte

func init() {
	runeToByte = make(map[rune]byte, 256)
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelString renders raw bytes as the vocabulary's printable form.
func byteLevelString(raw string) string {
	out := make([]rune, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		out = append(out, byteToRune[raw[i]])
	}
	return string(out)
}

// tokenBytes is the ByteLevel decoder for one token: when every rune belongs to the byte
// map it yields the mapped bytes, otherwise the token's own UTF-8 (as Hugging Face does
// for added tokens that are not byte-level text).
func tokenBytes(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return []byte(tok)
		}
		out = append(out, b)
	}
	return out
}

// lossyUTF8 converts bytes to a string the way Rust's String::from_utf8_lossy does: each
// maximal invalid subpart becomes one U+FFFD. Go's own conversions differ (one U+FFFD per
// byte), and decode must match Hugging Face's output exactly.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || size > 1 {
			out = append(out, b[i:i+size]...)
			i += size
			continue
		}
		n := validPrefixLen(b[i:])
		if n == 0 {
			n = 1
		}
		out = utf8.AppendRune(out, utf8.RuneError)
		i += n
	}
	return string(out)
}

// validPrefixLen is the length of the longest prefix of b that could start a valid UTF-8
// sequence but is not complete (0 when b[0] cannot start one). Used for the maximal
// subpart rule and by the streaming decoder to know what to hold back.
func validPrefixLen(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // allowed range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 2
	case c == 0xE0:
		need, lo = 3, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 3
	case c == 0xED:
		need, hi = 3, 0x9F
	case c == 0xF0:
		need, lo = 4, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 4
	case c == 0xF4:
		need, hi = 4, 0x8F
	default:
		return 0
	}
	n := 1
	for n < need && n < len(b) {
		x := b[n]
		if n == 1 {
			if x < lo || x > hi {
				break
			}
		} else if x < 0x80 || x > 0xBF {
			break
		}
		n++
	}
	if n == need {
		return 0 // complete: not an invalid or incomplete prefix
	}
	return n
}
