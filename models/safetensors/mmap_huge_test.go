//go:build linux || darwin

package safetensors

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// mapFile gives the file's bytes with the 2 MiB-aligned mapping and without it, and
// unmapFile releases either.
func TestMapFileHugeAndPlain(t *testing.T) {
	defer func(saved bool) { MapHugePages = saved }(MapHugePages)
	data := make([]byte, 5<<20+123)
	rand.New(rand.NewSource(1)).Read(data)
	path := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{true, false} {
		MapHugePages = on
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mapFile(f, int64(len(data)))
		f.Close()
		if err != nil {
			t.Fatalf("huge=%v: %v", on, err)
		}
		if !bytes.Equal(m, data) {
			t.Errorf("huge=%v: mapped bytes differ from the file's", on)
		}
		if got := hugeMapped(m); got != (on && hugeSupported) {
			t.Errorf("huge=%v: hugeMapped %v", on, got)
		}
		if err := unmapFile(m); err != nil {
			t.Errorf("huge=%v: unmap: %v", on, err)
		}
	}
}
