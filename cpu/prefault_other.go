//go:build !linux

package cpu

// prefault does nothing off Linux (no MADV_POPULATE_READ): pages fault in on first touch.
func prefault(b []byte) {}
