package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func renderOne(t *testing.T, tmpl *Template) string {
	t.Helper()
	out, err := tmpl.Render(RenderOptions{Messages: []Message{{Role: "user", Content: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLoadTemplateSources(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "tokenizer_config.json", `{"chat_template": "config:{{ messages[0].content }}{{ eos_token }}", "eos_token": "<e>"}`)
	tmpl, err := LoadTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := renderOne(t, tmpl); got != "config:x<e>" {
		t.Fatalf("from tokenizer_config.json: %q", got)
	}
	// chat_template.jinja wins over the config's template, as in transformers
	writeFile(t, dir, "chat_template.jinja", "file:{{ messages[0].content }}")
	if tmpl, err = LoadTemplate(dir); err != nil {
		t.Fatal(err)
	}
	if got := renderOne(t, tmpl); got != "file:x" {
		t.Fatalf("from chat_template.jinja: %q", got)
	}
	// a list of named templates: "default" is used
	named := t.TempDir()
	writeFile(t, named, "tokenizer_config.json", `{"chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "default:{{ messages[0].content }}"}]}`)
	if tmpl, err = LoadTemplate(named); err != nil {
		t.Fatal(err)
	}
	if got := renderOne(t, tmpl); got != "default:x" {
		t.Fatalf("named templates: %q", got)
	}
}

func TestLoadTemplateErrors(t *testing.T) {
	empty := t.TempDir()
	if _, err := LoadTemplate(empty); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json") {
		t.Errorf("empty dir: %v", err)
	}
	noTemplate := t.TempDir()
	writeFile(t, noTemplate, "tokenizer_config.json", `{"eos_token": "<e>"}`)
	if _, err := LoadTemplate(noTemplate); err == nil || !strings.Contains(err.Error(), "no chat_template") {
		t.Errorf("no template: %v", err)
	}
	broken := t.TempDir()
	writeFile(t, broken, "chat_template.jinja", "line one\n{% if x %}unclosed")
	if _, err := LoadTemplate(broken); err == nil || !strings.Contains(err.Error(), "chat_template.jinja") {
		t.Errorf("syntax error: %v", err)
	}
}

func TestMessageJSON(t *testing.T) {
	var msgs []Message
	err := json.Unmarshal([]byte(`[
		{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}]},
		{"role": "assistant", "content": null, "tool_calls": [
			{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}},
			{"type": "function", "function": {"name": "g", "arguments": {"z": [1], "y": "s"}}}]},
		{"role": "tool", "tool_call_id": "c1", "content": "r"}]`), &msgs)
	if err != nil {
		t.Fatal(err)
	}
	if parts, ok := msgs[0].Content.([]ContentPart); !ok || len(parts) != 2 || parts[1].ImageURL.URL != "u" || msgs[0].ContentText() != "a" {
		t.Fatalf("parts: %#v", msgs[0].Content)
	}
	if msgs[1].Content != nil || msgs[1].ToolCalls[0].Function.Arguments != `{"b": 1, "a": 2}` ||
		msgs[1].ToolCalls[1].Function.Arguments != `{"z": [1], "y": "s"}` {
		t.Fatalf("tool calls: %+v", msgs[1])
	}
	if msgs[2].ToolCallID != "c1" {
		t.Fatalf("tool message: %+v", msgs[2])
	}
	for _, bad := range []string{`{"role": "user", "content": 5}`, `{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}`} {
		var m Message
		if err := json.Unmarshal([]byte(bad), &m); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
