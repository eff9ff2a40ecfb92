package serve

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"

	"pistil/exec"
)

// prefixCache keeps snapshots of session state keyed by the exact token sequence they
// cover. The Gated DeltaNet recurrent state cannot be rolled back, so a snapshot is only
// reusable at its exact length: a request restores the longest cached sequence that is a
// prefix of its prompt and prefills the rest.
//
// A snapshot holds its own copy of the conv and recurrent state only; the KV rows before
// its length are blocks (exec.KVBlock) shared by every snapshot of the conversation, and
// by other conversations with the same prefix cut the same way (found by blockKey).
// The budget counts each entry's own bytes and each block once. Eviction takes
// intermediate snapshots (the snapshotEvery grid) before message-boundary ones, least
// recently used first, and never takes a snapshot of the request being cached unless the
// new one supersedes it (a longer intermediate snapshot of the same prompt); a snapshot
// that finds no room on those terms is not cached.
//
// On a GPU backend with memory apart from the host's, snapshots and blocks are device
// memory (a restore is a device-side copy). Of the budget, at most deviceBudget stays
// there: past it, entries spill to host memory in eviction order (their own state, and
// the blocks no entry in device memory holds), and restoring one uploads what spilled.
// A spilled entry stays in host memory until it is evicted. Where state is host memory
// (the CPU, Apple silicon's unified memory) nothing counts as device memory.
type prefixCache struct {
	mu           sync.Mutex
	budget       int64 // device and host memory together
	deviceBudget int64
	used         int64
	lru          *list.List // of *cacheEntry, most recently used at the front
	blocks       map[*exec.KVBlock]*sharedBlock
	byKey        map[string]*exec.KVBlock

	hits, misses, evictions, spills, restoredTokens int64
}

type cacheEntry struct {
	tokens []int32
	snap   *exec.Snapshot
	// boundary: taken at a message header or at the end of a prompt, where a later
	// request most likely diverges; kept ahead of the grid's intermediate snapshots.
	boundary bool
	request  uint64
	own      int64 // the snapshot's own bytes and the token key
}

// sharedBlock counts the entries that hold a block.
type sharedBlock struct {
	refs int
	key  string
}

// newPrefixCache is a cache of budget bytes, all of which may stay in device memory.
func newPrefixCache(budget int64) *prefixCache { return newSpillingPrefixCache(budget, 0) }

// newSpillingPrefixCache is a cache of device bytes in device memory and host more in
// host memory, where entries spill to. Where state is host memory (its blocks do not
// spill) device is 0 and host is the budget.
func newSpillingPrefixCache(device, host int64) *prefixCache {
	return &prefixCache{budget: device + max(host, 0), deviceBudget: device, lru: list.New(),
		blocks: map[*exec.KVBlock]*sharedBlock{}, byKey: map[string]*exec.KVBlock{}}
}

// entryBytes is what an entry costs besides the KV blocks it shares.
func entryBytes(tokens []int32, snap *exec.Snapshot) int64 {
	return snap.Bytes() + int64(len(tokens))*4
}

// add stores a snapshot for tokens (len(tokens) must equal snap.Len); the cache owns the
// snapshot from then on and releases it when it is evicted or not kept. keyOf names a
// block for sharing across conversations ("" or nil: not shared).
func (c *prefixCache) add(tokens []int32, snap *exec.Snapshot, boundary bool, request uint64, keyOf func(b *exec.KVBlock) string) {
	if c == nil || c.budget <= 0 || len(tokens) == 0 || len(tokens) != snap.Len {
		snap.Release()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Front(); e != nil; e = e.Next() {
		if ent := e.Value.(*cacheEntry); slices.Equal(ent.tokens, tokens) {
			ent.boundary = ent.boundary || boundary
			c.lru.MoveToFront(e)
			snap.Release()
			return
		}
	}
	ent := &cacheEntry{tokens: slices.Clone(tokens), snap: snap, boundary: boundary, request: request, own: entryBytes(tokens, snap)}
	elem := c.lru.PushFront(ent)
	c.used += ent.own
	for _, b := range snap.KV() {
		if sb := c.blocks[b]; sb != nil {
			sb.refs++
			continue
		}
		sb := &sharedBlock{refs: 1}
		if keyOf != nil {
			sb.key = keyOf(b)
		}
		c.blocks[b] = sb
		c.used += b.Bytes()
		if _, taken := c.byKey[sb.key]; sb.key != "" && !taken {
			c.byKey[sb.key] = b
		}
	}
	for c.used > c.budget {
		victim := c.victim(ent)
		if victim == nil {
			c.remove(elem) // no room on the eviction rules' terms: not cached
			return
		}
		c.remove(victim)
		c.evictions++
	}
	for c.deviceBytes() > c.deviceBudget {
		if !c.spillOne() {
			return // nothing in device memory left that could spill
		}
	}
}

// deviceBytes is what the cache holds in device memory.
func (c *prefixCache) deviceBytes() int64 {
	var n int64
	for e := c.lru.Front(); e != nil; e = e.Next() {
		if snap := e.Value.(*cacheEntry).snap; snap.OnDevice() {
			n += snap.FixedBytes()
		}
	}
	for b := range c.blocks {
		if b.OnDevice() {
			n += b.Bytes()
		}
	}
	return n
}

// spillOne moves the next entry in eviction order that holds device memory to host
// memory: its own state, and its blocks that no entry still in device memory holds. An
// entry that fails to spill (a device error) is evicted instead. False: nothing could
// spill.
func (c *prefixCache) spillOne() bool {
	for _, boundary := range []bool{false, true} {
		for e := c.lru.Back(); e != nil; e = e.Prev() {
			ent := e.Value.(*cacheEntry)
			if ent.boundary != boundary {
				continue
			}
			var blocks []*exec.KVBlock
			for _, b := range ent.snap.KV() {
				if b.OnDevice() && !c.heldOnDevice(b, ent) {
					blocks = append(blocks, b)
				}
			}
			if !ent.snap.OnDevice() && len(blocks) == 0 {
				continue
			}
			err := ent.snap.Spill()
			for _, b := range blocks {
				if err == nil {
					err = b.Spill()
				}
			}
			if err != nil {
				c.remove(e)
				c.evictions++
				return true
			}
			c.spills++
			return true
		}
	}
	return false
}

// heldOnDevice says whether an entry other than but, whose own state is in device
// memory, holds block b.
func (c *prefixCache) heldOnDevice(b *exec.KVBlock, but *cacheEntry) bool {
	for e := c.lru.Front(); e != nil; e = e.Next() {
		ent := e.Value.(*cacheEntry)
		if ent != but && ent.snap.OnDevice() && slices.Contains(ent.snap.KV(), b) {
			return true
		}
	}
	return false
}

// victim picks the entry to evict for ent: intermediate entries first, then (only for a
// boundary snapshot) boundary ones, least recently used first; ent's own request's
// entries only where ent supersedes them.
func (c *prefixCache) victim(ent *cacheEntry) *list.Element {
	for _, boundary := range []bool{false, true} {
		if boundary && !ent.boundary {
			return nil
		}
		for e := c.lru.Back(); e != nil; e = e.Prev() {
			v := e.Value.(*cacheEntry)
			if v == ent || v.boundary != boundary {
				continue
			}
			if v.request == ent.request && (v.boundary || len(v.tokens) >= len(ent.tokens)) {
				continue
			}
			return e
		}
	}
	return nil
}

// remove drops an entry and the blocks no other entry holds.
func (c *prefixCache) remove(e *list.Element) {
	ent := c.lru.Remove(e).(*cacheEntry)
	c.used -= ent.own
	for _, b := range ent.snap.KV() {
		sb := c.blocks[b]
		if sb.refs--; sb.refs == 0 {
			c.used -= b.Bytes()
			delete(c.blocks, b)
			if c.byKey[sb.key] == b {
				delete(c.byKey, sb.key)
			}
		}
	}
	ent.snap.Release()
}

// clear releases every entry (the server's shutdown: on a GPU the blocks are device
// memory).
func (c *prefixCache) clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Front(); e != nil; e = c.lru.Front() {
		c.remove(e)
	}
}

// shared returns the cached block with key, or nil.
func (c *prefixCache) shared(key string) *exec.KVBlock {
	if c == nil || key == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byKey[key]
}

// lookup returns the longest cached entry whose tokens are a prefix of prompt and whose
// length usable accepts, or nil. A snapshot carries the logits after its last token, so
// an entry covering the whole prompt needs no prefill at all. The snapshot stays valid
// until the next add (only the engine's goroutine adds).
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
	c.restoredTokens += int64(bestLen)
	c.lru.MoveToFront(best)
	return best.Value.(*cacheEntry)
}

type cacheStats struct {
	Entries, Blocks int
	Bytes, KVBytes  int64
	Budget          int64
	// DeviceBytes of Bytes are in device memory, at most DeviceBudget; the rest spilled
	// to host memory (or is host memory: the CPU's).
	DeviceBytes, DeviceBudget int64
	Hits, Misses              int64
	Evictions, Spills         int64
	RestoredTokens            int64
}

func (c *prefixCache) stats() cacheStats {
	if c == nil {
		return cacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var kv int64
	for b := range c.blocks {
		kv += b.Bytes()
	}
	return cacheStats{Entries: c.lru.Len(), Blocks: len(c.blocks), Bytes: c.used, KVBytes: kv, Budget: c.budget,
		DeviceBytes: c.deviceBytes(), DeviceBudget: c.deviceBudget,
		Hits: c.hits, Misses: c.misses, Evictions: c.evictions, Spills: c.spills, RestoredTokens: c.restoredTokens}
}

// blockKeys names KV blocks of one prompt for sharing across conversations. A block's
// rows are exact for another prompt only if they were computed from the same tokens cut
// into the same prefill pieces: the key is the tokens and the cut points up to the first
// cut at or after the block's end (the end of the piece that computed its last row).
type blockKeys struct {
	prompt []int32
	cuts   []int // ascending; the prompt's end is the last
	memo   map[[2]int]string
}

func newBlockKeys(prompt []int32, splits []int, every int) *blockKeys {
	cuts := slices.Clone(splits)
	if every > 0 {
		for p := every; p < len(prompt); p += every {
			cuts = append(cuts, p)
		}
	}
	cuts = append(cuts, len(prompt))
	slices.Sort(cuts)
	return &blockKeys{prompt: prompt, cuts: slices.Compact(cuts), memo: map[[2]int]string{}}
}

func (k *blockKeys) key(start, end int) string {
	if key, ok := k.memo[[2]int{start, end}]; ok {
		return key
	}
	i, _ := slices.BinarySearch(k.cuts, end)
	if i == len(k.cuts) {
		return "" // past the prompt: decoded rows are never shared
	}
	next := k.cuts[i]
	h := sha256.New()
	var buf [4]byte
	word := func(v int) {
		binary.LittleEndian.PutUint32(buf[:], uint32(v))
		h.Write(buf[:])
	}
	word(start)
	word(end)
	for _, c := range k.cuts[:i+1] {
		word(c)
	}
	word(-1)
	for _, t := range k.prompt[:next] {
		word(int(t))
	}
	key := string(h.Sum(nil))
	k.memo[[2]int{start, end}] = key
	return key
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
