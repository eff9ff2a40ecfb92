package regularfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.json")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := Read(path, 10); err != nil || string(data) != "0123456789" {
		t.Fatalf("%q %v", data, err)
	}
	if _, err := Read(path, 9); err == nil || !strings.Contains(err.Error(), "more than the 9") {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := Read(filepath.Join(dir, "none"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := Read(dir, 10); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("directory: %v", err)
	}
	link := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "gone"), link); err != nil {
		t.Skip(err)
	}
	_, err := Read(link, 10)
	if err == nil || errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "symbolic link to") {
		t.Fatalf("dangling link: %v", err)
	}
}
