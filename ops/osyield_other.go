//go:build !linux

package ops

// osYield does nothing off Linux: the pool's spins spin.
func osYield() {}
