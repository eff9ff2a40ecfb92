//go:build linux

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// NVRTC compiles the kernel source at Load for the device's own sm_XY, so no toolkit is
// needed at build time and the CUBIN skips the driver's PTX JIT.
type nvrtcAPI struct {
	version        func(major, minor *int32) int32
	createProgram  func(prog *uintptr, src string, name string, nHeaders int32, headers, includeNames unsafe.Pointer) int32
	compileProgram func(prog uintptr, nOpts int32, opts unsafe.Pointer) int32
	getLogSize     func(prog uintptr, n *uint64) int32
	getLog         func(prog uintptr, log *byte) int32
	getCUBINSize   func(prog uintptr, n *uint64) int32
	getCUBIN       func(prog uintptr, out *byte) int32
	destroyProgram func(prog *uintptr) int32
	getErrorString func(r int32) *byte
}

var (
	nvrtcOnce sync.Once
	nvrtc     *nvrtcAPI
	nvrtcErr  error
)

func loadNVRTC() (*nvrtcAPI, error) {
	nvrtcOnce.Do(func() {
		lib, err := openNVRTC()
		if err != nil {
			nvrtcErr = fmt.Errorf("CUDA not available: NVRTC: %w", err)
			return
		}
		n := &nvrtcAPI{}
		syms := []struct {
			fn   any
			name string
		}{
			{&n.version, "nvrtcVersion"},
			{&n.createProgram, "nvrtcCreateProgram"},
			{&n.compileProgram, "nvrtcCompileProgram"},
			{&n.getLogSize, "nvrtcGetProgramLogSize"},
			{&n.getLog, "nvrtcGetProgramLog"},
			{&n.getCUBINSize, "nvrtcGetCUBINSize"},
			{&n.getCUBIN, "nvrtcGetCUBIN"},
			{&n.destroyProgram, "nvrtcDestroyProgram"},
			{&n.getErrorString, "nvrtcGetErrorString"},
		}
		for _, s := range syms {
			if err := bind(lib, s.fn, []string{s.name}); err != nil {
				nvrtcErr = fmt.Errorf("CUDA not available: NVRTC: %w", err)
				return
			}
		}
		nvrtc = n
	})
	return nvrtc, nvrtcErr
}

// openNVRTC finds libnvrtc. When it loads one by path, it first loads the
// libnvrtc-builtins of the same folder: NVRTC dlopens that by soname at compile time, and
// pip wheels' libnvrtc has no RUNPATH to find it.
func openNVRTC() (uintptr, error) {
	if p := os.Getenv("PISTIL_LIBNVRTC"); p != "" {
		return openWithBuiltins(p)
	}
	var errs []string
	for _, n := range []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"} {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, nil
		}
		errs = append(errs, err.Error())
	}
	for _, dir := range libraryDirs() {
		for _, n := range []string{"libnvrtc.so.13", "libnvrtc.so.12"} {
			p := filepath.Join(dir, n)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			h, err := openWithBuiltins(p)
			if err == nil {
				return h, nil
			}
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 3 {
		errs = errs[:3]
	}
	return 0, fmt.Errorf("cannot load libnvrtc.so.13 or .12 (set PISTIL_LIBNVRTC to its path): %s", strings.Join(errs, "; "))
}

func openWithBuiltins(p string) (uintptr, error) {
	builtins, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "libnvrtc-builtins.so.*"))
	for _, b := range builtins {
		if _, err := purego.Dlopen(b, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			break
		}
	}
	return purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// compile builds src into a CUBIN for sm_<arch>. A failure returns NVRTC's log, which
// names the line and the error.
func (n *nvrtcAPI) compile(src, name string, arch int, extra []string) ([]byte, string, error) {
	var prog uintptr
	if r := n.createProgram(&prog, src, name, 0, nil, nil); r != 0 {
		return nil, "", fmt.Errorf("nvrtcCreateProgram: %s", cString(n.getErrorString(r)))
	}
	defer n.destroyProgram(&prog)
	opts := append([]string{fmt.Sprintf("--gpu-architecture=sm_%d", arch), "--std=c++17", "-lineinfo"}, extra...)
	cOpts := make([][]byte, len(opts))
	ptrs := make([]*byte, len(opts))
	for i, o := range opts {
		cOpts[i] = append([]byte(o), 0)
		ptrs[i] = &cOpts[i][0]
	}
	r := n.compileProgram(prog, int32(len(ptrs)), unsafe.Pointer(&ptrs[0]))
	var logSize uint64
	log := ""
	if n.getLogSize(prog, &logSize) == 0 && logSize > 1 {
		buf := make([]byte, logSize)
		if n.getLog(prog, &buf[0]) == 0 {
			log = strings.TrimRight(string(buf), "\x00")
		}
	}
	if r != 0 {
		return nil, log, fmt.Errorf("nvrtc: compile %s for sm_%d: %s\n%s", name, arch, cString(n.getErrorString(r)), log)
	}
	var size uint64
	if r := n.getCUBINSize(prog, &size); r != 0 || size == 0 {
		return nil, log, fmt.Errorf("nvrtcGetCUBINSize: %s", cString(n.getErrorString(r)))
	}
	cubin := make([]byte, size)
	if r := n.getCUBIN(prog, &cubin[0]); r != 0 {
		return nil, log, fmt.Errorf("nvrtcGetCUBIN: %s", cString(n.getErrorString(r)))
	}
	return cubin, log, nil
}
