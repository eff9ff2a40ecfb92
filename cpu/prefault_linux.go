package cpu

import (
	"syscall"
	"unsafe"
)

// madvPopulateRead is MADV_POPULATE_READ (Linux 5.14): fault a range's pages in, reading
// them as a read fault would, so that later reads find them mapped.
const madvPopulateRead = 22

// prefault maps every page of b into the process ahead of use: weights memory-mapped
// from the checkpoint are otherwise mapped page by page on first touch, which decode's
// routed experts (a different 8 of 256 per layer each token) keep doing for hundreds of
// tokens (on the full model 0.9-2.3 s of system time in a run of 64 tokens, about half of
// it gone with this; cpu/README.md, session 10). An error (an older kernel, memory that is
// not a file mapping) is ignored: the pages then fault in as before.
func prefault(b []byte) {
	if len(b) == 0 {
		return
	}
	const page = 4096
	start := uintptr(unsafe.Pointer(&b[0]))
	end := start + uintptr(len(b))
	start &^= page - 1
	syscall.Syscall(syscall.SYS_MADVISE, start, end-start, madvPopulateRead)
}
