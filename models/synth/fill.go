package synth

import (
	"encoding/binary"
	"math"
	"math/bits"

	"pistil/models/safetensors"
	"pistil/ops"
)

// rng is wyrand: one multiply per 64 random bits, so filling ~19.5 GB is bounded by the
// disk rather than the generator. Each chunk gets its own stream derived from (seed,
// tensor, chunk), so chunks are generated in parallel and the output is still a pure
// function of the seed.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(r.s, r.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// mix is splitmix64's finaliser over a combination of keys.
func mix(keys ...uint64) uint64 {
	var z uint64
	for _, k := range keys {
		z = hash(z ^ k)
	}
	return z
}

// hash is one splitmix64 step.
func hash(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// unit maps 24 random bits to [0, 1).
func unit(x uint64) float32 { return float32(x&(1<<24-1)) / (1 << 24) }

// codeStd is the standard deviation of a uniformly random b-bit code.
func codeStd(b int) float64 {
	levels := math.Exp2(float64(b))
	return math.Sqrt((levels*levels - 1) / 12)
}

// groupScale is the scale of quantization group g of a module: the std the weights should
// have, divided by the codes' std, jittered per group and given a random sign (MLX scales
// may be negative, model-spec §4). Scales and biases both derive from it, so they agree.
// key is mix(seed, p.seed) and base is p.std/codeStd(p.bits), hoisted out of the loop.
func groupScale(key uint64, base float32, g int64) float32 {
	h := hash(key ^ uint64(g))
	s := base * (0.75 + 0.5*unit(h>>8))
	if h&1 == 1 {
		s = -s
	}
	return ops.BF16ToF32(ops.F32ToBF16(s))
}

// fill writes the bytes [off, off+len(buf)) of tensor p. off and len(buf) are multiples of
// the element size.
func fill(p *tensorPlan, seed uint64, chunk int, off int64, buf []byte) {
	r := rng{s: mix(seed, p.seed, uint64(chunk), uint64(p.content))}
	size := p.spec.DType.Size()
	first := off / int64(size)
	switch p.content {
	case codes:
		i := 0
		for ; i+8 <= len(buf); i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], r.next())
		}
		for x := r.next(); i < len(buf); i++ {
			buf[i] = byte(x)
			x >>= 8
		}
	case scales, biases:
		key, base := mix(seed, p.seed), float32(p.std/codeStd(p.bits))
		mid, mean := float32(math.Exp2(float64(p.bits))-1)/2, float32(p.mean)
		for i := 0; i < len(buf)/2; i++ {
			var v float32 // a padding row dequantizes to exactly zero
			if !p.padding(first + int64(i)) {
				v = groupScale(key, base, first+int64(i))
				if p.content == biases {
					v = mean - v*mid
				}
			}
			binary.LittleEndian.PutUint16(buf[2*i:], ops.F32ToBF16(v))
		}
	case aLogValues:
		for i := 0; i < len(buf)/size; i++ {
			put(buf[i*size:], p.spec.DType, float32(math.Log(1+15*float64(unit(r.next())))))
		}
	default:
		// Uniform on [mean-half, mean+half] has std half/sqrt(3); two values per draw.
		half, mean := float32(p.std*math.Sqrt(3)), float32(p.mean)
		n := len(buf) / size
		for i := 0; i < n; i += 2 {
			x := r.next()
			put(buf[i*size:], p.spec.DType, mean+half*(2*unit(x)-1))
			if i+1 < n {
				put(buf[(i+1)*size:], p.spec.DType, mean+half*(2*unit(x>>32)-1))
			}
		}
		if p.liveRows > 0 {
			for i := 0; i < n; i++ {
				if p.padding(first + int64(i)) {
					put(buf[i*size:], p.spec.DType, 0)
				}
			}
		}
	}
}

// padding reports whether element i of the tensor lies in a zeroed row (see liveRows).
func (p *tensorPlan) padding(i int64) bool {
	return p.liveRows > 0 && i/int64(p.spec.Shape[len(p.spec.Shape)-1]) >= int64(p.liveRows)
}

func put(b []byte, dt safetensors.DType, v float32) {
	switch dt {
	case safetensors.F32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	default: // BF16: the only other dense dtype synth writes
		binary.LittleEndian.PutUint16(b, ops.F32ToBF16(v))
	}
}
