//go:build !amd64

package bench

const readKernel = "go"

func readSum(b []uint64) uint64 { return readSumGo(b) }
