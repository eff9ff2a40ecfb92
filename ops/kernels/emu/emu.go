// Package emu runs the Metal translation of pistil's kernels on the CPU, under an
// emulation of Metal's execution model, so that they can be tested on machines without
// a Mac: every thread of a threadgroup is its own execution context (stack and
// registers), barriers really block until the whole group arrives, 32-lane SIMD groups
// exchange values through simd_sum/max/shuffle/shuffle_xor, and threadgroup memory is
// shared by the group. One thread runs at a time, switching only at barriers and SIMD
// operations in a fixed order, so races and divergent barriers fail the same way on
// every run (emu_runtime.h says how).
//
// Build compiles an MSL source (kernels.MetalSource, or a deliberately broken variant)
// with the MSL model header (kernels.MSLModel, PZ_EMU mode) and the emulator's runtime
// into a host program with clang++; Machine.Run sends it a memory image and a list of
// launches and reads the memory back.
//
// What it cannot show: real Apple-GPU scheduling (concurrent threadgroups, memory
// ordering between them), fast-math behaviour, the hardware's reduction order in
// simd_sum, pipeline-creation limits.
package emu

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unsafe"

	"pistil/ops/kernels"
)

var (
	//go:embed emu_runtime.h
	runtimeHeader string
	//go:embed emu_builtins.h
	builtinsHeader string
	//go:embed emu_main.h
	mainHeader string
)

// Base is the device address of byte 0 of a Memory: the emulator maps its memory there.
const Base uint64 = 1 << 44

// Machine is a compiled emulator of one MSL source.
type Machine struct {
	bin     string
	kernels map[string]bool
}

// Available says whether clang++, which Build needs, is installed.
func Available() error {
	if _, err := exec.LookPath("clang++"); err != nil {
		return errors.New("clang++ is not installed (apt-get install clang)")
	}
	return nil
}

var kernelDecl = regexp.MustCompile(`KERNEL(?:_BOUNDED|_EARLY)?\(([a-z0-9_]+),\s*([A-Za-z0-9_]+)`)

// Build compiles the emulator of an MSL source. The binary is cached by the hash of
// everything that goes into it, so a test run recompiles only what changed.
func Build(src string) (*Machine, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	var tu strings.Builder
	tu.WriteString("#include \"emu_runtime.h\"\n#define PZ_EMU 1\n#include \"msl_model.h\"\n#line 1 \"pistil.metal\"\n")
	tu.WriteString(src)
	tu.WriteString("\n#undef device\n#undef threadgroup\n#undef constant\n#undef thread\n#undef kernel\n#include \"emu_main.h\"\n")
	tu.WriteString("static const pz_emu::Entry pz_entries[] = {\n")
	m := &Machine{kernels: map[string]bool{}}
	for _, d := range kernelDecl.FindAllStringSubmatch(src, -1) {
		name, args := d[1], d[2]
		if args == "Args" {
			continue // the prelude's own #define KERNEL(name, Args)
		}
		m.kernels[name] = true
		fmt.Fprintf(&tu, "\t{\"%s\", sizeof(%s), [](const void* a, uint3 g, uint3 ng, uint t, uint ts, uint l, uint s, uint ns) { %s(*(const %s*)a, g, ng, t, ts, l, s, ns); }},\n",
			name, args, name, args)
	}
	tu.WriteString("};\nint main() { return pz_emu::host_main(pz_entries, sizeof pz_entries / sizeof pz_entries[0]); }\n")
	files := map[string]string{"emu.cc": tu.String(), "emu_runtime.h": runtimeHeader, "emu_builtins.h": builtinsHeader,
		"emu_main.h": mainHeader, "msl_model.h": kernels.MSLModel()}
	flags := []string{"-std=c++20", "-O0", "-pthread", "-fno-strict-aliasing", "-Wno-unknown-attributes", "-Wno-unused-value"}
	h := sha256.New()
	for _, name := range []string{"emu.cc", "emu_runtime.h", "emu_builtins.h", "emu_main.h", "msl_model.h"} {
		fmt.Fprintf(h, "%s\x00%s\x00", name, files[name])
	}
	fmt.Fprint(h, strings.Join(flags, " "))
	key := hex.EncodeToString(h.Sum(nil))[:24]
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "pistil-emu", key)
	m.bin = filepath.Join(dir, "emu")
	if _, err := os.Stat(m.bin); err == nil {
		return m, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return nil, err
		}
	}
	tmp := fmt.Sprintf("%s.%d.tmp", m.bin, os.Getpid())
	cmd := exec.Command("clang++", append(flags, "-o", tmp, filepath.Join(dir, "emu.cc"))...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compiling the emulator: %v\n%s", err, out)
	}
	return m, os.Rename(tmp, m.bin)
}

// Memory is the emulated device memory: a byte image whose byte i is at device address
// Base + i.
type Memory struct{ data []byte }

// Alloc reserves n bytes, 256-byte aligned (Metal's buffer offsets for the wide loads
// need 16), filled with fill, and returns their device address.
func (m *Memory) Alloc(n int, fill byte) uint64 {
	off := (len(m.data) + 255) / 256 * 256
	grow := make([]byte, off+n-len(m.data))
	for i := off - len(m.data); i < len(grow); i++ {
		grow[i] = fill
	}
	m.data = append(m.data, grow...)
	return Base + uint64(off)
}

// Put copies b into fresh memory and returns its address.
func (m *Memory) Put(b []byte) uint64 {
	a := m.Alloc(len(b), 0)
	copy(m.Bytes(a, len(b)), b)
	return a
}

// Bytes is the n bytes at device address addr (aliasing the image until the next Alloc).
func (m *Memory) Bytes(addr uint64, n int) []byte {
	off := int(addr - Base)
	return m.data[off : off+n]
}

// Launch is one dispatch: a kernel, its grid of threadgroups, threads per group and its
// args struct (one of package kernels' args types, sent as its Go bytes: the layouts
// are tested equal), or those bytes already laid out.
type Launch struct {
	Kernel  string
	Grid    [3]int
	Threads int
	Args    any
}

// Options of a run. Reverse runs the threads of a group in descending order between
// synchronisation points (ascending by default), which exposes the races a fixed order
// hides (a reader ahead of its writer in one order is behind it in the other).
type Options struct {
	Reverse bool
	Timeout time.Duration
}

// Run executes the launches in order on mem and writes the result into mem's image.
// An emulator-detected fault (divergent barrier, deadlock, a bad launch) is an error
// that names the kernel, the group and the source line.
func (m *Machine) Run(mem *Memory, launches []Launch, opt Options) error {
	var job bytes.Buffer
	le := binary.LittleEndian
	put64 := func(v uint64) { job.Write(le.AppendUint64(nil, v)) }
	put32 := func(v uint32) { job.Write(le.AppendUint32(nil, v)) }
	put64(0x31554d455a50)
	if opt.Reverse {
		put32(1)
	} else {
		put32(0)
	}
	put64(uint64(len(mem.data)))
	job.Write(mem.data)
	put32(uint32(len(launches)))
	for i, l := range launches {
		if !m.kernels[l.Kernel] {
			return fmt.Errorf("launch %d: the source has no kernel %q", i, l.Kernel)
		}
		args, err := argBytes(l.Args)
		if err != nil {
			return fmt.Errorf("launch %d (%s): %w", i, l.Kernel, err)
		}
		put32(uint32(len(l.Kernel)))
		job.WriteString(l.Kernel)
		for _, g := range l.Grid {
			if g < 1 {
				return fmt.Errorf("launch %d (%s): grid %v", i, l.Kernel, l.Grid)
			}
			put32(uint32(g))
		}
		put32(uint32(l.Threads))
		put32(uint32(len(args)))
		job.Write(args)
	}
	timeout := opt.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.bin)
	cmd.Stdin = &job
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if os.Getenv("PISTIL_EMU_TRACE") != "" {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("emulator ran past %v (a kernel that never ends?)", timeout)
		}
		return fmt.Errorf("%s(%v)", stderr.String(), err)
	}
	if out.Len() != len(mem.data) {
		return fmt.Errorf("emulator returned %d bytes of memory, want %d", out.Len(), len(mem.data))
	}
	copy(mem.data, out.Bytes()) // in place: slices of the image stay valid
	return nil
}

// argBytes is an args struct's memory as Go lays it out (zeroed padding).
func argBytes(a any) ([]byte, error) {
	v := reflect.ValueOf(a)
	if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
		return v.Bytes(), nil // already laid out (a backend's encoded args)
	}
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("args of type %T: want a struct or its bytes", a)
	}
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	return bytes.Clone(unsafe.Slice((*byte)(p.UnsafePointer()), v.Type().Size())), nil
}
