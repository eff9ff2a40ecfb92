package serve

import (
	"container/list"
	"slices"
	"sync"

	"pistil/exec"
)

// prefixCache keeps snapshots of session state keyed by the exact token sequence they
// cover. The Gated DeltaNet recurrent state cannot be rolled back, so a snapshot is only
// reusable at its exact length: a request restores the longest cached sequence that is a
// prefix of its prompt and prefills the rest. Entries are evicted least recently used
// first to stay within a byte budget.
type prefixCache struct {
	mu     sync.Mutex
	budget int64
	used   int64
	lru    *list.List // of *cacheEntry, most recently used at the front
	hits   int64
	misses int64
}

type cacheEntry struct {
	tokens []int32
	snap   *exec.Snapshot
	bytes  int64
}

func newPrefixCache(budget int64) *prefixCache {
	return &prefixCache{budget: budget, lru: list.New()}
}

// entryBytes counts the snapshot and its token key.
func entryBytes(tokens []int32, snap *exec.Snapshot) int64 {
	return snap.Bytes() + int64(len(tokens))*4
}

// add stores a snapshot for tokens (len(tokens) must equal snap.Len). It keeps its own
// copy of tokens. A snapshot larger than the whole budget is not stored.
func (c *prefixCache) add(tokens []int32, snap *exec.Snapshot) {
	if c == nil || c.budget <= 0 || len(tokens) == 0 || len(tokens) != snap.Len {
		return
	}
	size := entryBytes(tokens, snap)
	if size > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Front(); e != nil; e = e.Next() {
		if slices.Equal(e.Value.(*cacheEntry).tokens, tokens) {
			c.lru.MoveToFront(e)
			return
		}
	}
	key := append([]int32(nil), tokens...)
	c.lru.PushFront(&cacheEntry{tokens: key, snap: snap, bytes: size})
	c.used += size
	for c.used > c.budget {
		last := c.lru.Back()
		ent := last.Value.(*cacheEntry)
		c.lru.Remove(last)
		c.used -= ent.bytes
	}
}

// lookup returns the longest cached entry whose tokens are a prefix of prompt and whose
// length usable accepts, or nil. A snapshot carries the logits after its last token, so
// an entry covering the whole prompt needs no prefill at all.
func (c *prefixCache) lookup(prompt []int32, usable func(n int) bool) *cacheEntry {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *list.Element
	bestLen := 0
	for e := c.lru.Front(); e != nil; e = e.Next() {
		ent := e.Value.(*cacheEntry)
		n := len(ent.tokens)
		if n > bestLen && n <= len(prompt) && usable(n) && slices.Equal(ent.tokens, prompt[:n]) {
			best, bestLen = e, n
		}
	}
	if best == nil {
		c.misses++
		return nil
	}
	c.hits++
	c.lru.MoveToFront(best)
	return best.Value.(*cacheEntry)
}

type cacheStats struct {
	Entries      int
	Bytes        int64
	Budget       int64
	Hits, Misses int64
}

func (c *prefixCache) stats() cacheStats {
	if c == nil {
		return cacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return cacheStats{Entries: c.lru.Len(), Bytes: c.used, Budget: c.budget, Hits: c.hits, Misses: c.misses}
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
