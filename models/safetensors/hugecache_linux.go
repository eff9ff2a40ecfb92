package safetensors

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"pistil/internal/meminfo"
)

// SettleHugePages maps in every page of every file that the page cache holds (at least
// CachedShareWanted of it; MADV_POPULATE_READ, reading the rest), and reads again each
// such file that the page cache holds mostly in small folios, so that its 2 MiB-aligned
// mapping (MapHugePages) maps 2 MiB pages.
//
// Why: the 2 MiB mapping only helps where the page cache holds the file in 2 MiB folios.
// Pages read through the mapping come in as such; pages that were cached before keep the
// folios they were cached in: 4 KiB ones from small writes (a download), from reads
// without readahead, or whenever memory was too fragmented for larger ones. On the full
// model, int8-all decode read 12.0-12.3 tok/s with the checkpoint cached in 4 KiB folios
// and 14.4-14.7 settled (cpu/README.md, session 13): every 4 KiB page is a TLB miss and a
// stop for the hardware prefetchers.
//
// A file is read again only if the page cache gives it 2 MiB folios at all: one 2 MiB
// page of it is dropped and read first as a probe (a filesystem without large folios, or
// transparent huge pages set to never, give none, and rereading would only cost the
// reading). Its pages are then dropped from the page cache (written back first if dirty;
// pages another process maps stay, in their folios) and read again through the mapping.
// The addresses do not change: tensors already returned stay valid, with the same bytes.
//
// Nothing is done when the files do not all fit in the memory available (mapping them in
// would only evict each other), or when a file was not mapped at a 2 MiB boundary.
//
// rereading, when not nil, is told how a file's reread goes (its bytes read again so far
// and its size; a slow disk takes minutes over a large checkpoint), from 0 to the end.
func (s *Set) SettleHugePages(rereading func(path string, done, total int64)) ([]PageCacheReport, error) {
	var total int64
	for _, f := range s.Files {
		total += int64(len(f.mapping))
	}
	avail, err := meminfo.Available()
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", s.Dir, err)
	}
	reports := make([]PageCacheReport, 0, len(s.Files))
	for _, f := range s.Files {
		r := PageCacheReport{Path: f.Path, Bytes: int64(len(f.mapping)), Hugeable: int64(len(f.mapping)) &^ (hugePage - 1)}
		switch {
		case total > avail:
			r.Skipped = fmt.Sprintf("the checkpoint's %.2f GB do not fit in the %.2f GB of memory available", float64(total)/1e9, float64(avail)/1e9)
		case !hugeMapped(f.mapping):
			r.Skipped = "not mapped at a 2 MiB boundary (map_huge_pages off, or the mapping failed)"
		case r.Hugeable == 0:
			r.Skipped = "smaller than one 2 MiB page"
		default:
			if err := f.settleHuge(&r, rereading); err != nil {
				return reports, fmt.Errorf("safetensors %s: %w", f.Path, err)
			}
		}
		reports = append(reports, r)
	}
	return reports, nil
}

// rereadChunk is how much of a file settleHuge reads again per MADV_POPULATE_READ, between
// reports of its progress.
const rereadChunk = 256 << 20

// settleHuge is SettleHugePages for one 2 MiB-mapped file.
func (f *File) settleHuge(r *PageCacheReport, rereading func(path string, done, total int64)) error {
	start := time.Now()
	defer func() { r.Took = time.Since(start) }()
	m := f.mapping
	var err error
	if r.Cached, err = cachedBytes(m); err != nil {
		return err
	}
	if float64(r.Cached) < CachedShareWanted*float64(len(m)) {
		r.LeftToRead = true
		r.Skipped = fmt.Sprintf("%.0f%% in the page cache: the rest comes in through the 2 MiB mapping as it is read", 100*float64(r.Cached)/float64(len(m)))
		return nil
	}
	if err := unix.Madvise(m, unix.MADV_POPULATE_READ); err != nil {
		r.Skipped = fmt.Sprintf("MADV_POPULATE_READ: %v (Linux 5.14 or later has it)", err)
		return nil
	}
	if r.Before, err = pmdMapped(m); err != nil {
		return err
	}
	r.After = r.Before
	if float64(r.Before) >= HugeShareWanted*float64(r.Hugeable) {
		return nil
	}
	fd, err := os.Open(f.Path)
	if err != nil {
		return err
	}
	defer fd.Close()
	// Dirty pages cannot be dropped until written back.
	if err := unix.Fdatasync(int(fd.Fd())); err != nil {
		return fmt.Errorf("fdatasync: %w", err)
	}
	// The probe: the last whole 2 MiB page, dropped and read again through the mapping.
	probe := r.Hugeable - hugePage
	if err := dropPages(m, fd, probe, hugePage); err != nil {
		return err
	}
	dropped, err := pmdMapped(m)
	if err != nil {
		return err
	}
	if err := unix.Madvise(m[probe:probe+hugePage], unix.MADV_POPULATE_READ); err != nil {
		return fmt.Errorf("MADV_POPULATE_READ: %w", err)
	}
	probed, err := pmdMapped(m)
	if err != nil {
		return err
	}
	if r.After = probed; probed-dropped < hugePage {
		r.Skipped = "the page cache gave a 2 MiB page of it read again no 2 MiB folio (a filesystem without large folios, or transparent huge pages off)"
		return nil
	}
	if err := dropPages(m, fd, 0, int64(len(m))); err != nil {
		return err
	}
	for off := 0; off < len(m); off += rereadChunk {
		if rereading != nil {
			rereading(f.Path, int64(off), int64(len(m)))
		}
		if err := unix.Madvise(m[off:min(off+rereadChunk, len(m))], unix.MADV_POPULATE_READ); err != nil {
			return fmt.Errorf("MADV_POPULATE_READ: %w", err)
		}
	}
	if rereading != nil {
		rereading(f.Path, int64(len(m)), int64(len(m)))
	}
	r.Reread = true
	r.After, err = pmdMapped(m)
	return err
}

// cachedBytes is how much of the file mapping m the page cache holds (mincore).
func cachedBytes(m []byte) (int64, error) {
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return 0, fmt.Errorf("mincore: %w", e)
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n * int64(page), nil
}

// dropPages unmaps [off, off+n) of the file's mapping m (the pages stay cached) and asks
// the page cache to drop them, so that the next touch reads them from the file again.
func dropPages(m []byte, fd *os.File, off, n int64) error {
	if err := unix.Madvise(m[off:off+n], unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("MADV_DONTNEED: %w", err)
	}
	if err := unix.Fadvise(int(fd.Fd()), off, n, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("POSIX_FADV_DONTNEED: %w", err)
	}
	return nil
}

// pmdMapped is the bytes of m mapped with 2 MiB page-table entries: the FilePmdMapped of
// the mappings /proc/self/smaps lists over m's addresses.
func pmdMapped(m []byte) (int64, error) {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	lo := uint64(uintptr(unsafe.Pointer(&m[0])))
	return smapsPmdMapped(data, lo, lo+uint64(len(m)))
}

// smapsPmdMapped sums FilePmdMapped over the mappings of an smaps listing that overlap
// [lo, hi).
func smapsPmdMapped(smaps []byte, lo, hi uint64) (int64, error) {
	var total int64
	var inside, seen bool
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Bytes()
		// A mapping's first line is "start-end perms offset dev inode [path]"; the
		// fields after it are "Name: value [kB]".
		if dash := bytes.IndexByte(line, '-'); dash > 0 && bytes.IndexByte(line[:dash], ':') < 0 {
			space := bytes.IndexByte(line, ' ')
			if space < dash {
				return 0, fmt.Errorf("/proc/self/smaps: line %q", line)
			}
			start, err1 := strconv.ParseUint(string(line[:dash]), 16, 64)
			end, err2 := strconv.ParseUint(string(line[dash+1:space]), 16, 64)
			if err1 != nil || err2 != nil {
				return 0, fmt.Errorf("/proc/self/smaps: line %q", line)
			}
			inside = start < hi && end > lo
			seen = seen || inside
			continue
		}
		if !inside {
			continue
		}
		if rest, ok := bytes.CutPrefix(line, []byte("FilePmdMapped:")); ok {
			f := bytes.Fields(rest)
			if len(f) != 2 {
				return 0, fmt.Errorf("/proc/self/smaps: line %q", line)
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/self/smaps: line %q", line)
			}
			total += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !seen {
		return 0, fmt.Errorf("/proc/self/smaps lists no mapping at %#x-%#x", lo, hi)
	}
	return total, nil
}
