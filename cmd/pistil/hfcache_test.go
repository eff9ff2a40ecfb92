package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pistil/internal/fixtures"
)

// fakeHFCache lays out a Hugging Face hub cache holding repo at one snapshot whose files
// are the real tokenizer fixture (as the hub does: refs/main names the snapshot).
func fakeHFCache(t *testing.T, cache, repo string) string {
	t.Helper()
	base := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	snap := filepath.Join(base, "snapshots", "0123abcd")
	if err := os.MkdirAll(filepath.Join(base, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "refs", "main"), []byte("0123abcd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(fixtures.Path("tokenizer/qwen3"), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(snap, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(snap, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestModelFromHuggingFaceCache(t *testing.T) {
	const repo = "mlx-community/Qwen3.6-35B-A3B-4bit"
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HUGGINGFACE_HUB_CACHE", "")
	hubCache, hfHome := t.TempDir(), t.TempDir()

	// Each place on its own: HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub.
	for _, c := range []struct{ hubCache, hfHome, cache string }{
		{hubCache, "", hubCache},
		{"", hfHome, filepath.Join(hfHome, "hub")},
		{"", "", filepath.Join(home, ".cache", "huggingface", "hub")},
	} {
		t.Setenv("HF_HUB_CACHE", c.hubCache)
		t.Setenv("HF_HOME", c.hfHome)
		snap := fakeHFCache(t, c.cache, repo)
		got, err := resolveModel(repo)
		if err != nil || got != snap {
			t.Errorf("cache %s: got %q, %v; want %s", c.cache, got, err, snap)
		}
		// The command sees the snapshot's files: tokenize through the repo id.
		var out strings.Builder
		if err := tokenizeCmd([]string{"--model", repo, "--text", "Hello, world!"}, strings.NewReader(""), &out); err != nil || out.String() != "9707 11 1879 0\n" {
			t.Errorf("tokenize --model %s: %q, %v", repo, out.String(), err)
		}
		os.RemoveAll(c.cache)
	}

	// Not cached anywhere: the error names every place looked and does not download.
	t.Setenv("HF_HUB_CACHE", hubCache)
	t.Setenv("HF_HOME", hfHome)
	_, err := resolveModel(repo)
	if err == nil {
		t.Fatal("resolved a repo that is in no cache")
	}
	for _, want := range []string{hubCache, filepath.Join(hfHome, "hub"), filepath.Join(home, ".cache", "huggingface", "hub"), "does not download"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}

	// A cached repo whose download never wrote refs/main says so.
	if err := os.MkdirAll(filepath.Join(hubCache, "models--mlx-community--Qwen3.6-35B-A3B-4bit", "snapshots"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveModel(repo); err == nil || !strings.Contains(err.Error(), "no refs/main") {
		t.Errorf("half-downloaded repo: %v", err)
	}

	// Existing paths and things that are not repo ids are passed through untouched.
	for _, arg := range []string{home, "./relative/dir", "/abs/path", "a/b/c", "../x"} {
		if got, err := resolveModel(arg); err != nil || got != arg {
			t.Errorf("%q: got %q, %v", arg, got, err)
		}
	}
}
