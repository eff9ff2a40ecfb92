package serve

import (
	"slices"
	"testing"

	"pistil/exec"
)

// snapshotsOf prefills prompt on a fresh session of the shared tiny model with the
// options' cuts and returns its snapshots.
func snapshotsOf(t *testing.T, sess *exec.Session, prompt []int32, opts exec.PrefillOptions) []*exec.Snapshot {
	t.Helper()
	var snaps []*exec.Snapshot
	opts.OnSnapshot = func(s *exec.Snapshot) { snaps = append(snaps, s) }
	sess.Reset()
	if err := sess.Prefill(t.Context(), prompt, opts); err != nil {
		t.Fatal(err)
	}
	return snaps
}

func testPrompt(n, salt int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1 + (i*31+salt)%400)
	}
	return p
}

// Snapshots of one prefill share the KV blocks before their lengths, and the cache
// counts each block once.
func TestPrefixCacheCountsSharedBlocksOnce(t *testing.T) {
	sess, err := tiny.model.NewSession(1024)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	prompt := testPrompt(600, 0)
	snaps := snapshotsOf(t, sess, prompt, exec.PrefillOptions{SnapshotAt: []int{300}})
	if got := lensOf(snaps); !slices.Equal(got, []int{300, 600}) {
		t.Fatalf("snapshots at %v", got)
	}
	a, b := snaps[0].KV(), snaps[1].KV()
	if len(a) != 2 || len(b) != 3 || a[0] != b[0] || a[1] == b[1] {
		t.Fatalf("blocks %v / %v: want [0,256) shared, [256,300) and [256,512) not", spans(a), spans(b))
	}
	c := newPrefixCache(1 << 30)
	c.add(prompt[:300], snaps[0], true, 1, nil)
	c.add(prompt, snaps[1], true, 1, nil)
	st := c.stats()
	want := entryBytes(prompt[:300], snaps[0]) + entryBytes(prompt, snaps[1])
	for _, blk := range []*exec.KVBlock{a[0], a[1], b[1], b[2]} {
		want += blk.Bytes()
	}
	if st.Blocks != 4 || st.Bytes != want {
		t.Fatalf("cache %+v: want 4 blocks and %d bytes", st, want)
	}
}

// Eviction: intermediate snapshots go before message-boundary ones; a snapshot never
// evicts one of its own request that it does not supersede (it is not cached instead);
// a longer intermediate snapshot of the same request supersedes a shorter one; an
// intermediate snapshot never evicts a boundary one.
func TestPrefixCacheEvictionRules(t *testing.T) {
	sess, err := tiny.model.NewSession(1024)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	prompt := testPrompt(200, 3)
	snaps := func() []*exec.Snapshot {
		return snapshotsOf(t, sess, prompt, exec.PrefillOptions{SnapshotEvery: 50})
	}
	cost := func(s *exec.Snapshot) int64 { return entryBytes(prompt[:s.Len], s) + s.KV()[0].Bytes() }
	has := func(c *prefixCache, n int) bool {
		for e := c.lru.Front(); e != nil; e = e.Next() {
			if len(e.Value.(*cacheEntry).tokens) == n {
				return true
			}
		}
		return false
	}

	t.Run("boundary ahead of intermediate", func(t *testing.T) {
		s := snaps() // 50, 100, 150, 200
		c := newPrefixCache(cost(s[1]) + cost(s[3]))
		c.add(prompt[:100], s[1], true, 1, nil)  // boundary, request 1
		c.add(prompt[:150], s[2], false, 2, nil) // intermediate, request 2
		c.add(prompt[:200], s[3], true, 3, nil)  // boundary, request 3: room for two
		if !has(c, 100) || has(c, 150) || !has(c, 200) || c.stats().Evictions != 1 {
			t.Fatalf("kept 100:%v 150:%v 200:%v, %+v", has(c, 100), has(c, 150), has(c, 200), c.stats())
		}
	})
	t.Run("own request not superseded", func(t *testing.T) {
		s := snaps()
		c := newPrefixCache(cost(s[3]))
		c.add(prompt[:100], s[1], true, 5, nil)
		c.add(prompt[:200], s[3], true, 5, nil) // the same request's other boundary: no room
		if !has(c, 100) || has(c, 200) || c.stats().Evictions != 0 {
			t.Fatalf("kept 100:%v 200:%v, %+v", has(c, 100), has(c, 200), c.stats())
		}
		if st := c.stats(); st.Bytes > st.Budget {
			t.Fatalf("over budget: %+v", st)
		}
	})
	t.Run("longer intermediate supersedes", func(t *testing.T) {
		s := snaps()
		c := newPrefixCache(cost(s[2]))
		c.add(prompt[:50], s[0], false, 6, nil)
		c.add(prompt[:150], s[2], false, 6, nil)
		if has(c, 50) || !has(c, 150) {
			t.Fatalf("kept 50:%v 150:%v", has(c, 50), has(c, 150))
		}
	})
	t.Run("intermediate never evicts a boundary", func(t *testing.T) {
		s := snaps()
		c := newPrefixCache(cost(s[3]))
		c.add(prompt[:100], s[1], true, 7, nil)
		c.add(prompt[:200], s[3], false, 8, nil)
		if !has(c, 100) || has(c, 200) {
			t.Fatalf("kept 100:%v 200:%v", has(c, 100), has(c, 200))
		}
	})
}

// Two conversations with a common prefix, cut at the same points, share the KV blocks
// of that prefix: the second one's snapshot references the first one's blocks instead of
// copying them, and restoring it gives exactly the state of a cold prefill.
func TestPrefixCacheSharesBlocksAcrossConversations(t *testing.T) {
	sess, err := tiny.model.NewSession(1024)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	const every = 128
	p1 := testPrompt(600, 0)
	p2 := append(slices.Clone(p1[:520]), testPrompt(80, 9)...)
	c := newPrefixCache(1 << 30)
	run := func(p []int32, request uint64) *exec.Snapshot {
		keys := newBlockKeys(p, nil, every)
		var last *exec.Snapshot
		sess.Reset()
		err := sess.Prefill(t.Context(), p, exec.PrefillOptions{SnapshotEvery: every,
			ShareKV: func(start, end int) *exec.KVBlock { return c.shared(keys.key(start, end)) },
			OnSnapshot: func(s *exec.Snapshot) {
				last = s
				c.add(p[:s.Len], s, s.Len == len(p), request, func(b *exec.KVBlock) string { return keys.key(b.Start, b.End) })
			}})
		if err != nil {
			t.Fatal(err)
		}
		return last
	}
	s1 := run(p1, 1)
	blocksBefore := c.stats().Blocks
	s2 := run(p2, 2)
	b1, b2 := s1.KV(), s2.KV()
	if b1[0] != b2[0] || b1[1] != b2[1] || b1[2] == b2[2] {
		t.Fatalf("blocks %v / %v: want [0,256) and [256,512) shared, [512,600) not", spans(b1), spans(b2))
	}
	t.Logf("cache blocks %d after the first conversation, %d after the second", blocksBefore, c.stats().Blocks)

	// Restore the second conversation after the session held something else.
	sess.Reset()
	if err := sess.Prefill(t.Context(), testPrompt(700, 5), exec.PrefillOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sess.Restore(s2); err != nil {
		t.Fatal(err)
	}
	if err := sess.Decode(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	restored := slices.Clone(sess.Logits())
	snapshotsOf(t, sess, p2, exec.PrefillOptions{SnapshotEvery: every})
	if err := sess.Decode(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(restored, sess.Logits()) {
		t.Fatal("the restored second conversation decodes differently from a cold prefill of it")
	}
}

func lensOf(s []*exec.Snapshot) []int {
	var out []int
	for _, x := range s {
		out = append(out, x.Len)
	}
	return out
}

func spans(bs []*exec.KVBlock) [][2]int {
	var out [][2]int
	for _, b := range bs {
		out = append(out, [2]int{b.Start, b.End})
	}
	return out
}
