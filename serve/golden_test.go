package serve

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"pistil/internal/fixtures"
	"testing"

	"pistil/exec"
	"pistil/models/tokenizer"
)

// The server also runs the real-layout fixtures in ../shared/golden (a checkpoint made by
// transformers in the official Hugging Face layout and by MLX in its 4-bit layout). They
// ship no tokenizer, so the synthetic byte-level one (same vocabulary size) is added.
func TestGoldenLayouts(t *testing.T) {
	for _, layout := range []string{"hf", "mlx-q4"} {
		t.Run(layout, func(t *testing.T) {
			src := fixtures.Golden(layout)
			if _, err := os.Stat(src); err != nil {
				t.Fatalf("golden fixture missing: %v", err)
			}
			dir := t.TempDir()
			for _, name := range []string{"config.json", "model.safetensors"} {
				if err := os.Symlink(filepath.Join(mustAbs(t, src), name), filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			if err := tokenizer.WriteSynthetic(dir, 512); err != nil {
				t.Fatal(err)
			}
			model, err := exec.Open(dir, exec.Options{Backend: "cpu"})
			if err != nil {
				t.Fatal(err)
			}
			defer model.Close()
			cfg := testConfig()
			cfg.ModelDir = dir
			s := New(cfg)
			if err := s.Load(func() (*exec.Model, error) { return model, nil }); err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(s.Handler())
			defer hs.Close()
			defer func() { s.sched.close(); <-s.sched.idle() }()
			ts := &testServer{Server: s, URL: hs.URL, client: hs.Client()}
			body := chatBody("Hello from the golden model", map[string]any{"max_tokens": 6})
			want := ts.chat(t, body)
			got := ts.streamChat(t, body)
			if got.content != want.content() || got.reasoning != want.reasoning() || want.Usage.CompletionTokens == 0 {
				t.Fatalf("stream (%q, %q) != non-stream (%q, %q)", got.content, got.reasoning, want.content(), want.reasoning())
			}
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
