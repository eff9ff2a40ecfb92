//go:build !linux && !darwin

package safetensors

import (
	"io"
	"os"
)

// mapFile reads the whole file where pistil has no mmap path; correct, but the weights
// then live in process memory.
func mapFile(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, size), b); err != nil {
		return nil, err
	}
	return b, nil
}

func unmapFile([]byte) error { return nil }
