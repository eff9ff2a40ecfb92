//go:build !unix

package ops

func processCPU() int64 { return 0 }
