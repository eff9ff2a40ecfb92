package tokenizer

import (
	"container/heap"
	"strings"
	"sync"
)

// merge is the result of merging an adjacent pair: its rank (lower merges first) and the
// id of the merged token.
type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpeModel applies merges by rank to the byte-level symbols of one pre-token.
type bpeModel struct {
	byteIDs [256]int32 // id of each byte's single-character token
	merges  map[uint64]merge

	mu    sync.Mutex
	cache map[string][]int32 // pre-token -> ids; most text repeats its words
}

// maxCacheEntries bounds the word cache; when full it is dropped and refilled, which keeps
// memory flat on adversarial input while keeping the hit rate of ordinary text.
const maxCacheEntries = 1 << 16

// maxCachedPiece is the longest pre-token cached; longer ones (long runs, minified code)
// rarely repeat.
const maxCachedPiece = 256

// smallPiece is the symbol count up to which a quadratic scan beats the heap.
const smallPiece = 48

// encode appends the ids of one pre-token (raw bytes) to dst.
func (m *bpeModel) encode(dst []int32, piece string) []int32 {
	m.mu.Lock()
	ids, ok := m.cache[piece]
	m.mu.Unlock()
	if ok {
		return append(dst, ids...)
	}
	if len(piece) == 1 {
		return append(dst, m.byteIDs[piece[0]])
	}
	var merged []int32
	if len(piece) <= smallPiece {
		merged = m.mergeSmall(piece)
	} else {
		merged = m.mergeLarge(piece)
	}
	if len(piece) <= maxCachedPiece {
		m.mu.Lock()
		if len(m.cache) >= maxCacheEntries {
			m.cache = make(map[string][]int32, maxCacheEntries)
		}
		// a copy, so the cache does not keep the caller's whole text alive
		m.cache[strings.Clone(piece)] = merged
		m.mu.Unlock()
	}
	return append(dst, merged...)
}

// noMerge marks an adjacent pair that has no merge.
const noMerge = int32(1<<31 - 1)

// mergeSmall repeatedly merges the lowest-ranked adjacent pair (leftmost on ties). The
// rank of each adjacent pair is cached and only the two pairs next to a merge are looked
// up again, so a merge costs one scan of small integers and two map lookups.
func (m *bpeModel) mergeSmall(piece string) []int32 {
	n := len(piece)
	var buf [3 * smallPiece]int32
	syms, ranks, merged := buf[:n], buf[smallPiece:smallPiece+n], buf[2*smallPiece:2*smallPiece+n]
	for i := 0; i < n; i++ {
		syms[i] = m.byteIDs[piece[i]]
	}
	lookup := func(i int) {
		if mg, ok := m.merges[pairKey(syms[i], syms[i+1])]; ok {
			ranks[i], merged[i] = mg.rank, mg.id
		} else {
			ranks[i] = noMerge
		}
	}
	for i := 0; i+1 < n; i++ {
		lookup(i)
	}
	for n > 1 {
		best := -1
		bestRank := noMerge
		for i := 0; i+1 < n; i++ {
			if ranks[i] < bestRank {
				best, bestRank = i, ranks[i]
			}
		}
		if best < 0 {
			break
		}
		syms[best] = merged[best]
		copy(syms[best+1:n-1], syms[best+2:n])
		copy(ranks[best+1:n-1], ranks[best+2:n])
		copy(merged[best+1:n-1], merged[best+2:n])
		n--
		if best+1 < n {
			lookup(best)
		}
		if best > 0 {
			lookup(best - 1)
		}
	}
	return append([]int32(nil), syms[:n]...)
}

// candidate is a possible merge of symbol pos with its right neighbour.
type candidate struct {
	rank  int32
	pos   int32 // index of the left symbol (leftmost first on equal rank)
	id    int32
	left  int32 // the two symbol ids when queued; stale if either changed
	right int32
}

type candidateHeap []candidate

func (h candidateHeap) Len() int { return len(h) }
func (h candidateHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h candidateHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candidateHeap) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candidateHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeLarge is the O(n log n) form for long pieces (long runs of one character, minified
// code): symbols in a linked list, candidate merges in a heap, stale entries skipped.
func (m *bpeModel) mergeLarge(piece string) []int32 {
	n := len(piece)
	ids := make([]int32, n)
	prev := make([]int32, n)
	next := make([]int32, n)
	alive := make([]bool, n)
	for i := 0; i < n; i++ {
		ids[i] = m.byteIDs[piece[i]]
		prev[i], next[i] = int32(i-1), int32(i+1)
		alive[i] = true
	}
	h := make(candidateHeap, 0, n)
	push := func(p int32) {
		q := next[p]
		if q >= int32(n) {
			return
		}
		if mg, ok := m.merges[pairKey(ids[p], ids[q])]; ok {
			h = append(h, candidate{rank: mg.rank, pos: p, id: mg.id, left: ids[p], right: ids[q]})
		}
	}
	for i := 0; i+1 < n; i++ {
		push(int32(i))
	}
	heap.Init(&h)
	for h.Len() > 0 {
		c := heap.Pop(&h).(candidate)
		p := c.pos
		q := next[p]
		if !alive[p] || q >= int32(n) || ids[p] != c.left || ids[q] != c.right {
			continue
		}
		ids[p] = c.id
		alive[q] = false
		next[p] = next[q]
		if next[q] < int32(n) {
			prev[next[q]] = p
		}
		before := len(h)
		if pp := prev[p]; pp >= 0 {
			push(pp)
		}
		push(p)
		for i := before; i < len(h); i++ {
			heap.Fix(&h, i) // sift the newly appended candidates up
		}
	}
	out := make([]int32, 0, n)
	for i := int32(0); i < int32(n); i = next[i] {
		out = append(out, ids[i])
	}
	return out
}
