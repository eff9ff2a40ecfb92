package bench

import "golang.org/x/sys/cpu"

// readSumAVX2 ORs together every 32-byte lane of n 512-byte lines starting at p (AVX2
// loads, eight per line, four independent chains).
//
//go:noescape
func readSumAVX2(p *uint64, lines int) uint64

var readKernel = "go"

func init() {
	if cpu.X86.HasAVX2 {
		readKernel = "avx2"
	}
}

func readSum(b []uint64) uint64 {
	lines := len(b) / 64
	if readKernel != "avx2" || lines == 0 {
		return readSumGo(b)
	}
	return readSumAVX2(&b[0], lines)
}
