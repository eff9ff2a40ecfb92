package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"

	"pistil/internal/regularfile"
)

// File is one open, mapped safetensors file. Slices it returns alias the read-only map and
// stay valid until Close.
type File struct {
	Path    string
	Header  *Header
	mapping []byte // the whole file
	data    []byte // the data section
}

// Open validates path's header against the file's size and maps the file. Every error
// names the file.
func Open(path string) (*File, error) {
	// A regular file only: a FIFO would block the open (and the load) forever, and a
	// device has no size to check the header against.
	f, st, err := regularfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	size := st.Size()
	hdr, dataStart, err := readHeader(f, size)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	m, err := mapFile(f, size)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: mmap: %w", path, err)
	}
	return &File{Path: path, Header: hdr, mapping: m, data: m[dataStart:]}, nil
}

// readHeader reads and validates the length prefix and the header. The header buffer is
// allocated only once its claimed length is known to fit inside the file.
func readHeader(r io.ReaderAt, size int64) (*Header, int64, error) {
	if size < 8 {
		return nil, 0, fmt.Errorf("truncated: %d bytes, too short for the 8-byte header length", size)
	}
	var prefix [8]byte
	if _, err := r.ReadAt(prefix[:], 0); err != nil {
		return nil, 0, fmt.Errorf("reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(prefix[:])
	if n > MaxHeaderBytes {
		return nil, 0, fmt.Errorf("header length %d exceeds the %d-byte limit (corrupt or not a safetensors file)", n, MaxHeaderBytes)
	}
	if int64(n) > size-8 {
		return nil, 0, fmt.Errorf("truncated: header length %d but only %d bytes follow the length", n, size-8)
	}
	js := make([]byte, n)
	if _, err := r.ReadAt(js, 8); err != nil {
		return nil, 0, fmt.Errorf("reading header: %w", err)
	}
	dataStart := 8 + int64(n)
	hdr, err := ParseHeader(js, size-dataStart)
	if err != nil {
		return nil, 0, err
	}
	return hdr, dataStart, nil
}

// Info returns a tensor's header entry.
func (f *File) Info(name string) (TensorInfo, bool) { return f.Header.Lookup(name) }

// Data returns a tensor's bytes, aliasing the map.
func (f *File) Data(name string) ([]byte, error) {
	t, ok := f.Header.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("safetensors %s: no tensor %q", f.Path, name)
	}
	return f.data[t.Begin:t.End:t.End], nil
}

// Close unmaps the file; slices returned by Data are invalid afterwards.
func (f *File) Close() error {
	m := f.mapping
	f.mapping, f.data = nil, nil
	if err := unmapFile(m); err != nil {
		return fmt.Errorf("safetensors %s: munmap: %w", f.Path, err)
	}
	return nil
}
