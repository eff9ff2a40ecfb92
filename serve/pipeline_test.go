package serve

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"pistil/models/chat"
	"pistil/models/tokenizer"
)

// These tests drive the output pipeline with chosen token sequences through the real
// tokenizer's stream decoder and the real chat parser: the cases a random model will not
// produce on demand (a stop string split across tokens, an emoji split across tokens, a
// tool call).

func tinyTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(tiny.dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tokensOf returns ids whose decoding is exactly the given byte pieces, one id sequence
// per piece, so that piece boundaries are token boundaries.
func tokensOf(t *testing.T, tok *tokenizer.Tokenizer, pieces ...string) []int32 {
	t.Helper()
	var ids []int32
	for _, p := range pieces {
		enc := tok.Encode(p)
		if got := tok.Decode(enc); got != p && utf8.ValidString(p) {
			t.Fatalf("piece %q does not round-trip: %q", p, got)
		}
		ids = append(ids, enc...)
	}
	return ids
}

// byteTokens returns one token per byte of s (the byte-level vocabulary has all 256).
func byteTokens(t *testing.T, tok *tokenizer.Tokenizer, s string) []int32 {
	t.Helper()
	var ids []int32
	for i := 0; i < len(s); i++ {
		id := byteToken(t, tok, s[i])
		ids = append(ids, id)
	}
	return ids
}

// byteToken returns the vocabulary entry for the single byte b: in a byte-level BPE
// vocabulary that is the GPT-2 byte-to-character map's character for b.
func byteToken(t *testing.T, tok *tokenizer.Tokenizer, b byte) int32 {
	t.Helper()
	id, ok := tok.TokenID(string(byteLevelRune(b)))
	if !ok {
		t.Fatalf("no token for byte %#x", b)
	}
	return id
}

// byteLevelRune is GPT-2's bytes_to_unicode: printable bytes map to themselves, the other
// 68 to 256, 257, ... in byte order.
func byteLevelRune(b byte) rune {
	printable := func(c int) bool { return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255) }
	if printable(int(b)) {
		return rune(b)
	}
	n := 0
	for c := 0; c < int(b); c++ {
		if !printable(c) {
			n++
		}
	}
	return rune(256 + n)
}

// runPipeline feeds ids and collects what a client would see, per push.
func runPipeline(p *pipeline, ids []int32) (pushes [][]outDelta, stopped bool) {
	for _, id := range ids {
		ds, stop := p.push(id)
		pushes = append(pushes, ds)
		if stop {
			return append(pushes, p.finish()), true
		}
	}
	return append(pushes, p.finish()), false
}

func joinContent(pushes [][]outDelta) string {
	var b strings.Builder
	for _, ds := range pushes {
		for _, d := range ds {
			b.WriteString(d.Content)
		}
	}
	return b.String()
}

// C5: a stop string split across tokens never leaks, and a false partial match is
// released intact.
func TestC5StopStringAcrossTokens(t *testing.T) {
	tok := tinyTokenizer(t)
	cases := []struct {
		pieces []string
		stops  []string
		want   string
		stop   bool
	}{
		{[]string{"Hi", "\nUser", ":", " more"}, []string{"\nUser:"}, "Hi", true},
		{[]string{"ONCE ", "STO", "RY", " then STOP", " after"}, []string{"STOP"}, "ONCE STORY then ", true},
		{[]string{"ab", "c"}, []string{"abcd"}, "abc", false}, // held partial flushed at the end
		{[]string{"x", "y", "z"}, []string{"q", "yz"}, "x", true},
	}
	for _, c := range cases {
		ids := tokensOf(t, tok, c.pieces...)
		p := newPipeline(tok.NewStreamDecoder(), c.stops, plainParser{})
		pushes, stopped := runPipeline(p, ids)
		got := joinContent(pushes)
		if got != c.want || stopped != c.stop {
			t.Fatalf("%q with stops %q: got %q (stopped %v), want %q (%v)", c.pieces, c.stops, got, stopped, c.want, c.stop)
		}
		// No prefix of a stop string is ever released before it is proven not to be one.
		released := ""
		for _, ds := range pushes {
			for _, d := range ds {
				released += d.Content
			}
			for _, s := range c.stops {
				if strings.Contains(released, s) {
					t.Fatalf("stop %q leaked in %q", s, released)
				}
			}
		}
	}
}

// C6: multi-byte characters split across tokens are emitted whole; an invalid byte
// becomes exactly one U+FFFD and does not stall the stream.
func TestC6UTF8AcrossTokens(t *testing.T) {
	tok := tinyTokenizer(t)
	for _, text := range []string{"😀", "a😀b", "中文", "é!"} {
		ids := byteTokens(t, tok, text)
		p := newPipeline(tok.NewStreamDecoder(), nil, plainParser{})
		pushes, _ := runPipeline(p, ids)
		for _, ds := range pushes {
			for _, d := range ds {
				if !utf8.ValidString(d.Content) || strings.ContainsRune(d.Content, utf8.RuneError) {
					t.Fatalf("%q: delta %q is not whole UTF-8", text, d.Content)
				}
			}
		}
		if got := joinContent(pushes); got != text {
			t.Fatalf("%q came out as %q", text, got)
		}
	}
	// A lone 0xFF between ASCII: one replacement character, and the "b" after it is
	// released at once, not at the end.
	ids := append(append(byteTokens(t, tok, "a"), byteToken(t, tok, 0xFF)), byteTokens(t, tok, "b")...)
	p := newPipeline(tok.NewStreamDecoder(), nil, plainParser{})
	var seen string
	for _, id := range ids {
		ds, _ := p.push(id)
		for _, d := range ds {
			seen += d.Content
		}
	}
	if seen != "a\uFFFDb" {
		t.Fatalf("invalid byte stalled or multiplied: %q", seen)
	}
}

// C9: a Qwen tool call in the output becomes OpenAI tool-call chunks: the first delta of
// each call carries index, id, type and name, later ones only arguments; indexes are
// distinct; streamed and accumulated forms agree; finish_reason is tool_calls.
func TestC9ToolCallChunks(t *testing.T) {
	tok := tinyTokenizer(t)
	output := "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>"
	ids := tok.Encode(output)
	tools := []json.RawMessage{
		json.RawMessage(`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`),
		json.RawMessage(`{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}}}}}`),
	}
	parser := chatParser{chat.NewParser(chat.ParserOptions{ParseTools: true, Tools: tools})}
	p := newPipeline(tok.NewStreamDecoder(), nil, parser)
	x := &exchange{p: &prepared{chat: true}, id: "chatcmpl-test", model: testModel, callIndex: map[int]int{}, announced: map[int]bool{}}
	var chunks []chatChunk
	for _, id := range ids {
		ds, _ := p.push(id)
		x.collect(ds)
		for _, c := range x.chunks(ds) {
			chunks = append(chunks, c.(chatChunk))
		}
	}
	ds := p.finish()
	x.collect(ds)
	for _, c := range x.chunks(ds) {
		chunks = append(chunks, c.(chatChunk))
	}
	x.res.Finish = "stop"
	if x.finishReason() != "tool_calls" {
		t.Fatalf("finish reason %q", x.finishReason())
	}
	if x.content.String() != "Let me check." {
		t.Fatalf("content %q", x.content.String())
	}
	if len(x.calls) != 2 || x.calls[0].Function.Name != "get_weather" || x.calls[1].Function.Name != "get_time" {
		t.Fatalf("calls %+v", x.calls)
	}
	if x.calls[0].ID == x.calls[1].ID || !strings.HasPrefix(x.calls[0].ID, "call_") {
		t.Fatalf("ids %q %q", x.calls[0].ID, x.calls[1].ID)
	}
	for i, want := range []string{`{"city": "Paris"}`, `{"zone": "CET"}`} {
		var got, exp map[string]any
		if json.Unmarshal([]byte(x.calls[i].Function.Arguments), &got) != nil || json.Unmarshal([]byte(want), &exp) != nil || got["city"] != exp["city"] || got["zone"] != exp["zone"] {
			t.Fatalf("call %d arguments %q", i, x.calls[i].Function.Arguments)
		}
	}
	// Wire checks on the streamed chunks, as a client accumulator sees them.
	acc := map[int]*toolCallJSON{}
	for _, c := range chunks {
		raw := string(marshalJSON(c))
		if strings.Contains(raw, "<tool_call>") || strings.Contains(raw, "<function=") {
			t.Fatalf("tool markup leaked: %s", raw)
		}
		for _, tc := range c.Choices[0].Delta.ToolCalls {
			a := acc[tc.Index]
			if a == nil {
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
					t.Fatalf("first delta of call %d lacks id/type/name: %s", tc.Index, raw)
				}
				a = &toolCallJSON{}
				acc[tc.Index] = a
			} else if tc.ID != "" || tc.Type != "" || tc.Function.Name != "" {
				t.Fatalf("later delta of call %d repeats id/type/name: %s", tc.Index, raw)
			}
			a.ID += tc.ID
			a.Function.Name += tc.Function.Name
			a.Function.Arguments += tc.Function.Arguments
		}
	}
	if len(acc) != 2 || acc[0] == nil || acc[1] == nil {
		t.Fatalf("indexes %v", acc)
	}
	for i := range 2 {
		if acc[i].ID != x.calls[i].ID || acc[i].Function.Name != x.calls[i].Function.Name || acc[i].Function.Arguments != x.calls[i].Function.Arguments {
			t.Fatalf("streamed call %d %+v != accumulated %+v", i, acc[i], x.calls[i])
		}
	}
}

// A </think> split across pushes never reaches content, and reasoning stays apart.
func TestThinkMarkerSplit(t *testing.T) {
	tok := tinyTokenizer(t)
	ids := tokensOf(t, tok, "I should greet.", "\n</think>\n\n", "Hello!")
	parser := chatParser{chat.NewParser(chat.ParserOptions{StartInReasoning: true})}
	p := newPipeline(tok.NewStreamDecoder(), nil, parser)
	pushes, _ := runPipeline(p, ids)
	var reasoning, content string
	for _, ds := range pushes {
		for _, d := range ds {
			reasoning += d.Reasoning
			content += d.Content
		}
	}
	if reasoning != "I should greet." || content != "Hello!" {
		t.Fatalf("reasoning %q content %q", reasoning, content)
	}
}

// The stop filter on its own: the longest held suffix is exactly a proper prefix.
func TestStopFilterHoldsOnlyPrefixes(t *testing.T) {
	f := stopFilter{stops: []string{"abc", "bd"}}
	if out := f.push("xab"); out != "x" || f.held != "ab" {
		t.Fatalf("out %q held %q", out, f.held)
	}
	if out := f.push("x"); out != "abx" || f.held != "" {
		t.Fatalf("out %q held %q", out, f.held)
	}
	if out := f.push("zb"); out != "z" || f.held != "b" {
		t.Fatalf("out %q held %q", out, f.held)
	}
	if out := f.push("d tail"); out != "" || !f.matched {
		t.Fatalf("out %q matched %v", out, f.matched)
	}
	if f.flush() != "" || f.push("more") != "" {
		t.Fatal("text after a match was released")
	}
}
