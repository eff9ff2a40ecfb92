package ops

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// AVX2/FMA kernels of the tiled attention (attention_amd64.s); the wrappers check the
// lengths the assembly relies on, so a short slice panics in Go instead of being read
// past its end.

//go:noescape
func attnScoresAVX2(q *float32, nq, D int, k *float32, kStride, nk int, s *float32)

//go:noescape
func attnAccumAVX2(p *float32, nq, D int, v *float32, vStride, nk int, o *float32)

//go:noescape
func attnRowMaxAVX2(s *float32, nq, nk int, m *float32)

//go:noescape
func attnExp2SumAVX2(s *float32, nq, nk int, m, l *float32)

//go:noescape
func attnScoresBF16AVX2(q *float32, nq, D int, k *uint16, kStride, nk int, s *float32)

//go:noescape
func attnAccumBF16AVX2(p *float32, nq, D int, v *uint16, vStride, nk int, o *float32)

//go:noescape
func attnPrefetchRows(p uintptr, stride, n, D int)

// AVX-512 kernels of the two dot-product loops (attention_avx512_amd64.s).

//go:noescape
func attnScoresAVX512(q *float32, nq, D int, k *float32, kStride, nk int, s *float32)

//go:noescape
func attnAccumAVX512(p *float32, nq, D int, v *float32, vStride, nk int, o *float32, aheadK, aheadV int, toL2 bool)

//go:noescape
func attnScoresBF16AVX512(q *float32, nq, D int, k *uint16, kStride, nk int, s *float32)

//go:noescape
func attnAccumBF16AVX512(p *float32, nq, D int, v *uint16, vStride, nk int, o *float32, aheadK, aheadV int, toL2 bool)

//go:noescape
func attnExp2Sum16AVX512(s *float32, n, stride int, m, l *float32)

// The bf16 products' kernels (AVX512_BF16, attention_avx512_amd64.s).

//go:noescape
func attnScoresDotAVX512(q *uint16, nq, D int, k *uint16, kStride, nk int, s *float32)

//go:noescape
func attnPairProbsAVX512(p *float32, nq, nk int, pp *uint32)

//go:noescape
func attnAccumDotAVX512(pp *uint32, nq, D int, v *uint16, vStride, nk int, o *float32, aheadK, aheadV int, toL2 bool)

// exp2SumAVX512 is attnKernels.exp2Sum sixteen lanes at a time: 16 rows of every key
// when nq is a multiple of 16; two keys' 8 rows (m and l doubled) when nq is 8, a last
// odd key through the AVX2 kernel; other row counts through the AVX2 kernel.
func exp2SumAVX512(s []float32, nq, nk int, m, l []float32) {
	checkAttn(nq, 16, nk, len(s) >= nk*nq && len(m) >= nq && len(l) >= nq)
	switch {
	case nq%16 == 0:
		for r := 0; r < nq; r += 16 {
			attnExp2Sum16AVX512(&s[r], nk, 4*nq, &m[r], &l[r])
		}
	case nq == 8:
		var m2, l2 [16]float32
		copy(m2[:8], m[:8])
		copy(m2[8:], m[:8])
		if nk >= 2 {
			attnExp2Sum16AVX512(&s[0], nk/2, 64, &m2[0], &l2[0])
			for i := range 8 {
				l[i] += l2[i] + l2[8+i]
			}
		}
		if nk%2 == 1 {
			attnExp2SumAVX2(&s[(nk-1)*8], 8, 1, &m[0], &l[0])
		}
	default:
		attnExp2SumAVX2(&s[0], nq, nk, &m[0], &l[0])
	}
}

var avx2AttnKernels = &attnKernels{
	name: "avx2",
	scores: func(q []float32, nq, D int, k []float32, kStride, nk int, s []float32) {
		checkAttn(nq, D, nk, len(q) >= nq*D && len(k) >= (nk-1)*kStride+D && len(s) >= nk*nq)
		attnScoresAVX2(&q[0], nq, D, &k[0], kStride, nk, &s[0])
	},
	accum: func(p []float32, nq, D int, v []float32, vStride, nk int, o []float32, _ attnAhead) {
		checkAttn(nq, D, nk, len(p) >= nk*nq && len(v) >= (nk-1)*vStride+D && len(o) >= nq*D)
		attnAccumAVX2(&p[0], nq, D, &v[0], vStride, nk, &o[0])
	},
	rowMax: func(s []float32, nq, nk int, m []float32) {
		checkAttn(nq, 16, nk, len(s) >= nk*nq && len(m) >= nq)
		attnRowMaxAVX2(&s[0], nq, nk, &m[0])
	},
	exp2Sum: func(s []float32, nq, nk int, m, l []float32) {
		checkAttn(nq, 16, nk, len(s) >= nk*nq && len(m) >= nq && len(l) >= nq)
		attnExp2SumAVX2(&s[0], nq, nk, &m[0], &l[0])
	},
	prefetch: func(rows []float32, stride, n, D int) {
		// Any row length: the kernel walks a row's 64-byte lines (a bf16 row seen as
		// floats may be no multiple of 16).
		if n <= 0 || D <= 0 || len(rows) < (n-1)*stride+D {
			panic("ops: attention prefetch called with a bad shape or a short slice")
		}
		attnPrefetchRows(uintptr(unsafe.Pointer(&rows[0])), stride, n, D)
	},
	scoresBF16: func(q []float32, nq, D int, k []uint16, kStride, nk int, s []float32) {
		checkAttn(nq, D, nk, len(q) >= nq*D && len(k) >= (nk-1)*kStride+D && len(s) >= nk*nq)
		attnScoresBF16AVX2(&q[0], nq, D, &k[0], kStride, nk, &s[0])
	},
	accumBF16: func(p []float32, nq, D int, v []uint16, vStride, nk int, o []float32, _ attnAhead) {
		checkAttn(nq, D, nk, len(p) >= nk*nq && len(v) >= (nk-1)*vStride+D && len(o) >= nq*D)
		attnAccumBF16AVX2(&p[0], nq, D, &v[0], vStride, nk, &o[0])
	},
}

// avx512AttnKernels: the scores and the value accumulation in 512-bit registers (two rows
// per FMA), and the softmax's exponentials; its row maximum, a small share, stays AVX2. The
// accumulation takes D in blocks of 32 (the AVX2 kernel takes the other head dims). A
// bf16 cache is read in place. Its value passes ask for the next passes' rows into the L2
// cache where attnAheadToL2 says so; avx512L1AttnKernels ("avx512-l1", the off switch)
// always into the L1. The two give the same bits: a hint changes no value.
var (
	avx512AttnKernels   = newAVX512AttnKernels("avx512", func() bool { return attnAheadToL2 })
	avx512L1AttnKernels = newAVX512AttnKernels("avx512-l1", func() bool { return false })
)

// attnAheadToL2: the AVX-512 value passes fetch the next passes' keys and values with
// PREFETCHT1 (into the L2) instead of PREFETCHT0 (into the L1, where the pass still reads
// its own 64 KiB of values a 128-byte strip at a time). Set on AMD processors of family
// 0x19 (Zen 4; Zen 3 has no AVX-512): on the AMD EPYC kind with Zen 4 (2 cores, thirty-
// seventh session, full model, int8-all decode at context 4,096, alternating) attention ran
// at 19.9-21.0 GB/s against 14.5-15.0 (cpu/README.md). On the Intel Xeon kind the
// thirty-fourth session measured the L2 level with the L1; Zen 5 was not measured. Both
// keep the L1.
var attnAheadToL2 bool

// attnL2AheadFamily is the AMD family whose value passes fetch ahead into the L2.
const attnL2AheadFamily = 0x19

func newAVX512AttnKernels(name string, toL2 func() bool) *attnKernels {
	return &attnKernels{
		name: name,
		scores: func(q []float32, nq, D int, k []float32, kStride, nk int, s []float32) {
			checkAttn(nq, D, nk, len(q) >= nq*D && len(k) >= (nk-1)*kStride+D && len(s) >= nk*nq)
			attnScoresAVX512(&q[0], nq, D, &k[0], kStride, nk, &s[0])
		},
		accum: func(p []float32, nq, D int, v []float32, vStride, nk int, o []float32, ahead attnAhead) {
			checkAttn(nq, D, nk, len(p) >= nk*nq && len(v) >= (nk-1)*vStride+D && len(o) >= nq*D)
			if D%32 != 0 {
				burstAhead(unsafe.Pointer(&v[0]), vStride*4, nk, D*4, ahead)
				attnAccumAVX2(&p[0], nq, D, &v[0], vStride, nk, &o[0])
				return
			}
			attnAccumAVX512(&p[0], nq, D, &v[0], vStride, nk, &o[0], ahead.k, ahead.v, toL2())
		},
		rowMax:   avx2AttnKernels.rowMax,
		exp2Sum:  exp2SumAVX512,
		prefetch: avx2AttnKernels.prefetch,
		scoresBF16: func(q []float32, nq, D int, k []uint16, kStride, nk int, s []float32) {
			checkAttn(nq, D, nk, len(q) >= nq*D && len(k) >= (nk-1)*kStride+D && len(s) >= nk*nq)
			attnScoresBF16AVX512(&q[0], nq, D, &k[0], kStride, nk, &s[0])
		},
		accumBF16: func(p []float32, nq, D int, v []uint16, vStride, nk int, o []float32, ahead attnAhead) {
			checkAttn(nq, D, nk, len(p) >= nk*nq && len(v) >= (nk-1)*vStride+D && len(o) >= nq*D)
			if D%32 != 0 {
				burstAhead(unsafe.Pointer(&v[0]), vStride*2, nk, D*2, ahead)
				attnAccumBF16AVX2(&p[0], nq, D, &v[0], vStride, nk, &o[0])
				return
			}
			attnAccumBF16AVX512(&p[0], nq, D, &v[0], vStride, nk, &o[0], ahead.k, ahead.v, toL2())
		},
		fetchesAhead: true,
	}
}

// burstAhead asks for ahead's rows (n rows of rowBytes, stride bytes apart, at their
// distances from v) in one burst: the AVX-512 set's value passes over head dims the
// 512-bit kernels do not take, which run the AVX2 kernels (they fetch nothing).
func burstAhead(v unsafe.Pointer, stride, n, rowBytes int, ahead attnAhead) {
	for _, d := range []int{ahead.k, ahead.v} {
		if d != 0 {
			// An address, not a pointer: the rows are another allocation's (the keys')
			// or past this slice, and a hint only names them.
			attnPrefetchRows(uintptr(v)+uintptr(d), stride/4, n, rowBytes/4)
		}
	}
}

// newAVX512DotAttnKernels is the AVX-512 set with a bf16 cache's products in bf16 pairs
// (VDPBF16PS) for head dims that are multiples of 32: "avx512bf16", on machines with
// AVX512_BF16 (AMD Zen 4 and later, Intel Cooper Lake and Sapphire Rapids and later). Its
// float32 cache kernels are the "avx512" set's.
func newAVX512DotAttnKernels() *attnKernels {
	k := *newAVX512AttnKernels("avx512bf16", func() bool { return attnAheadToL2 })
	k.scoresDot = func(q []uint16, nq, D int, kr []uint16, kStride, nk int, s []float32) {
		checkAttn(nq, 32, nk, D%32 == 0 && len(q) >= nq*D && len(kr) >= (nk-1)*kStride+D && len(s) >= nk*nq)
		attnScoresDotAVX512(&q[0], nq, D, &kr[0], kStride, nk, &s[0])
	}
	k.pairProbs = func(p []float32, nq, nk int, pp []uint32) {
		checkAttn(nq, 16, nk, len(p) >= nk*nq && len(pp) >= (nk+1)/2*nq)
		attnPairProbsAVX512(&p[0], nq, nk, &pp[0])
	}
	k.accumDot = func(pp []uint32, nq, D int, v []uint16, vStride, nk int, o []float32, ahead attnAhead) {
		checkAttn(nq, 32, nk, D%32 == 0 && len(pp) >= (nk+1)/2*nq && len(v) >= (nk-1)*vStride+D && len(o) >= nq*D)
		attnAccumDotAVX512(&pp[0], nq, D, &v[0], vStride, nk, &o[0], ahead.k, ahead.v, attnAheadToL2)
	}
	return &k
}

func checkAttn(nq, D, nk int, lengthsOK bool) {
	if nq <= 0 || nq%8 != 0 || D <= 0 || D%16 != 0 || nk <= 0 || !lengthsOK {
		panic("ops: attention kernel called with a bad shape or a short slice")
	}
}

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		attnFast = avx2AttnKernels
		attnKernelSets = append(attnKernelSets, avx2AttnKernels)
		if cpu.X86.HasAVX512F {
			// "avx512", the last, is the default. "avx512bf16" is asked for by name: over
			// a bf16 cache it rounds the queries and probabilities to bf16 as well, and
			// the CPU backend's default is what the other backends' kernels are checked
			// against (ops/kernels/emu holds their bf16-cache attention to 2e-5 of it).
			attnFast = avx512AttnKernels
			attnKernelSets = append(attnKernelSets, avx512L1AttnKernels)
			if cpu.X86.HasAVX512BF16 && cpu.X86.HasAVX512BW {
				attnKernelSets = append(attnKernelSets, newAVX512DotAttnKernels())
			}
			attnKernelSets = append(attnKernelSets, avx512AttnKernels)
			attnAheadToL2 = amdFamily() == attnL2AheadFamily
		}
	}
}
