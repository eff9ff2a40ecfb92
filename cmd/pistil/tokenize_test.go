package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"pistil/internal/fixtures"
	"strings"
	"testing"

	"pistil/models/tokenizer"
)

var qwen3TokDir = fixtures.Path("tokenizer/qwen3")

func TestTokenizeCommand(t *testing.T) {
	var out bytes.Buffer
	if err := tokenizeCmd([]string{"--model", qwen3TokDir}, strings.NewReader("Hello, world!"), &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "9707 11 1879 0\n" {
		t.Fatalf("ids %q", out.String())
	}
	out.Reset()
	if err := tokenizeCmd([]string{"--model", qwen3TokDir, "--decode"}, strings.NewReader("9707 11 1879 0\n"), &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "Hello, world!" {
		t.Fatalf("decoded %q", out.String())
	}
	for _, bad := range []string{"9707 x", "9707 99999999"} {
		err := tokenizeCmd([]string{"--model", qwen3TokDir, "--decode"}, strings.NewReader(bad), &out)
		if err == nil || !strings.Contains(err.Error(), "input item 2") {
			t.Errorf("decode %q: want an error naming item 2, got %v", bad, err)
		}
	}
	if err := tokenizeCmd([]string{"--model", t.TempDir()}, strings.NewReader("x"), &out); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("missing tokenizer: %v", err)
	}
}

// TestRenderCommand renders golden conversations through the command, written as the
// object form (messages + tools) and as a bare message list.
func TestRenderCommand(t *testing.T) {
	data, err := os.ReadFile(fixtures.Path("tokenizer/conversations.json"))
	if err != nil {
		t.Fatal(err)
	}
	var convs []map[string]json.RawMessage
	if err := json.Unmarshal(data, &convs); err != nil {
		t.Fatal(err)
	}
	gdata, err := os.ReadFile(filepath.Join(qwen3TokDir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var gold struct{ Chat []struct{ Name, Text string } }
	if err := json.Unmarshal(gdata, &gold); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, c := range convs {
		var name string
		json.Unmarshal(c["name"], &name)
		var args []string
		if string(c["enable_thinking"]) == "false" {
			args = append(args, "--no-think")
		}
		if string(c["add_generation_prompt"]) != "true" {
			args = append(args, "--no-generation-prompt")
		}
		path := filepath.Join(dir, name+".json")
		body := c["messages"]
		if _, ok := c["tools"]; ok {
			body, _ = json.Marshal(map[string]json.RawMessage{"messages": c["messages"], "tools": c["tools"]})
		}
		os.WriteFile(path, body, 0o644)
		var out bytes.Buffer
		if err := renderCmd(append(args, "--model", qwen3TokDir, "--messages", path), nil, &out); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if out.String() != gold.Chat[i].Text {
			t.Errorf("%s: rendered %q, want %q", name, out.String(), gold.Chat[i].Text)
		}
	}
}

func TestRenderCommandErrors(t *testing.T) {
	dir := t.TempDir()
	if err := tokenizer.WriteSynthetic(dir, 512); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := renderCmd([]string{"--model", dir, "--messages", "-"}, strings.NewReader(`[{"role":"assistant","content":"x"}]`), &out)
	if err == nil || !strings.Contains(err.Error(), "No user query found in messages.") || !strings.Contains(err.Error(), "line ") {
		t.Errorf("want the template's error with its line, got %v", err)
	}
	err = renderCmd([]string{"--model", dir, "--messages", "-"}, strings.NewReader(`{"role":"user"}`), &out)
	if err == nil || !strings.Contains(err.Error(), `no "messages"`) {
		t.Errorf("want a messages error, got %v", err)
	}
	out.Reset()
	if err := renderCmd([]string{"--model", dir, "--messages", "-", "--ids"}, strings.NewReader(`[{"role":"user","content":"hi"}]`), &out); err != nil {
		t.Fatal(err)
	}
	if fields := strings.Fields(out.String()); len(fields) < 8 {
		t.Errorf("ids output %q", out.String())
	}
}
