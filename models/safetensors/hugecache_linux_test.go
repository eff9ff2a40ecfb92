package safetensors

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSmapsPmdMapped(t *testing.T) {
	const smaps = `00400000-00600000 r-xp 00000000 fd:01 123 /usr/bin/pistil
Size:               2048 kB
FilePmdMapped:      2048 kB
VmFlags: rd ex mr mw me
7f0000000000-7f0000600000 r--s 00000000 fd:01 456 /m/model-00001-of-00002.safetensors
Size:               6144 kB
Rss:                6144 kB
FilePmdMapped:      4096 kB
VmFlags: rd mr me ms hg
7f0000600000-7f0000800000 r--s 00600000 fd:01 456 /m/model-00001-of-00002.safetensors
FilePmdMapped:      2048 kB
7f0000800000-7f0000a00000 rw-p 00000000 00:00 0
FilePmdMapped:         0 kB
`
	for _, c := range []struct {
		lo, hi uint64
		want   int64
	}{
		{0x7f0000000000, 0x7f0000600000, 4096 << 10},
		{0x7f0000000000, 0x7f0000800000, 6144 << 10}, // a file mapping split in two
		{0x7f0000700000, 0x7f0000900000, 2048 << 10},
		{0x00400000, 0x00401000, 2048 << 10},
	} {
		got, err := smapsPmdMapped([]byte(smaps), c.lo, c.hi)
		if err != nil || got != c.want {
			t.Errorf("[%#x, %#x): %d, %v; want %d", c.lo, c.hi, got, err, c.want)
		}
	}
	if _, err := smapsPmdMapped([]byte(smaps), 0x1000, 0x2000); err == nil || !strings.Contains(err.Error(), "no mapping") {
		t.Errorf("an address nothing maps: %v, want an error naming it", err)
	}
	if _, err := smapsPmdMapped([]byte("7f0000000000-7f0000200000 r--s 0 fd:01 1 /f\nFilePmdMapped: many kB\n"), 0x7f0000000000, 0x7f0000000001); err == nil {
		t.Error("a FilePmdMapped that is not a number parsed")
	}
}

// A checkpoint file cached in 4 KiB folios, as a download leaves it, is read again into
// 2 MiB pages with the same bytes at the same addresses; a second call finds nothing to do.
func TestSettleHugePagesRereadsSmallFolios(t *testing.T) {
	defer func(saved bool) { MapHugePages = saved }(MapHugePages)
	MapHugePages = true
	dir := t.TempDir()
	if why := cachesHugePages(t, dir); why != "" {
		t.Skipf("this machine cannot cache %s in 2 MiB pages: %s", dir, why)
	}
	const size = 6<<20 + 12345
	data := make([]byte, size)
	rand.New(rand.NewSource(7)).Read(data)
	writeOneTensor(t, filepath.Join(dir, SingleFile), data)
	cacheInSmallFolios(t, filepath.Join(dir, SingleFile))

	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tensor, err := s.Data("w")
	if err != nil {
		t.Fatal(err)
	}
	var told [][2]int64
	reports, err := s.SettleHugePages(func(path string, done, total int64) {
		if path != filepath.Join(dir, SingleFile) {
			t.Errorf("rereading %s, want the checkpoint file", path)
		}
		told = append(told, [2]int64{done, total})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 {
		t.Fatalf("%d reports for one file", len(reports))
	}
	r := reports[0]
	t.Logf("%+v", r)
	if r.Skipped != "" {
		t.Fatalf("skipped on a machine that caches files in 2 MiB pages: %s", r.Skipped)
	}
	if r.Hugeable != size&^(hugePage-1) || r.Bytes <= size {
		t.Errorf("sizes %d, hugeable %d; want the file's %d+header and %d", r.Bytes, r.Hugeable, size, size&^(hugePage-1))
	}
	if float64(r.Before) >= HugeShareWanted*float64(r.Hugeable) {
		t.Skipf("the page cache held the file in 2 MiB pages before the test could see it small (%d of %d bytes)", r.Before, r.Hugeable)
	}
	if !r.Reread || float64(r.After) < HugeShareWanted*float64(r.Hugeable) {
		t.Errorf("reread %v; %d of %d bytes in 2 MiB pages after, want at least %.0f%%", r.Reread, r.After, r.Hugeable, 100*HugeShareWanted)
	}
	if !bytes.Equal(tensor, data) {
		t.Error("the tensor's bytes changed")
	}
	if len(told) < 2 || told[0][0] != 0 || told[len(told)-1][0] != r.Bytes || told[0][1] != r.Bytes {
		t.Errorf("the reread's progress %v; want 0 first and %d last, of %d", told, r.Bytes, r.Bytes)
	}

	again, err := s.SettleHugePages(func(string, int64, int64) { t.Error("a settled file read again") })
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Reread || again[0].Before != r.After {
		t.Errorf("second call: %+v; want nothing reread, %d bytes in 2 MiB pages", again[0], r.After)
	}
}

// A file the page cache does not hold is left to come in as it is read: not mapped in,
// not read, not reread.
func TestSettleHugePagesLeavesUncachedFiles(t *testing.T) {
	defer func(saved bool) { MapHugePages = saved }(MapHugePages)
	MapHugePages = true
	dir := t.TempDir()
	const size = 6 << 20
	path := filepath.Join(dir, SingleFile)
	writeOneTensor(t, path, make([]byte, size))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	dropFromPageCache(t, f)
	f.Close()
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := s.Files[0].mapping
	if !hugeMapped(m) {
		t.Skip("no 2 MiB-aligned mapping on this machine")
	}
	before, err := cachedBytes(m)
	if err != nil {
		t.Fatal(err)
	}
	if float64(before) >= CachedShareWanted*float64(len(m)) {
		t.Skipf("the page cache kept %d of %d bytes after POSIX_FADV_DONTNEED", before, len(m))
	}
	reports, err := s.SettleHugePages(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := reports[0]
	if r.Reread || !r.LeftToRead || !strings.Contains(r.Skipped, "in the page cache") {
		t.Errorf("%+v; want it skipped as not in the page cache", r)
	}
	if after, err := cachedBytes(m); err != nil || after > before {
		t.Errorf("%d bytes cached after, %d before (%v): the file was read", after, before, err)
	}
}

// cachesHugePages says why a file in dir, read afresh through a 2 MiB mapping, does not
// come into the page cache as 2 MiB pages ("" when it does): the machine's side of what
// SettleHugePages relies on, found without it.
func cachesHugePages(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "probe")
	if err := os.WriteFile(path, make([]byte, 2*hugePage), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dropFromPageCache(t, f)
	m, err := mapFile(f, 2*hugePage)
	if err != nil {
		t.Fatal(err)
	}
	defer unmapFile(m)
	if !hugeMapped(m) {
		return "no 2 MiB-aligned mapping"
	}
	if err := unix.Madvise(m, unix.MADV_POPULATE_READ); err != nil {
		return "MADV_POPULATE_READ: " + err.Error()
	}
	pmd, err := pmdMapped(m)
	if err != nil {
		t.Fatal(err)
	}
	if pmd == 0 {
		return "a file read afresh came in as small pages (a filesystem without large folios, or transparent huge pages off)"
	}
	return ""
}

// writeOneTensor writes a checkpoint file of one u8 tensor "w" holding data.
func writeOneTensor(t *testing.T, path string, data []byte) {
	t.Helper()
	w, err := Create(path, []Spec{{Name: "w", DType: U8, Shape: []int{len(data)}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write("w", data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// dropFromPageCache writes f's dirty pages back and drops its pages from the page cache.
func dropFromPageCache(t *testing.T, f *os.File) {
	t.Helper()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// cacheInSmallFolios leaves path in the page cache as 4 KiB writes leave it: dropped,
// then written again a page at a time.
func cacheInSmallFolios(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dropFromPageCache(t, f)
	for off := 0; off < len(data); off += 4096 {
		if _, err := f.WriteAt(data[off:min(off+4096, len(data))], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}
