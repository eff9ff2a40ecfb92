//go:build linux || darwin

package safetensors

import (
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only and shared: pages come from the page cache on
// demand, so the weights never count twice and a checkpoint larger than RAM still opens.
// On Linux the mapping starts on a 2 MiB boundary and asks for transparent huge pages
// (mapHuge), so that the page cache's large folios can be mapped whole.
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	if b, ok := mapHuge(f, size); ok {
		return b, nil
	}
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
}

func unmapFile(b []byte) error {
	if b == nil {
		return nil
	}
	if hugeMapped(b) {
		return unmapHuge(b)
	}
	return syscall.Munmap(b)
}
