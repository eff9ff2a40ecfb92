package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"pistil/internal/fixtures"
	"testing"
)

// goldenFiles are real safetensors files written by the Python safetensors library.
var goldenFiles = []string{
	fixtures.Path("golden/tiny-s1/hf/model.safetensors"),
	fixtures.Path("golden/tiny-s1/mlx-q4/model.safetensors"),
	fixtures.Path("golden/tiny-s1/hf/reference.safetensors"),
}

// goldenHeader returns a file's JSON header and the length of its data section.
func goldenHeader(tb testing.TB, path string) ([]byte, int64) {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	var prefix [8]byte
	if _, err := f.ReadAt(prefix[:], 0); err != nil {
		tb.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(prefix[:])
	js := make([]byte, n)
	if _, err := f.ReadAt(js, 8); err != nil {
		tb.Fatal(err)
	}
	return js, st.Size() - 8 - int64(n)
}

func TestGoldenHeadersParse(t *testing.T) {
	for _, path := range goldenFiles {
		js, dataLen := goldenHeader(t, path)
		h, err := ParseHeader(js, dataLen)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(h.Tensors) == 0 {
			t.Fatalf("%s: no tensors", path)
		}
	}
}

// FuzzParseHeader feeds mutated real headers to the parser and, through the length
// prefix, to the file-level reader. Neither may panic or allocate beyond its input, and
// whatever is accepted must tile the data section exactly.
func FuzzParseHeader(f *testing.F) {
	for _, path := range goldenFiles {
		js, dataLen := goldenHeader(f, path)
		f.Add(js, dataLen)
	}
	f.Add([]byte(`{}`), int64(0))
	f.Add([]byte(`{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}`), int64(12))
	f.Fuzz(func(t *testing.T, js []byte, dataLen int64) {
		h, err := ParseHeader(js, dataLen)
		if err == nil {
			var pos int64
			for _, ti := range h.Tensors {
				if ti.Begin != pos || ti.End < ti.Begin || ti.Bytes() != int64(ti.Elements())*int64(ti.DType.Size()) {
					t.Fatalf("accepted tensor %+v at position %d", ti, pos)
				}
				if got, ok := h.Lookup(ti.Name); !ok || got.Begin != ti.Begin {
					t.Fatalf("lookup of %q is inconsistent", ti.Name)
				}
				pos = ti.End
			}
			if pos != dataLen {
				t.Fatalf("accepted tensors covering %d of %d bytes", pos, dataLen)
			}
		}
		// The same bytes as a whole file: the first 8 are read as the header length.
		if _, _, err := readHeader(bytes.NewReader(js), int64(len(js))); err == nil && len(js) < 8 {
			t.Fatal("accepted a file shorter than the length prefix")
		}
	})
}
