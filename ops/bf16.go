package ops

// bf16ToF32Row widens src into dst (len(dst) >= len(src)): every value exactly, as
// BF16ToF32 does one at a time, with the vector kernel where the machine has one (the
// bf16 KV cache's rows are widened this way for every key block of attention).
func bf16ToF32Row(dst []float32, src []uint16) {
	done := 0
	if bf16ToF32Fast != nil {
		done = bf16ToF32Fast(dst, src)
	}
	for i := done; i < len(src); i++ {
		dst[i] = BF16ToF32(src[i])
	}
}

// bf16ToF32Fast widens a leading part of src into dst and returns its length; nil where
// there is no vector kernel.
var bf16ToF32Fast func(dst []float32, src []uint16) int
