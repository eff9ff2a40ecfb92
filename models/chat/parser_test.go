package chat

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// parsed is a whole response assembled from deltas.
type parsed struct {
	Reasoning string
	Content   string
	Calls     []ToolCall
}

func assemble(t *testing.T, deltas []Delta) parsed {
	t.Helper()
	var r parsed
	for _, d := range deltas {
		set := 0
		if d.Reasoning != "" {
			set++
			r.Reasoning += d.Reasoning
		}
		if d.Content != "" {
			set++
			r.Content += d.Content
		}
		if tc := d.ToolCall; tc != nil {
			set++
			switch {
			case tc.Name != "":
				if tc.Index != len(r.Calls) {
					t.Fatalf("tool call index %d, want %d", tc.Index, len(r.Calls))
				}
				r.Calls = append(r.Calls, ToolCall{ID: tc.ID, Type: "function", Function: FunctionCall{Name: tc.Name}})
			case tc.Index >= len(r.Calls):
				t.Fatalf("arguments for tool call %d before its name", tc.Index)
			default:
				r.Calls[tc.Index].Function.Arguments += tc.Arguments
			}
		}
		if set != 1 {
			t.Fatalf("delta %+v sets %d fields, want 1", d, set)
		}
	}
	for i := range r.Calls {
		r.Calls[i].ID = "" // random; checked separately
	}
	return r
}

// parseChunks feeds chunks and finishes.
func parseChunks(o ParserOptions, chunks []string) []Delta {
	p := NewParser(o)
	var out []Delta
	for _, c := range chunks {
		out = append(out, p.Push(c)...)
	}
	return append(out, p.Finish()...)
}

// splits yields the text whole, split at every byte offset, and one rune at a time.
func splits(text string) [][]string {
	out := [][]string{{text}}
	for i := 1; i < len(text); i++ {
		out = append(out, []string{text[:i], text[i:]})
	}
	var runes []string
	for _, r := range text {
		runes = append(runes, string(r))
	}
	return append(out, runes)
}

func call(name, args string) ToolCall {
	return ToolCall{Type: "function", Function: FunctionCall{Name: name, Arguments: args}}
}

var parserCases = []struct {
	name string
	opts ParserOptions
	text string
	want parsed
}{
	{
		name: "reasoning then answer",
		opts: ParserOptions{StartInReasoning: true},
		text: "Two and two.\nIt is four.\n</think>\n\nFour.",
		want: parsed{Reasoning: "Two and two.\nIt is four.", Content: "Four."},
	},
	{
		name: "stopped inside thinking",
		opts: ParserOptions{StartInReasoning: true},
		text: "still thinking about <tool_call> and </thi",
		want: parsed{Reasoning: "still thinking about <tool_call> and </thi"},
	},
	{
		name: "stopped inside thinking, tools parsed",
		opts: ParserOptions{StartInReasoning: true, ParseTools: true},
		text: "still thinking and </thi",
		want: parsed{Reasoning: "still thinking and </thi"},
	},
	{
		name: "tool call opened inside thinking ends the reasoning",
		opts: ParserOptions{StartInReasoning: true, ParseTools: true},
		text: "I should look it up.\n\n<tool_call>\n<function=lookup>\n<parameter=q>\npistil\n</parameter>\n</function>\n</tool_call>",
		want: parsed{Reasoning: "I should look it up.", Calls: []ToolCall{call("lookup", `{"q": "pistil"}`)}},
	},
	{
		name: "model opens think itself",
		opts: ParserOptions{},
		text: "<think>\nhmm\n</think>\n\nok",
		want: parsed{Reasoning: "hmm", Content: "ok"},
	},
	{
		name: "plain content keeps markup",
		opts: ParserOptions{},
		text: "a <b> c <tool_call> d",
		want: parsed{Content: "a <b> c <tool_call> d"},
	},
	{
		name: "qwen3.6 xml tool call after content",
		opts: ParserOptions{StartInReasoning: true, ParseTools: true},
		text: "\n</think>\n\nLet me compute.\n\n<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n</function>\n</tool_call>",
		want: parsed{Content: "Let me compute.", Calls: []ToolCall{call("add", `{"a": 2, "b": 3}`)}},
	},
	{
		name: "xml values keep JSON types, else strings",
		opts: ParserOptions{ParseTools: true},
		text: "<tool_call>\n<function=f>\n<parameter=s>\nhello \"world\"\nline 2\n</parameter>\n<parameter=o>\n{\"k\":[1,2.5,null]}\n</parameter>\n<parameter=t>\ntrue\n</parameter>\n<parameter=z>\n007\n</parameter>\n</function>\n</tool_call>",
		want: parsed{Calls: []ToolCall{call("f", `{"s": "hello \"world\"\nline 2", "o": {"k": [1, 2.5, null]}, "t": true, "z": "007"}`)}},
	},
	{
		name: "declared string parameter stays a string",
		opts: ParserOptions{ParseTools: true, Tools: []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"zip","parameters":{"type":"object","properties":{"code":{"type":"string"},"n":{"type":"integer"},"opt":{"type":["string","null"]},"any":{"type":["string","number"]}}}}}`)}},
		text: "<tool_call>\n<function=zip>\n<parameter=code>\n12345\n</parameter>\n<parameter=n>\n12345\n</parameter>\n<parameter=opt>\n1\n</parameter>\n<parameter=any>\n1\n</parameter>\n</function>\n</tool_call>",
		want: parsed{Calls: []ToolCall{call("zip", `{"code": "12345", "n": 12345, "opt": "1", "any": 1}`)}},
	},
	{
		name: "two calls, no parameters",
		opts: ParserOptions{ParseTools: true},
		text: "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n<function=later>\n<parameter=x>\nα\n</parameter>\n</function>\n</tool_call>",
		want: parsed{Calls: []ToolCall{call("now", `{}`), call("later", `{"x": "α"}`)}},
	},
	{
		name: "qwen3 json tool call",
		opts: ParserOptions{ParseTools: true},
		text: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Jakarta\", \"days\": 3}}\n</tool_call>",
		want: parsed{Calls: []ToolCall{call("get_weather", `{"city": "Jakarta", "days": 3}`)}},
	},
	{
		name: "malformed call is dropped, not content",
		opts: ParserOptions{ParseTools: true},
		text: "x <tool_call>not a call</tool_call> y",
		want: parsed{Content: "x y"},
	},
	{
		name: "closed json call that does not parse is dropped",
		opts: ParserOptions{ParseTools: true},
		text: "a\n<tool_call>\n{\"name\": \"f\", \"argu</tool_call>\nb",
		want: parsed{Content: "a\nb"},
	},
	{
		// A random-weight model's answer: the call's first token is another added token.
		name: "call opened by a stray token and closed is dropped",
		opts: ParserOptions{ParseTools: true},
		text: "light <tool_call><|box_start|> en me</tool_call> sa",
		want: parsed{Content: "light sa"},
	},
	{
		name: "call cut off by the end of generation",
		opts: ParserOptions{ParseTools: true},
		text: "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\npart",
		want: parsed{Calls: []ToolCall{call("f", `{"a": 1, "b": "part"}`)}},
	},
	{
		name: "missing parameter close tags",
		opts: ParserOptions{ParseTools: true},
		text: "<tool_call>\n<function=f>\n<parameter=a>\n1\n<parameter=b>\n2\n</function>\n</tool_call>",
		want: parsed{Calls: []ToolCall{call("f", `{"a": 1, "b": 2}`)}},
	},
	{
		name: "call with no name left open at the end is dropped, not content",
		opts: ParserOptions{ParseTools: true},
		text: "answer <tool_call><|repo_name|>",
		want: parsed{Content: "answer"},
	},
	{
		name: "call cut inside its function tag is dropped",
		opts: ParserOptions{ParseTools: true},
		text: "<tool_call>\n<func",
		want: parsed{},
	},
	{
		name: "unparseable json call left open is dropped",
		opts: ParserOptions{ParseTools: true},
		text: "a\n<tool_call>\n{\"name\": \"f\", \"argu",
		want: parsed{Content: "a"},
	},
	{
		name: "named call left open after text is a call",
		opts: ParserOptions{ParseTools: true},
		text: "text\n\n<tool_call>\n<function=f>\n<parameter=a>\nx y",
		want: parsed{Content: "text", Calls: []ToolCall{call("f", `{"a": "x y"}`)}},
	},
	{
		name: "unterminated tool_call start flushed as text",
		opts: ParserOptions{ParseTools: true},
		text: "see <tool_ca",
		want: parsed{Content: "see <tool_ca"},
	},
}

// TestParser checks every case whole, split at every byte, and rune by rune: a marker
// split across pushes must resolve the same way.
func TestParser(t *testing.T) {
	for _, c := range parserCases {
		for _, chunks := range splits(c.text) {
			got := assemble(t, parseChunks(c.opts, chunks))
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%s, chunks %q:\n got %+v\nwant %+v", c.name, chunks, got, c.want)
			}
		}
	}
}

// TestParserHoldsNoMarkerText: while a marker is incomplete, nothing of it is emitted.
func TestParserHoldsNoMarkerText(t *testing.T) {
	p := NewParser(ParserOptions{StartInReasoning: true, ParseTools: true})
	for _, chunk := range []string{"why", "</", "thi"} {
		for _, d := range p.Push(chunk) {
			if strings.Contains(d.Reasoning, "<") {
				t.Fatalf("partial marker emitted: %+v", d)
			}
		}
	}
	ds := p.Push("nk>answer <tool")
	if got := assemble(t, ds); got.Content != "answer" || got.Reasoning != "" {
		t.Fatalf("after </think>: %+v", got)
	}
}

func TestParserToolCallIDs(t *testing.T) {
	ds := parseChunks(ParserOptions{ParseTools: true}, []string{"<tool_call>\n<function=a>\n</function>\n</tool_call><tool_call>\n<function=b>\n</function>\n</tool_call>"})
	seen := map[string]bool{}
	for _, d := range ds {
		if d.ToolCall != nil && d.ToolCall.Name != "" {
			id := d.ToolCall.ID
			if !strings.HasPrefix(id, "call_") || len(id) != 29 || seen[id] {
				t.Fatalf("bad or repeated id %q", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != 2 {
		t.Fatalf("%d calls, want 2", len(seen))
	}
	n := 0
	fixed := parseChunks(ParserOptions{ParseTools: true, NewID: func() string { n++; return fmt.Sprint("id", n) }},
		[]string{"<tool_call>\n<function=a>\n</function>\n</tool_call>"})
	if fixed[0].ToolCall.ID != "id1" {
		t.Fatalf("NewID not used: %+v", fixed[0].ToolCall)
	}
}

// FuzzParser: any text split anywhere (or fed in 3-byte pieces) parses to the same result as the whole text, never
// panics, and loses no text when tool parsing is off.
func FuzzParser(f *testing.F) {
	for _, c := range parserCases {
		f.Add(c.text, uint(len(c.text)/2), c.opts.StartInReasoning)
	}
	f.Fuzz(func(t *testing.T, text string, cut uint, reasoning bool) {
		if !utf8.ValidString(text) {
			return
		}
		at := int(cut % uint(len(text)+1))
		for _, tools := range []bool{false, true} {
			o := ParserOptions{StartInReasoning: reasoning, ParseTools: tools}
			whole := assemble(t, parseChunks(o, []string{text}))
			split := assemble(t, parseChunks(o, []string{text[:at], text[at:]}))
			if !reflect.DeepEqual(whole, split) {
				t.Fatalf("tools=%v split at %d: whole %+v, split %+v", tools, at, whole, split)
			}
			var pieces []string // 3-byte pieces, split runes included
			for i := 0; i < len(text); i += 3 {
				pieces = append(pieces, text[i:min(i+3, len(text))])
			}
			if small := assemble(t, parseChunks(o, pieces)); !reflect.DeepEqual(whole, small) {
				t.Fatalf("tools=%v in 3-byte pieces: whole %+v, pieces %+v", tools, whole, small)
			}
			for _, c := range whole.Calls {
				if !json.Valid([]byte(c.Function.Arguments)) {
					t.Fatalf("arguments %q are not JSON", c.Function.Arguments)
				}
			}
			if !tools && !reasoning && !strings.Contains(text, "<think>") && whole.Content != text {
				t.Fatalf("content %q, want the text %q", whole.Content, text)
			}
		}
	})
}

// BenchmarkParserLongArgument streams a 200 KB parameter value (a file being written) in
// 4-byte pieces; the parser must not rescan the value on every push.
func BenchmarkParserLongArgument(b *testing.B) {
	value := strings.Repeat("line of the file with <tags> and </para\n", 5000)
	text := "<tool_call>\n<function=write>\n<parameter=content>\n" + value + "\n</parameter>\n</function>\n</tool_call>"
	b.SetBytes(int64(len(text)))
	for i := 0; i < b.N; i++ {
		p := NewParser(ParserOptions{ParseTools: true})
		n := 0
		for j := 0; j < len(text); j += 4 {
			n += len(p.Push(text[j:min(j+4, len(text))]))
		}
		n += len(p.Finish())
		if n != 3 {
			b.Fatalf("%d deltas, want name, arguments and close", n)
		}
	}
}
