package safetensors

import (
	"os"
	"sync"
	"syscall"
	"unsafe"
)

const hugePage = 2 << 20

// MapHugePages makes mapFile align its mappings to 2 MiB and advise MADV_HUGEPAGE (Linux):
// a page cache that holds the file in large folios (ext4, xfs on recent kernels) can then
// map them with 2 MiB page-table entries, so that decode's 1.67 GB a token of the full
// model takes 800 TLB misses instead of 400,000. Process-wide; set before opening.
var MapHugePages = true

var huge = struct {
	sync.Mutex
	maps map[*byte]bool
}{maps: map[*byte]bool{}}

// mapHuge maps f at a 2 MiB-aligned address with MADV_HUGEPAGE, or reports false (having
// mapped nothing) when it cannot or MapHugePages is off.
func mapHuge(f *os.File, size int64) ([]byte, bool) {
	if !MapHugePages {
		return nil, false
	}
	// Reserve size + 2 MiB of address space, map the file over its aligned part, and give
	// back the rest.
	res, _, e := syscall.Syscall6(syscall.SYS_MMAP, 0, uintptr(size)+hugePage, syscall.PROT_NONE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS, ^uintptr(0), 0)
	if e != 0 {
		return nil, false
	}
	start := (res + hugePage - 1) &^ (hugePage - 1)
	addr, _, e := syscall.Syscall6(syscall.SYS_MMAP, start, uintptr(size), syscall.PROT_READ,
		syscall.MAP_SHARED|syscall.MAP_FIXED, f.Fd(), 0)
	if e != 0 || addr != start {
		syscall.Syscall(syscall.SYS_MUNMAP, res, uintptr(size)+hugePage, 0)
		return nil, false
	}
	if head := start - res; head > 0 {
		syscall.Syscall(syscall.SYS_MUNMAP, res, head, 0)
	}
	end := start + uintptr(size)
	if tail := res + uintptr(size) + hugePage - end; tail > 0 {
		syscall.Syscall(syscall.SYS_MUNMAP, end, tail, 0)
	}
	syscall.Syscall(syscall.SYS_MADVISE, start, uintptr(size), 14) // MADV_HUGEPAGE; an error leaves small pages
	// The mapping is outside Go's heap; reading the address as a pointer (not converting
	// the uintptr) keeps vet's unsafe.Pointer rules.
	b := unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&start))), size)
	huge.Lock()
	huge.maps[&b[0]] = true
	huge.Unlock()
	return b, true
}

func hugeMapped(b []byte) bool {
	huge.Lock()
	defer huge.Unlock()
	return len(b) > 0 && huge.maps[&b[0]]
}

func unmapHuge(b []byte) error {
	huge.Lock()
	delete(huge.maps, &b[0])
	huge.Unlock()
	if _, _, e := syscall.Syscall(syscall.SYS_MUNMAP, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0); e != 0 {
		return e
	}
	return nil
}

const hugeSupported = true
