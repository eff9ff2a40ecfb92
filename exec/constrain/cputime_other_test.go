//go:build !linux

package constrain

// threadCPU is not measured off Linux (the benchmark then reports wall time only).
func threadCPU() int64 { return 0 }
