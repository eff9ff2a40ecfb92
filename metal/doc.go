// Package metal is the Apple-GPU backend: Metal driven through purego and its objc
// package (no cgo), on macOS with Apple silicon.
//
// What is portable, and tested on Linux: the planning of weight views (views.go: no-copy
// buffers over an mmap'd file, 16 KiB aligned, overlapping where a file exceeds
// maxBufferLength so every tensor lies whole in one view) and the encoder (encoder.go),
// which turns a plan into one compute encoder per step with barriers exactly at the
// plan's group boundaries, per-step scalars in a step buffer, and two command buffers in
// flight; it talks to Metal only through the small API interface, so a recording fake
// drives it on Linux. The darwin files implement that interface with real Metal calls.
//
// Nothing in this package has run on Apple hardware yet; `pistil selftest metal` is how
// a Mac user checks it (README, Metal section).
package metal

import "errors"

// ErrUnavailable is what asking for the backend answers away from a Mac with Apple silicon.
var ErrUnavailable = errors.New("Metal is available only on macOS on Apple silicon")
