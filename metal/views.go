package metal

import (
	"fmt"
	"sort"
)

// Weights reach the GPU without a copy: each mapped checkpoint file (a region of the
// process's memory) is wrapped in newBufferWithBytesNoCopy buffers ("views"), and a
// tensor is addressed as its view's gpuAddress plus its offset in the view. Metal needs
// a no-copy buffer to start on a page boundary and to be a whole number of pages long
// (16 KiB pages on Apple silicon), and no buffer may exceed the device's maxBufferLength.
// A region larger than that is covered by views that overlap by more than the largest
// tensor, so every tensor lies whole inside one view (a kernel reads a tensor through one
// base address).

// Span is a tensor's bytes inside a region: [Off, Off+Len).
type Span struct{ Off, Len int64 }

// View is one no-copy buffer over a region: bytes [Off, Off+Len), Off a multiple of the
// page size, Len a whole number of pages, at most the device's maxBufferLength.
type View struct{ Off, Len int64 }

// PlanViews covers a region of size bytes (its base page-aligned, as mmap returns it) with
// views of at most maxLen bytes such that every span lies whole inside one of them. One
// view when the page-rounded region fits in maxLen; otherwise views start every step
// bytes, step = maxLen less the largest span rounded up to a page and one page more, so a
// span that starts in one view's first step bytes ends before that view does.
func PlanViews(size int64, spans []Span, maxLen, page int64) ([]View, error) {
	if page <= 0 || page&(page-1) != 0 {
		return nil, fmt.Errorf("page size %d is not a power of two", page)
	}
	if size <= 0 {
		return nil, fmt.Errorf("region of %d bytes", size)
	}
	maxLen = maxLen / page * page
	rounded := roundUp(size, page)
	var largest int64
	for _, s := range spans {
		if s.Off < 0 || s.Len < 0 || s.Off+s.Len > size {
			return nil, fmt.Errorf("tensor bytes [%d, %d) lie outside the region of %d bytes", s.Off, s.Off+s.Len, size)
		}
		largest = max(largest, s.Len)
	}
	if rounded <= maxLen {
		return []View{{0, rounded}}, nil
	}
	overlap := roundUp(largest, page) + page
	step := (maxLen - overlap) / page * page
	if step <= 0 {
		return nil, fmt.Errorf("a tensor of %d bytes does not fit in one buffer of the device's maxBufferLength %d (with page %d)", largest, maxLen, page)
	}
	var views []View
	for off := int64(0); ; off += step {
		end := min(off+maxLen, rounded)
		views = append(views, View{off, end - off})
		if end == rounded {
			return views, nil
		}
	}
}

// Locate returns the index of the first view that holds span s whole, and the span's
// offset inside it.
func Locate(views []View, s Span) (int, int64, error) {
	// Views are sorted by Off; the candidates start at or before s.Off.
	i := sort.Search(len(views), func(i int) bool { return views[i].Off > s.Off })
	for j := max(i-1, 0); j >= 0 && j < len(views) && views[j].Off <= s.Off; j-- {
		if s.Off+s.Len <= views[j].Off+views[j].Len {
			// The earliest view holding it keeps neighbouring tensors in one buffer.
			for j > 0 && views[j-1].Off <= s.Off && s.Off+s.Len <= views[j-1].Off+views[j-1].Len {
				j--
			}
			return j, s.Off - views[j].Off, nil
		}
	}
	return 0, 0, fmt.Errorf("tensor bytes [%d, %d) lie in no view", s.Off, s.Off+s.Len)
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }

// Region is a run of memory that no-copy views may cover: from the page holding its
// first tensor byte to the end of the page holding its last.
type Region struct {
	Base, End uintptr // page-aligned
	// Spans are the tensors inside, relative to Base, in the order given to PlanRegions
	// by Index.
	Spans []Span
	Index []int
}

// PlanRegions groups tensors given by address ([addr, addr+len) each) into regions: two
// tensors share a region when no whole page lies between them. Every page of a region
// then holds a byte of some tensor, so it is mapped (an mmap maps whole pages), and a
// view may cover it even though pistil never learns where a checkpoint file's mapping
// begins and ends.
func PlanRegions(addrs []uintptr, lens []int64, page int64) []Region {
	order := make([]int, len(addrs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return addrs[order[a]] < addrs[order[b]] })
	p := uintptr(page)
	var out []Region
	for _, i := range order {
		start := addrs[i] / p * p
		end := (addrs[i] + uintptr(max(lens[i], 1)) + p - 1) / p * p
		if n := len(out); n > 0 && start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, end)
		} else {
			out = append(out, Region{Base: start, End: end})
		}
		r := &out[len(out)-1]
		r.Spans = append(r.Spans, Span{int64(addrs[i] - r.Base), lens[i]})
		r.Index = append(r.Index, i)
	}
	return out
}
