//go:build linux || darwin

package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pistil/models/tokenizer"
)

// linkedCheckpoint is a folder whose files are symlinks to the golden HF checkpoint's, so
// one of them can be replaced without copying the weights.
func linkedCheckpoint(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(goldenHF)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		abs, _ := filepath.Abs(filepath.Join(goldenHF, e.Name()))
		if err := os.Symlink(abs, filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// openWithin opens dir and fails the test if that takes more than a few seconds (a FIFO
// used to block the open forever).
func openWithin(t *testing.T, open func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- open() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the open hangs")
		return nil
	}
}

// TestFilesMustBeRegular: a FIFO, a device, a directory, a symlink loop or a dangling link
// in place of a checkpoint file is refused at once with an error that says which it is.
func TestFilesMustBeRegular(t *testing.T) {
	replace := map[string]func(path string) error{
		"a named pipe (FIFO), not a regular file": func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"a character device, not a regular file":  func(p string) error { return os.Symlink("/dev/zero", p) },
		"a directory, not a regular file":         func(p string) error { return os.Mkdir(p, 0o755) },
		"is a symbolic link loop": func(p string) error {
			loop := p + ".loop"
			if err := os.Symlink(loop, p); err != nil {
				return err
			}
			return os.Symlink(p, loop)
		},
		"which does not exist": func(p string) error { return os.Symlink(p+".gone", p) },
	}
	for _, file := range []string{"model.safetensors", "config.json", "generation_config.json"} {
		for want, make := range replace {
			t.Run(file+" "+want, func(t *testing.T) {
				dir := linkedCheckpoint(t)
				path := filepath.Join(dir, file)
				os.Remove(path)
				if err := make(path); err != nil {
					t.Fatal(err)
				}
				err := openWithin(t, func() error {
					ck, err := Open(dir)
					if err == nil {
						ck.Close()
					}
					return err
				})
				if err == nil {
					t.Fatal("opened")
				}
				mustContain(t, file, err.Error(), want, file)
				if strings.Contains(err.Error(), "missing") || strings.Contains(err.Error(), "truncated") || strings.Contains(err.Error(), "neither") {
					t.Errorf("misreported: %v", err)
				}
			})
		}
	}
	// An index naming a shard that is a FIFO.
	dir := linkedCheckpoint(t)
	os.Remove(filepath.Join(dir, "model.safetensors"))
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"),
		[]byte(`{"weight_map":{"model.embed_tokens.weight":"shard.safetensors"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "shard.safetensors"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := openWithin(t, func() error { _, err := Open(dir); return err })
	if err == nil || !strings.Contains(err.Error(), "shard.safetensors is a named pipe") {
		t.Fatalf("FIFO shard: %v", err)
	}
	// The tokenizer is read the same way.
	tokDir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(tokDir, "tokenizer.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = openWithin(t, func() error { _, err := tokenizer.Load(tokDir); return err })
	if err == nil || !strings.Contains(err.Error(), "named pipe") {
		t.Fatalf("FIFO tokenizer.json: %v", err)
	}
}
