package chat

import (
	"bytes"
	"encoding/json"
	"os"
	"pistil/internal/fixtures"
	"testing"

	"pistil/models/tokenizer"
)

var (
	tokDir    = fixtures.Path("tokenizer/qwen3")
	convsPath = fixtures.Path("tokenizer/conversations.json")
)

// conversation is one entry of conversations.json (the input of the golden generator).
type conversation struct {
	Name                string            `json:"name"`
	Messages            []Message         `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	EnableThinking      *bool             `json:"enable_thinking"`
}

type goldenChat struct {
	Chat []struct {
		Name string  `json:"name"`
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	} `json:"chat"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGoldenRender renders every golden conversation with the real Qwen3 template and
// compares text and token ids with transformers' apply_chat_template.
func TestGoldenRender(t *testing.T) {
	tmpl, err := LoadTemplate(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	var convs []conversation
	readJSON(t, convsPath, &convs)
	var gold goldenChat
	readJSON(t, tokDir+"/golden.json", &gold)
	if len(convs) == 0 || len(convs) != len(gold.Chat) {
		t.Fatalf("%d conversations, %d golden renderings", len(convs), len(gold.Chat))
	}
	for i, c := range convs {
		want := gold.Chat[i]
		if want.Name != c.Name {
			t.Fatalf("golden %d is %q, conversation is %q", i, want.Name, c.Name)
		}
		got, err := tmpl.Render(RenderOptions{
			Messages:            c.Messages,
			Tools:               c.Tools,
			AddGenerationPrompt: c.AddGenerationPrompt,
			EnableThinking:      c.EnableThinking,
		})
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		if got != want.Text {
			t.Errorf("%s: rendered\n%q\nwant\n%q", c.Name, got, want.Text)
			continue
		}
		ids := tok.Encode(got)
		if len(ids) != len(want.IDs) {
			t.Errorf("%s: %d ids, want %d", c.Name, len(ids), len(want.IDs))
			continue
		}
		for j := range ids {
			if ids[j] != want.IDs[j] {
				t.Errorf("%s: id %d is %d, want %d", c.Name, j, ids[j], want.IDs[j])
				break
			}
		}
	}
}
