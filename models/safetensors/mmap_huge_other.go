//go:build !linux

package safetensors

import "os"

// MapHugePages has no effect off Linux.
var MapHugePages = false

func mapHuge(f *os.File, size int64) ([]byte, bool) { return nil, false }
func hugeMapped(b []byte) bool                      { return false }
func unmapHuge(b []byte) error                      { return nil }

const hugeSupported = false
