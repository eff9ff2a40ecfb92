package metal

import (
	"math/rand/v2"
	"testing"
)

const page = 16 << 10

// A region under the limit is one view of whole pages.
func TestPlanViewsOneViewWhenItFits(t *testing.T) {
	views, err := PlanViews(100_000, []Span{{0, 50_000}, {50_000, 50_000}}, 1<<20, page)
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 1 || views[0] != (View{0, 7 * page}) {
		t.Errorf("views %v, want one of 7 pages", views)
	}
}

// Against a fake small maxBufferLength, a large file is split into overlapping views;
// every view is page aligned, whole pages and within the limit, the views cover the
// region, and every tensor lies whole in the view Locate gives.
func TestPlanViewsSplitsLargeRegions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 200; trial++ {
		var spans []Span
		off := int64(r.IntN(4096))
		largest := int64(0)
		for i := 0; i < 1+r.IntN(60); i++ {
			n := int64(1 + r.IntN(3*page))
			if r.IntN(10) == 0 {
				n = int64(page*4 + r.IntN(page)) // a few big tensors
			}
			spans = append(spans, Span{off, n})
			largest = max(largest, n)
			off += n + int64(r.IntN(64))
		}
		size := off
		maxLen := int64(page * (int(roundUp(largest, page)/page) + 2 + r.IntN(6)))
		views, err := PlanViews(size, spans, maxLen, page)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if roundUp(size, page) > maxLen && len(views) < 2 {
			t.Fatalf("trial %d: region of %d bytes in %d view(s) of at most %d", trial, size, len(views), maxLen)
		}
		var covered int64
		for i, v := range views {
			if v.Off%page != 0 || v.Len%page != 0 || v.Len <= 0 || v.Len > maxLen {
				t.Fatalf("trial %d: view %d %+v is not whole pages within %d", trial, i, v, maxLen)
			}
			if v.Off > covered {
				t.Fatalf("trial %d: bytes [%d, %d) are in no view", trial, covered, v.Off)
			}
			covered = max(covered, v.Off+v.Len)
		}
		if covered != roundUp(size, page) {
			t.Fatalf("trial %d: views end at %d, region at %d", trial, covered, roundUp(size, page))
		}
		for _, s := range spans {
			i, in, err := Locate(views, s)
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			if v := views[i]; in < 0 || in+s.Len > v.Len || v.Off+in != s.Off {
				t.Fatalf("trial %d: span %+v placed at %d in view %+v", trial, s, in, v)
			}
		}
	}
}

func TestPlanViewsRefusesWhatCannotFit(t *testing.T) {
	if _, err := PlanViews(10*page, []Span{{0, 3 * page}}, 3*page, page); err == nil {
		t.Error("a tensor as large as the buffer limit was accepted")
	}
	if _, err := PlanViews(10*page, []Span{{9 * page, 2 * page}}, 100*page, page); err == nil {
		t.Error("a span past the region's end was accepted")
	}
	if _, err := PlanViews(10*page, nil, 100*page, 3000); err == nil {
		t.Error("a page size that is not a power of two was accepted")
	}
	if _, _, err := Locate([]View{{0, page}}, Span{page - 10, 20}); err == nil {
		t.Error("Locate placed a span that crosses the view's end")
	}
}

// Tensors a page or less apart share a region; a whole page between them splits it; a
// region spans whole pages; every tensor is in exactly one region at its own offset.
func TestPlanRegions(t *testing.T) {
	base := uintptr(1 << 30)
	addrs := []uintptr{base + 4*page + 100, base + 10, base + 3*page, base + 40*page + 7}
	lens := []int64{page, 2*page + 50, page - 100, 10}
	regions := PlanRegions(addrs, lens, page)
	if len(regions) != 2 {
		t.Fatalf("%d regions, want 2: %+v", len(regions), regions)
	}
	if r := regions[0]; r.Base != base || r.End != base+6*page || len(r.Spans) != 3 {
		t.Errorf("first region %#x..%#x with %d tensors, want %#x..%#x with 3", r.Base, r.End, len(r.Spans), base, base+6*page)
	}
	if r := regions[1]; r.Base != base+40*page || r.End != base+41*page {
		t.Errorf("second region %#x..%#x", r.Base, r.End)
	}
	seen := map[int]bool{}
	for _, r := range regions {
		for k, i := range r.Index {
			if seen[i] {
				t.Errorf("tensor %d in two regions", i)
			}
			seen[i] = true
			if s := r.Spans[k]; r.Base+uintptr(s.Off) != addrs[i] || s.Len != lens[i] || r.Base+uintptr(s.Off+s.Len) > r.End {
				t.Errorf("tensor %d placed at %+v in region %#x..%#x", i, s, r.Base, r.End)
			}
		}
	}
	if len(seen) != len(addrs) {
		t.Errorf("%d of %d tensors placed", len(seen), len(addrs))
	}
}
