package ops

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"

	"pistil/graph"
)

// Tiled attention: the fast path of refAttention (which stays the oracle, and runs when
// Env.Kernels is "reference"). The work of one KV head is done for all the query heads
// that share it at once, over a block of query tokens: each K and V row is read once per
// block for every one of them, instead of once per query head and token. A block's
// scores S = Q·Kᵀ against a block of keys go through an online softmax (running maximum
// m and sum l per query row, the output rescaled when m grows), then O += P·V, so no
// score matrix larger than one key block exists and a long prompt's memory traffic is
// O(T·C/block). Keys of one query block may be split into ranges run by different
// workers (decode has a single query token), whose partial (m, l, O) are merged at the
// end. Scores are in base 2: the queries are prescaled by scale·log2(e).
//
// The inner loops are kernels (attnKernels) over packed layouts: query rows, and the
// output rows they accumulate, are stored in quads, four rows interleaved per chunk of 8
// floats ([quad][D/8][4][8]), so that a kernel loads the same chunk of four rows with one
// base pointer; scores are key-major ([key][row]), so a key's scores for every row are
// contiguous and the softmax runs across rows.
//
// A bf16 cache is read in place by scoresBF16 and accumBF16, and the packed query and
// output rows are then in pair order: in each run of 16 dims, chunk 2c holds the even
// dims and chunk 2c+1 the odd ones, because a 32-bit word of bf16 cache holds an even dim
// in its low half and the next odd dim in its high half, and each half becomes a float32
// by one shift or one mask, no shuffle. A dot product does not care in which order its
// dims are summed, so the kernels only have to agree with packQueries and mergeParts.
//
// A set with bf16 products (scoresDot, pairProbs, accumDot: AVX512_BF16's VDPBF16PS)
// takes a bf16 cache's products in bf16 pairs instead, for head dims that are multiples of
// 32: the packed query rows are bf16 (packQueriesBF16), rounded once per call; each key
// block's probabilities are rounded to bf16 in key pairs (pairProbs), and the output rows
// come back in dot order (dotOutDim), which mergeParts undoes. Sums stay float32; rounding
// q and p to bf16 is what changes the numbers (attnOrder).

// attnKernels are one implementation of the tiled attention's inner loops. nq (packed
// rows) is a multiple of 8 and D of 16 (attnTileable).
type attnKernels struct {
	name string
	// scores writes s[j*nq+i] = q_i · k_j for the nk key rows at k (kStride floats apart).
	scores func(q []float32, nq, D int, k []float32, kStride, nk int, s []float32)
	// accum adds Σ_j p[j*nq+i]·v_j to every output row i (o packed like q). A set that
	// fetchesAhead also asks the cache for the rows ahead names (the others ignore it).
	accum func(p []float32, nq, D int, v []float32, vStride, nk int, o []float32, ahead attnAhead)
	// rowMax raises m[i] to the largest s[j*nq+i] over the nk keys.
	rowMax func(s []float32, nq, nk int, m []float32)
	// exp2Sum replaces s[j*nq+i] by 2^(s[j*nq+i]-m[i]), 0 where that is below -125 (masked
	// keys are -inf), and adds it to l[i].
	exp2Sum func(s []float32, nq, nk int, m, l []float32)
	// prefetch, if set, asks the cache for n rows of D floats (stride floats apart) that
	// a later kernel reads: the value rows of a key block, while its scores are computed.
	prefetch func(rows []float32, stride, n, D int)
	// fetchesAhead: accum and accumBF16 fetch the rows their ahead argument names while
	// they multiply, so attendRange leaves the hints to them (a value pass is long enough
	// to hide the next pass's fetches behind its FMAs, where one burst of hints before a
	// pass waits on the memory with nothing else to do).
	fetchesAhead bool
	// scoresBF16 and accumBF16 are scores and accum over bf16 key and value rows (strides
	// in elements), with q and o packed in pair order.
	scoresBF16 func(q []float32, nq, D int, k []uint16, kStride, nk int, s []float32)
	accumBF16  func(p []float32, nq, D int, v []uint16, vStride, nk int, o []float32, ahead attnAhead)
	// scoresDot writes s like scoresBF16 from bf16 query rows (packQueriesBF16); pairProbs
	// rounds a key block's probabilities to bf16 in key pairs: pp[(j/2)*nq+i] holds
	// p[j*nq+i] in its low 16 bits and p[(j+1)*nq+i] in its high 16 (0 past an odd nk);
	// accumDot adds Σ_j p_j·v_j from them to the output rows, packed in dot order. Nil in
	// a set without bf16 products.
	scoresDot func(q []uint16, nq, D int, k []uint16, kStride, nk int, s []float32)
	pairProbs func(p []float32, nq, nk int, pp []uint32)
	accumDot  func(pp []uint32, nq, D int, v []uint16, vStride, nk int, o []float32, ahead attnAhead)
}

// attnOrder is how a call's packed query and output rows are laid out, which the kernels,
// packQueries and mergeParts agree on.
type attnOrder int

const (
	orderPlain attnOrder = iota // a float32 cache: each chunk of 8 floats holds dims 8c..8c+7
	orderPairs                  // a bf16 cache read as float32: pair order
	orderDot                    // a bf16 cache in bf16 products: bf16 queries, outputs in dot order
)

// order is the layout this set runs a cache of dtype dt and head dim D in.
func (k *attnKernels) order(dt graph.DType, D int) attnOrder {
	switch {
	case dt != graph.BF16:
		return orderPlain
	case k.scoresDot != nil && D%32 == 0:
		return orderDot
	}
	return orderPairs
}

// dotOutDim is the dim, within its block of 32, of element e of chunk c (0-3) of a
// packed output row in dot order: accumDot's first register of a row holds chunks 0 and
// 1, whose lane 4L+i is dim 8L+i (VPUNPCKLWD's interleave of two keys' value words keeps
// dims 8L..8L+3 of each 128-bit lane L), the second chunks 2 and 3, dims 8L+4+i.
func dotOutDim(c, e int) int {
	lane := 8*(c%2) + e
	return 8*(lane/4) + lane%4 + 4*(c/2)
}

// dotOutDims[8c+e] is dotOutDim(c, e), for mergeParts' loop.
var dotOutDims = func() (t [32]uint8) {
	for i := range t {
		t[i] = uint8(dotOutDim(i/8, i%8))
	}
	return t
}()

// attnAhead names the rows the passes after a value pass read (the next KV head's keys
// and values of the block, or the next block's): k and v are their byte distances from
// the value rows the pass reads, key for key at the same stride, 0 for none. A hint
// needs no bounds: a prefetch of an address past the cache reads nothing and cannot
// fault.
type attnAhead struct{ k, v int }

// aheadOf is the ahead of a value pass over rows v that names the rows nextK and nextV
// (by their first elements; empty: none).
func aheadOf[E float32 | uint16](v, nextK, nextV []E) attnAhead {
	if len(nextK) == 0 || len(nextV) == 0 {
		return attnAhead{}
	}
	at := func(x []E) int { return int(uintptr(unsafe.Pointer(&x[0]))) }
	return attnAhead{k: at(nextK) - at(v), v: at(nextV) - at(v)}
}

// attnFast is the best set for this machine (the amd64 init may replace it); tests swap
// it to check every set.
var attnFast = goAttnKernels

// attnKernelSets lists the sets this machine can run, the default last (the tests run
// each).
var attnKernelSets = []*attnKernels{goDotAttnKernels, goAttnKernels}

// AttentionKernelNames are the names SetAttentionKernel knows on some machine.
var AttentionKernelNames = []string{"go-bf16", "go", "avx2", "avx512-l1", "avx512bf16", "avx512"}

// AttentionKernelsHere names the kernel sets this machine can run, the default last.
func AttentionKernelsHere() []string {
	var names []string
	for _, k := range attnKernelSets {
		names = append(names, k.name)
	}
	return names
}

// AttentionKernel names the tiled attention's kernel set in use.
func AttentionKernel() string { return attnFast.name }

// SetAttentionKernel makes the tiled attention (the fast kernels' attention) run the named
// kernel set, process-wide: "go" (the portable loops), "go-bf16" (the portable loops with
// a bf16 cache's products in bf16), "avx2", "avx512-l1", "avx512", "avx512bf16" (those
// this machine has); "" the fastest. pipeline.toml's [cpu] attention_kernel. Over a
// float32 cache the sets differ only in the order of float32 sums; over a bf16 cache
// "go-bf16" and "avx512bf16" also round the queries and probabilities to bf16
// (TestTiledAttentionMatchesReference holds each to the scalar oracle).
func SetAttentionKernel(name string) error {
	if name == "" {
		attnFast = attnKernelSets[len(attnKernelSets)-1]
		return nil
	}
	var names []string
	for _, k := range attnKernelSets {
		if k.name == name {
			attnFast = k
			return nil
		}
		names = append(names, k.name)
	}
	return fmt.Errorf("attention kernel %q: this machine has %s", name, strings.Join(names, ", "))
}

const (
	attnKeyBlock = 64       // keys per score block
	attnQBytes   = 32 << 10 // a block's packed query rows of one KV head: about the L1 cache
	attnMinSplit = 256      // fewest keys a split range gets
	// attnPrefetchMaxRows is the most packed query rows of a block whose value rows are
	// prefetched (decode's query heads of one KV head: 8 at the 35B-A3B's shapes).
	attnPrefetchMaxRows  = 16
	attnPrefetchMinBytes = 512 // and the shortest rows it prefetches
	log2e                = 1.4426950408889634
	attnMaskedExp        = -125 // exponents below this contribute 0 (exp2Sum)
)

// attnTileable reports whether the tiled path takes these shapes.
func attnTileable(D int) bool { return D%16 == 0 && D > 0 }

// attnItem is one unit of tiled work: query tokens [t0, t1) of every KV head against
// keys [k0, k1). The heads go together because a cache row holds all of them side by
// side: a worker that took one head would stream every row's lines to use half of each
// (and at the 35B-A3B's two heads of 1 KiB, a separate item per head ran at half speed).
type attnItem struct {
	t0, t1, k0, k1 int
	part           int // index of its partial results (one per KV head)
}

func tiledAttention(env *Env, q, kc, vc *Tensor, o []float32, C int, scale float32, kern *attnKernels) {
	T, NH, D := q.Shape[0], q.Shape[1], q.Shape[2]
	KVH := kc.Shape[1]
	G := NH / KVH
	// Query tokens per block: as many as keep the block's packed rows near attnQBytes.
	bq := max(1, attnQBytes/(4*D*G))
	bq = min(bq, T)
	nqb := (T + bq - 1) / bq
	rows := (bq*G + 7) &^ 7
	// Split the keys of each block only when the blocks alone would leave workers idle.
	w := env.workers()
	splits := 1
	if nqb < 2*w {
		splits = max(1, min((2*w+nqb-1)/nqb, (C+T)/attnMinSplit))
	}
	var items []attnItem
	// Later query blocks see more keys: they go first, so the dynamic hand-out ends on
	// small items.
	for b := nqb - 1; b >= 0; b-- {
		t0, t1 := b*bq, min((b+1)*bq, T)
		keys := C + t1
		for s := 0; s < splits; s++ {
			k0 := (keys * s / splits) &^ (attnKeyBlock - 1)
			k1 := (keys * (s + 1) / splits) &^ (attnKeyBlock - 1)
			if s == splits-1 {
				k1 = keys
			}
			if k0 < k1 {
				items = append(items, attnItem{t0: t0, t1: t1, k0: k0, k1: k1, part: len(items)})
			}
		}
	}
	// partial results: per item and KV head, m and l of each row and its packed output
	// rows ((item*KVH + kvh) * rows).
	buf := attnPool.Get().(*attnBuffers)
	defer attnPool.Put(buf)
	partM := grow(&buf.m, len(items)*KVH*rows)
	partL := grow(&buf.l, len(items)*KVH*rows)
	partO := grow(&buf.o, len(items)*KVH*rows*D)
	qs := q.F32()
	order := kern.order(kc.DType, D)
	workers := min(w, len(items))
	for len(buf.workers) < workers {
		buf.workers = append(buf.workers, &attnScratch{})
	}
	parallelItems(env, len(items), func(worker, i int) {
		it := items[i]
		sc := buf.workers[worker]
		sc.ensure(KVH, rows, D)
		var qp []float32 // the packed query rows (bf16 in qh for orderDot)
		var qh []uint16
		if order == orderDot {
			qh = growU16(&sc.qh, KVH*rows*D)
		} else {
			qp = grow(&sc.q, KVH*rows*D)
		}
		for kvh := 0; kvh < KVH; kvh++ {
			if order == orderDot {
				packQueriesBF16(qs, it, kvh, NH, G, D, scale*log2e, qh[kvh*rows*D:(kvh+1)*rows*D])
			} else {
				packQueries(qs, it, kvh, NH, G, D, scale*log2e, order == orderPairs, qp[kvh*rows*D:(kvh+1)*rows*D])
			}
		}
		n := KVH * rows
		m := partM[it.part*n : (it.part+1)*n]
		l := partL[it.part*n : (it.part+1)*n]
		op := partO[it.part*n*D : (it.part+1)*n*D]
		attendRange(kern, order, qp, qh, rows, it, G, D, C, kc, vc, m, l, op, sc)
	})
	// Merge each block's partials (keys split over items; the items of a block are
	// consecutive) and write the output rows.
	var blocks [][]attnItem
	for i := 0; i < len(items); {
		j := i + 1
		for j < len(items) && items[j].t0 == items[i].t0 {
			j++
		}
		blocks = append(blocks, items[i:j])
		i = j
	}
	merge := func(lo, hi int) {
		for _, its := range blocks[lo:hi] {
			for kvh := 0; kvh < KVH; kvh++ {
				mergeParts(its, kvh, KVH, rows, G, NH, D, order, partM, partL, partO, o)
			}
		}
	}
	if T*NH*D < 1<<15 {
		merge(0, len(blocks)) // decode: less work than starting the goroutines
	} else {
		parallelRange(env, len(blocks), merge)
	}
}

// attnBuffers are a call's partial results and its workers' scratch, recycled across
// calls (a decode step runs attention once per layer).
type attnBuffers struct {
	m, l, o []float32
	workers []*attnScratch
}

var attnPool = sync.Pool{New: func() any { return &attnBuffers{} }}

// grow returns (*b)[:n], reallocating when it is shorter.
func grow(b *[]float32, n int) []float32 {
	if cap(*b) < n {
		*b = make([]float32, n)
	}
	return (*b)[:n]
}

func growU16(b *[]uint16, n int) []uint16 {
	if cap(*b) < n {
		*b = make([]uint16, n)
	}
	return (*b)[:n]
}

func growU32(b *[]uint32, n int) []uint32 {
	if cap(*b) < n {
		*b = make([]uint32, n)
	}
	return (*b)[:n]
}

// attnScratch is one worker's buffers.
type attnScratch struct {
	q, s    []float32
	qh      []uint16  // bf16 query rows (orderDot)
	pp      []uint32  // a key block's probabilities in bf16 key pairs (orderDot)
	m, l, o []float32 // attendRange's running maximum, sum and output (KVH heads)
	bm      []float32 // a key block's row maxima
}

// ensure sizes the buffers for KVH heads of rows packed query rows of D.
func (sc *attnScratch) ensure(KVH, rows, D int) {
	grow(&sc.s, attnKeyBlock*rows)
	grow(&sc.m, KVH*rows)
	grow(&sc.l, KVH*rows)
	grow(&sc.o, KVH*rows*D)
	grow(&sc.bm, rows)
}

// packQueriesBF16 is packQueries for orderDot: the scaled rows rounded to bf16, a quad's
// chunk c (16 dims) of row r at element 64c + 16r, the dims in their own order (a 32-bit
// lane holds two neighbours, as a bf16 cache row does).
func packQueriesBF16(qs []float32, it attnItem, kvh, NH, G, D int, scale float32, dst []uint16) {
	clear(dst)
	for t := it.t0; t < it.t1; t++ {
		for g := 0; g < G; g++ {
			i := (t-it.t0)*G + g
			src := qs[(t*NH+kvh*G+g)*D : (t*NH+kvh*G+g+1)*D]
			base := (i/4)*4*D + (i%4)*16
			for c := 0; c < D; c += 16 {
				d := dst[base+c*4 : base+c*4+16 : base+c*4+16]
				for e, x := range src[c : c+16 : c+16] {
					d[e] = F32ToBF16(x * scale)
				}
			}
		}
	}
}

// packQueries writes the block's query rows of KV head kvh (row (t-t0)*G+g is head
// kvh*G+g of token t), scaled, in packed order (pair order if pairs); padding rows are
// zero.
func packQueries(qs []float32, it attnItem, kvh, NH, G, D int, scale float32, pairs bool, dst []float32) {
	clear(dst)
	for t := it.t0; t < it.t1; t++ {
		for g := 0; g < G; g++ {
			i := (t-it.t0)*G + g
			src := qs[(t*NH+kvh*G+g)*D : (t*NH+kvh*G+g+1)*D]
			base := (i/4)*4*D + (i%4)*8
			if pairs {
				for c := 0; c < D; c += 16 {
					even := dst[base+c*4 : base+c*4+8 : base+c*4+8]
					odd := dst[base+c*4+32 : base+c*4+40 : base+c*4+40]
					s := src[c : c+16 : c+16]
					for e := range even {
						even[e], odd[e] = s[2*e]*scale, s[2*e+1]*scale
					}
				}
				continue
			}
			for c := 0; c < D; c += 8 {
				d := dst[base+c*4 : base+c*4+8 : base+c*4+8]
				s := src[c : c+8 : c+8]
				for e := range d {
					d[e] = s[e] * scale
				}
			}
		}
	}
}

// attendRange runs the online softmax of the block's rows, for every KV head, over keys
// [it.k0, it.k1), leaving each row's maximum m, sum l and unnormalised output (packed)
// for mergeParts. qp, m, l and op hold the heads one after the other (rows rows each).
// Each key block is done for every head before the next, so the cache rows it reads
// (all heads side by side) are used whole while they are in the cache.
//
// The running m, l and output live in the worker's scratch until the range is done: the
// items' partials lie side by side, and two workers updating neighbouring items' m and l
// after every key block shared their cache lines (a decode step's items have 8 rows: 32
// bytes of m each).
func attendRange(kern *attnKernels, order attnOrder, qp []float32, qh []uint16, rows int, it attnItem, G, D, C int, kc, vc *Tensor,
	outM, outL, outO []float32, sc *attnScratch) {
	KVH := kc.Shape[1]
	stride := KVH * D // elements between a head's cache rows
	pairs := kc.DType == graph.BF16
	// fetch asks the cache for rows [j, j+n) of head kvh of cache t (a bf16 row seen as
	// floats: half as many a row and between rows).
	fetch := func(t *Tensor, kvh, j, n int) {
		if pairs {
			kern.prefetch(bf16AsFloats(bf16Rows(t, kvh, j, n)), stride/2, n, D/2)
		} else {
			kern.prefetch(f32Rows(t, kvh, j, n), stride, n, D)
		}
	}
	neg := float32(math.Inf(-1))
	m, l := sc.m[:len(outM)], sc.l[:len(outL)]
	op := sc.o[:len(outO)]
	for i := range m {
		m[i], l[i] = neg, 0
	}
	clear(op)
	defer func() {
		copy(outM, m)
		copy(outL, l)
		copy(outO, op)
	}()
	bm := sc.bm[:rows]
	// A decode step's few query rows read each value row once, in strips of 64 bytes
	// across the block's keys: rows of 512 bytes or more (the 35B-A3B's 1 KiB float32,
	// 512 bytes bf16) are fetched ahead (in a decode step the weights stream through the
	// caches between attention layers, so K and V come from memory). A prefill block's
	// many rows find them cached after the first quad, and the tiny model's 256-byte
	// float32 rows spent 3.4% of a decode profile (context 8,192) in the hints, its cache
	// in the L3 anyway.
	ahead := kern.prefetch != nil && rows <= attnPrefetchMaxRows && D*vc.DType.Bits()/8 >= attnPrefetchMinBytes
	for j0 := it.k0; j0 < it.k1; j0 += attnKeyBlock {
		nk := min(attnKeyBlock, it.k1-j0)
		for kvh := 0; kvh < KVH; kvh++ {
			hm, hl := m[kvh*rows:(kvh+1)*rows], l[kvh*rows:(kvh+1)*rows]
			ho := op[kvh*rows*D : (kvh+1)*rows*D]
			s := sc.s[:nk*rows]
			// The pass after this one's: the next head's of the block, else the next block's
			// first head's (none after the range's last).
			nextJ, nextH := j0, kvh+1
			if nextH == KVH {
				nextJ, nextH = j0+nk, 0
			}
			nextN := min(attnKeyBlock, it.k1-nextJ)
			switch {
			case ahead && kern.fetchesAhead:
				// Each value pass fetches what the next (block, head) reads: its keys just
				// before its score pass, its values a score pass before its value pass.
				// Only the range's first values are asked for here, while its first
				// scores are computed.
				if j0 == it.k0 && kvh == 0 {
					fetch(vc, kvh, j0, nk)
				}
			case ahead:
				// The values while the scores are computed, and the next block's keys
				// while this block's softmax and values run.
				fetch(vc, kvh, j0, nk)
			}
			switch order {
			case orderDot:
				kern.scoresDot(qh[kvh*rows*D:(kvh+1)*rows*D], rows, D, bf16Rows(kc, kvh, j0, nk), stride, nk, s)
			case orderPairs:
				kern.scoresBF16(qp[kvh*rows*D:(kvh+1)*rows*D], rows, D, bf16Rows(kc, kvh, j0, nk), stride, nk, s)
			default:
				kern.scores(qp[kvh*rows*D:(kvh+1)*rows*D], rows, D, f32Rows(kc, kvh, j0, nk), stride, nk, s)
			}
			if next := min(attnKeyBlock, it.k1-j0-nk); ahead && !kern.fetchesAhead && next > 0 {
				fetch(kc, kvh, j0+nk, next)
			}
			// Causal mask: key j is visible to token t when j <= C+t. Only blocks that
			// reach past the block's first token need it; padding rows see nothing.
			if j0+nk-1 > C+it.t0 || (it.t1-it.t0)*G < rows {
				for i := 0; i < rows; i++ {
					last := -1 // last visible key of row i
					if i < (it.t1-it.t0)*G {
						last = C + it.t0 + i/G
					}
					for j := max(last+1, j0); j < j0+nk; j++ {
						s[(j-j0)*rows+i] = neg
					}
				}
			}
			copy(bm, hm)
			kern.rowMax(s, rows, nk, bm)
			for i := 0; i < rows; i++ {
				if bm[i] == neg {
					continue // nothing visible yet: m, l and the output stay empty
				}
				if hl[i] != 0 && bm[i] != hm[i] {
					alpha := exp2f(hm[i] - bm[i])
					hl[i] *= alpha
					scalePackedRow(ho, i, D, alpha)
				}
				hm[i] = bm[i]
			}
			// Rows with nothing visible exponentiate against 0: their scores are all -inf.
			for i := 0; i < rows; i++ {
				if bm[i] == neg {
					bm[i] = 0
				}
			}
			kern.exp2Sum(s, rows, nk, bm, hl)
			fetchNext := ahead && kern.fetchesAhead && nextN > 0
			if pairs {
				v := bf16Rows(vc, kvh, j0, nk)
				var next attnAhead
				if fetchNext {
					next = aheadOf(v, bf16Rows(kc, nextH, nextJ, nextN), bf16Rows(vc, nextH, nextJ, nextN))
				}
				if order == orderDot {
					pp := growU32(&sc.pp, (nk+1)/2*rows)
					kern.pairProbs(s, rows, nk, pp)
					kern.accumDot(pp, rows, D, v, stride, nk, ho, next)
				} else {
					kern.accumBF16(s, rows, D, v, stride, nk, ho, next)
				}
			} else {
				v := f32Rows(vc, kvh, j0, nk)
				var next attnAhead
				if fetchNext {
					next = aheadOf(v, f32Rows(kc, nextH, nextJ, nextN), f32Rows(vc, nextH, nextJ, nextN))
				}
				kern.accum(s, rows, D, v, stride, nk, ho, next)
			}
		}
	}
}

// scalePackedRow multiplies packed row i by a.
func scalePackedRow(op []float32, i, D int, a float32) {
	base := (i/4)*4*D + (i%4)*8
	for c := 0; c < D; c += 8 {
		r := op[base+c*4 : base+c*4+8 : base+c*4+8]
		for e := range r {
			r[e] *= a
		}
	}
}

// f32Rows and bf16Rows return cache rows [j0, j0+n) of one KV head of a float32 and a
// bf16 cache, KVH·D elements apart.
func f32Rows(cache *Tensor, kvh, j0, n int) []float32 {
	KVH, D := cache.Shape[1], cache.Shape[2]
	return cache.F32()[(j0*KVH+kvh)*D : ((j0+n-1)*KVH+kvh+1)*D]
}

func bf16Rows(cache *Tensor, kvh, j0, n int) []uint16 {
	KVH, D := cache.Shape[1], cache.Shape[2]
	return u16(cache.Data)[(j0*KVH+kvh)*D : ((j0+n-1)*KVH+kvh+1)*D]
}

// bf16AsFloats views bf16 rows as floats, half as many, for the prefetch hints (which
// only read addresses). Rows of an even length keep their starts at whole floats.
func bf16AsFloats(x []uint16) []float32 {
	if len(x) < 2 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&x[0])), len(x)/2)
}

// mergeParts combines the partials of KV head kvh of one query block (its key ranges),
// packed in order, and writes the normalised output rows of its tokens.
func mergeParts(its []attnItem, kvh, KVH, rows, G, NH, D int, order attnOrder, partM, partL, partO, o []float32) {
	it0 := its[0]
	part := func(it attnItem) int { return (it.part*KVH + kvh) * rows } // its first row
	for t := it0.t0; t < it0.t1; t++ {
		for g := 0; g < G; g++ {
			i := (t-it0.t0)*G + g
			M := float32(math.Inf(-1))
			for _, it := range its {
				if l := partL[part(it)+i]; l != 0 {
					M = max(M, partM[part(it)+i])
				}
			}
			dst := o[(t*NH+kvh*G+g)*D : (t*NH+kvh*G+g+1)*D]
			clear(dst)
			var L float32
			base := (i/4)*4*D + (i%4)*8
			for _, it := range its {
				l := partL[part(it)+i]
				if l == 0 {
					continue
				}
				wgt := exp2f(partM[part(it)+i] - M)
				L += l * wgt
				src := partO[part(it)*D+base:]
				switch order {
				case orderDot:
					for c := 0; c < D; c += 8 {
						d, s := dst[c&^31:c&^31+32:c&^31+32], src[c*4:c*4+8:c*4+8]
						dims := dotOutDims[c%32 : c%32+8 : c%32+8]
						for e, x := range s {
							d[dims[e]] += wgt * x
						}
					}
					continue
				case orderPairs:
					for c := 0; c < D; c += 16 {
						d := dst[c : c+16 : c+16]
						even, odd := src[c*4:c*4+8:c*4+8], src[c*4+32:c*4+40:c*4+40]
						for e := range even {
							d[2*e] += wgt * even[e]
							d[2*e+1] += wgt * odd[e]
						}
					}
					continue
				}
				for c := 0; c < D; c += 8 {
					d, s := dst[c:c+8:c+8], src[c*4:c*4+8:c*4+8]
					for e := range d {
						d[e] += wgt * s[e]
					}
				}
			}
			inv := 1 / L
			for d := range dst {
				dst[d] *= inv
			}
		}
	}
}

// exp2f is 2^x in float32 (x <= 0 here): x = n + f with |f| <= 1/2, 2^f by its Taylor
// series to degree 6 (relative error below 2e-7), 2^n by the exponent bits. Below -125
// it is 0. The assembly kernels compute the same.
func exp2f(x float32) float32 {
	if x < attnMaskedExp {
		return 0
	}
	n := float32(math.Round(float64(x)))
	f := (x - n) * math.Ln2
	p := exp2Poly(f)
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// exp2Poly is e^f for |f| <= ln2/2, Horner over the Taylor coefficients 1/k!.
func exp2Poly(f float32) float32 {
	return 1 + f*(1+f*(1.0/2+f*(1.0/6+f*(1.0/24+f*(1.0/120+f*(1.0/720))))))
}

// goAttnKernels are the portable kernels (arm64 and every shape).
var goAttnKernels = &attnKernels{name: "go", scores: scoresGo, accum: accumGo, rowMax: rowMaxGo, exp2Sum: exp2SumGo,
	scoresBF16: scoresBF16Go, accumBF16: accumBF16Go}

func scoresGo(q []float32, nq, D int, k []float32, kStride, nk int, s []float32) {
	for j := 0; j < nk; j++ {
		kr := k[j*kStride : j*kStride+D]
		for quad := 0; quad < nq/4; quad++ {
			qq := q[quad*4*D : (quad+1)*4*D]
			var a0, a1, a2, a3 float32
			for c := 0; c < D; c += 8 {
				kk := kr[c : c+8 : c+8]
				blk := qq[c*4 : c*4+32 : c*4+32]
				for e := 0; e < 8; e++ {
					a0 += blk[e] * kk[e]
					a1 += blk[8+e] * kk[e]
					a2 += blk[16+e] * kk[e]
					a3 += blk[24+e] * kk[e]
				}
			}
			out := s[j*nq+quad*4 : j*nq+quad*4+4 : j*nq+quad*4+4]
			out[0], out[1], out[2], out[3] = a0, a1, a2, a3
		}
	}
}

func accumGo(p []float32, nq, D int, v []float32, vStride, nk int, o []float32, _ attnAhead) {
	for j := 0; j < nk; j++ {
		vr := v[j*vStride : j*vStride+D]
		pr := p[j*nq : (j+1)*nq]
		for quad := 0; quad < nq/4; quad++ {
			oq := o[quad*4*D : (quad+1)*4*D]
			p0, p1, p2, p3 := pr[quad*4], pr[quad*4+1], pr[quad*4+2], pr[quad*4+3]
			for c := 0; c < D; c += 8 {
				vv := vr[c : c+8 : c+8]
				blk := oq[c*4 : c*4+32 : c*4+32]
				for e := 0; e < 8; e++ {
					blk[e] += p0 * vv[e]
					blk[8+e] += p1 * vv[e]
					blk[16+e] += p2 * vv[e]
					blk[24+e] += p3 * vv[e]
				}
			}
		}
	}
}

// scoresBF16Go and accumBF16Go are scoresGo and accumGo over bf16 rows read in place,
// q and o in pair order.
func scoresBF16Go(q []float32, nq, D int, k []uint16, kStride, nk int, s []float32) {
	for j := 0; j < nk; j++ {
		kr := k[j*kStride : j*kStride+D]
		for quad := 0; quad < nq/4; quad++ {
			qq := q[quad*4*D : (quad+1)*4*D]
			var a0, a1, a2, a3 float32
			for c := 0; c < D; c += 16 {
				kk := kr[c : c+16 : c+16]
				blk := qq[c*4 : c*4+64 : c*4+64]
				for e := 0; e < 8; e++ {
					ke, ko := BF16ToF32(kk[2*e]), BF16ToF32(kk[2*e+1])
					a0 += blk[e]*ke + blk[32+e]*ko
					a1 += blk[8+e]*ke + blk[40+e]*ko
					a2 += blk[16+e]*ke + blk[48+e]*ko
					a3 += blk[24+e]*ke + blk[56+e]*ko
				}
			}
			out := s[j*nq+quad*4 : j*nq+quad*4+4 : j*nq+quad*4+4]
			out[0], out[1], out[2], out[3] = a0, a1, a2, a3
		}
	}
}

func accumBF16Go(p []float32, nq, D int, v []uint16, vStride, nk int, o []float32, _ attnAhead) {
	for j := 0; j < nk; j++ {
		vr := v[j*vStride : j*vStride+D]
		pr := p[j*nq : (j+1)*nq]
		for quad := 0; quad < nq/4; quad++ {
			oq := o[quad*4*D : (quad+1)*4*D]
			p0, p1, p2, p3 := pr[quad*4], pr[quad*4+1], pr[quad*4+2], pr[quad*4+3]
			for c := 0; c < D; c += 16 {
				vv := vr[c : c+16 : c+16]
				blk := oq[c*4 : c*4+64 : c*4+64]
				for e := 0; e < 8; e++ {
					ve, vo := BF16ToF32(vv[2*e]), BF16ToF32(vv[2*e+1])
					blk[e] += p0 * ve
					blk[8+e] += p1 * ve
					blk[16+e] += p2 * ve
					blk[24+e] += p3 * ve
					blk[32+e] += p0 * vo
					blk[40+e] += p1 * vo
					blk[48+e] += p2 * vo
					blk[56+e] += p3 * vo
				}
			}
		}
	}
}

// goDotAttnKernels ("go-bf16") are the portable kernels with bf16 products: the oracle of
// the assembly ones (the same roundings of q and p; float32 sums in another order), and a
// way to see the roundings' effect on any machine.
var goDotAttnKernels = &attnKernels{name: "go-bf16", scores: scoresGo, accum: accumGo, rowMax: rowMaxGo, exp2Sum: exp2SumGo,
	scoresBF16: scoresBF16Go, accumBF16: accumBF16Go, scoresDot: scoresDotGo, pairProbs: pairProbsGo, accumDot: accumDotGo}

// scoresDotGo is scoresGo over bf16 query rows (packQueriesBF16) and bf16 key rows: each
// product of two bf16 is exact in float32.
func scoresDotGo(q []uint16, nq, D int, k []uint16, kStride, nk int, s []float32) {
	for j := 0; j < nk; j++ {
		kr := k[j*kStride : j*kStride+D]
		for i := 0; i < nq; i++ {
			base := (i/4)*4*D + (i%4)*16
			var a float32
			for c := 0; c < D; c += 16 {
				qq := q[base+c*4 : base+c*4+16 : base+c*4+16]
				for e, kk := range kr[c : c+16 : c+16] {
					a += BF16ToF32(qq[e]) * BF16ToF32(kk)
				}
			}
			s[j*nq+i] = a
		}
	}
}

func pairProbsGo(p []float32, nq, nk int, pp []uint32) {
	for j := 0; j < nk; j += 2 {
		for i := 0; i < nq; i++ {
			var hi uint16
			if j+1 < nk {
				hi = F32ToBF16(p[(j+1)*nq+i])
			}
			pp[j/2*nq+i] = uint32(F32ToBF16(p[j*nq+i])) | uint32(hi)<<16
		}
	}
}

// accumDotGo adds each key pair's products to the output rows in dot order, the second
// key's first (as VDPBF16PS is specified).
func accumDotGo(pp []uint32, nq, D int, v []uint16, vStride, nk int, o []float32, _ attnAhead) {
	zeros := make([]uint16, D) // an odd nk's last key pairs with zeros
	for j := 0; j < nk; j += 2 {
		v0, v1 := v[j*vStride:j*vStride+D], zeros
		if j+1 < nk {
			v1 = v[(j+1)*vStride : (j+1)*vStride+D]
		}
		for i := 0; i < nq; i++ {
			w := pp[j/2*nq+i]
			p0, p1 := BF16ToF32(uint16(w)), BF16ToF32(uint16(w>>16))
			base := (i/4)*4*D + (i%4)*8
			for c := 0; c < D; c += 8 {
				blk := o[base+c*4 : base+c*4+8 : base+c*4+8]
				for e := range blk {
					d := c&^31 + dotOutDim(c/8%4, e)
					blk[e] += p1 * BF16ToF32(v1[d])
					blk[e] += p0 * BF16ToF32(v0[d])
				}
			}
		}
	}
}

func rowMaxGo(s []float32, nq, nk int, m []float32) {
	m = m[:nq]
	for j := 0; j < nk; j++ {
		for i, v := range s[j*nq : (j+1)*nq] {
			m[i] = max(m[i], v)
		}
	}
}

func exp2SumGo(s []float32, nq, nk int, m, l []float32) {
	m, l = m[:nq], l[:nq]
	for j := 0; j < nk; j++ {
		row := s[j*nq : (j+1)*nq]
		for i, v := range row {
			e := exp2f(v - m[i])
			row[i] = e
			l[i] += e
		}
	}
}
