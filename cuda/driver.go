//go:build linux

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The CUDA driver API through purego: the entry points are resolved by their ABI names
// (cuda.h #defines cuMemAlloc to cuMemAlloc_v2 and so on; the bare legacy names keep
// the old ABI, 32-bit sizes included), once, in load. A CUresult is a C enum (int32);
// handles are pointers (uintptr); device addresses are uint64.
type driverAPI struct {
	cuInit                      func(flags uint32) int32
	cuDriverGetVersion          func(v *int32) int32
	cuDeviceGetCount            func(n *int32) int32
	cuDeviceGet                 func(dev *int32, ordinal int32) int32
	cuDeviceGetName             func(name *byte, n int32, dev int32) int32
	cuDeviceGetAttribute        func(v *int32, attr int32, dev int32) int32
	cuDeviceTotalMem            func(bytes *uint64, dev int32) int32
	cuDevicePrimaryCtxRetain    func(ctx *uintptr, dev int32) int32
	cuCtxSetCurrent             func(ctx uintptr) int32
	cuCtxSynchronize            func() int32
	cuMemAlloc                  func(p *uint64, n uint64) int32
	cuMemFree                   func(p uint64) int32
	cuMemGetInfo                func(free, total *uint64) int32
	cuMemAllocHost              func(p *unsafe.Pointer, n uint64) int32
	cuMemFreeHost               func(p unsafe.Pointer) int32
	cuMemcpyHtoD                func(dst uint64, src unsafe.Pointer, n uint64) int32
	cuMemcpyDtoH                func(dst unsafe.Pointer, src uint64, n uint64) int32
	cuMemcpyHtoDAsync           func(dst uint64, src unsafe.Pointer, n uint64, stream uintptr) int32
	cuMemcpyDtoDAsync           func(dst, src uint64, n uint64, stream uintptr) int32
	cuMemcpyDtoHAsync           func(dst unsafe.Pointer, src uint64, n uint64, stream uintptr) int32
	cuMemsetD8                  func(dst uint64, v uint8, n uint64) int32
	cuMemsetD8Async             func(dst uint64, v uint8, n uint64, stream uintptr) int32
	cuStreamCreate              func(s *uintptr, flags uint32) int32
	cuStreamSynchronize         func(s uintptr) int32
	cuModuleLoadData            func(m *uintptr, image unsafe.Pointer) int32
	cuModuleGetFunction         func(f *uintptr, m uintptr, name string) int32
	cuFuncSetAttribute          func(f uintptr, attr int32, v int32) int32
	cuLaunchKernel              func(f uintptr, gx, gy, gz, bx, by, bz, smem uint32, stream uintptr, params unsafe.Pointer, extra unsafe.Pointer) int32
	cuGraphCreate               func(g *uintptr, flags uint32) int32
	cuGraphAddKernelNode        func(node *uintptr, g uintptr, deps unsafe.Pointer, ndeps uintptr, params *kernelNodeParams) int32
	cuGraphInstantiateWithFlags func(exec *uintptr, g uintptr, flags uint64) int32
	cuGraphLaunch               func(exec uintptr, stream uintptr) int32
	cuGraphExecDestroy          func(exec uintptr) int32
	cuGraphDestroy              func(g uintptr) int32
	cuGraphGetNodes             func(g uintptr, nodes *uintptr, n *uintptr) int32
	// cuGraphAddDependencies_v2 (CUDA 12.3+) adds edges with edge data (programmatic
	// dependencies); nil where the driver lacks it.
	cuGraphAddDependencies func(g uintptr, from, to, edgeData unsafe.Pointer, n uintptr) int32
	cuEventCreate          func(e *uintptr, flags uint32) int32
	cuEventRecord          func(e uintptr, stream uintptr) int32
	cuEventSynchronize     func(e uintptr) int32
	cuEventElapsedTime     func(ms *float32, start, end uintptr) int32
	cuGetErrorString       func(res int32, s **byte) int32
}

// kernelNodeParams is CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h): the v1 struct is its first 56
// bytes, so the same value serves the v1 entry point where _v2 is missing.
type kernelNodeParams struct {
	fn                     uintptr
	gridX, gridY, gridZ    uint32
	blockX, blockY, blockZ uint32
	sharedMemBytes         uint32
	kernelParams           unsafe.Pointer
	extra                  unsafe.Pointer
	kern                   uintptr
	ctx                    uintptr
}

// Driver attributes and flags used here (cuda.h values).
const (
	attrComputeMajor         = 75
	attrComputeMinor         = 76
	attrMultiprocessors      = 16
	attrMaxGroupMemoryOptIn  = 97 // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
	attrMaxSharedPerBlockOpt = 97
	funcAttrMaxDynamicShared = 8
	streamNonBlocking        = 1
	errStubLibrary           = 34
)

var (
	drvOnce sync.Once
	drv     *driverAPI
	drvErr  error
)

// loadDriver dlopens libcuda and resolves every entry point, once per process. Its error
// says "CUDA not available: ..." so that a machine without the driver gets a plain
// diagnostic instead of a crash.
func loadDriver() (*driverAPI, error) {
	drvOnce.Do(func() {
		lib, path, err := openLibrary("PISTIL_LIBCUDA", []string{"libcuda.so.1", "libcuda.so"}, "libcuda.so.1")
		if err != nil {
			drvErr = fmt.Errorf("CUDA not available: %w", err)
			return
		}
		d := &driverAPI{}
		syms := []struct {
			fn    any
			names []string
		}{
			{&d.cuInit, []string{"cuInit"}},
			{&d.cuDriverGetVersion, []string{"cuDriverGetVersion"}},
			{&d.cuDeviceGetCount, []string{"cuDeviceGetCount"}},
			{&d.cuDeviceGet, []string{"cuDeviceGet"}},
			{&d.cuDeviceGetName, []string{"cuDeviceGetName"}},
			{&d.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
			{&d.cuDeviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
			{&d.cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
			{&d.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
			{&d.cuCtxSynchronize, []string{"cuCtxSynchronize"}},
			{&d.cuMemAlloc, []string{"cuMemAlloc_v2"}},
			{&d.cuMemFree, []string{"cuMemFree_v2"}},
			{&d.cuMemGetInfo, []string{"cuMemGetInfo_v2"}},
			{&d.cuMemAllocHost, []string{"cuMemAllocHost_v2"}},
			{&d.cuMemFreeHost, []string{"cuMemFreeHost"}},
			{&d.cuMemcpyHtoD, []string{"cuMemcpyHtoD_v2"}},
			{&d.cuMemcpyDtoH, []string{"cuMemcpyDtoH_v2"}},
			{&d.cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
			{&d.cuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}},
			{&d.cuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
			{&d.cuMemsetD8, []string{"cuMemsetD8_v2"}},
			{&d.cuMemsetD8Async, []string{"cuMemsetD8Async"}},
			{&d.cuStreamCreate, []string{"cuStreamCreate"}},
			{&d.cuStreamSynchronize, []string{"cuStreamSynchronize"}},
			{&d.cuModuleLoadData, []string{"cuModuleLoadData"}},
			{&d.cuModuleGetFunction, []string{"cuModuleGetFunction"}},
			{&d.cuFuncSetAttribute, []string{"cuFuncSetAttribute"}},
			{&d.cuLaunchKernel, []string{"cuLaunchKernel"}},
			{&d.cuGraphCreate, []string{"cuGraphCreate"}},
			{&d.cuGraphAddKernelNode, []string{"cuGraphAddKernelNode_v2", "cuGraphAddKernelNode"}},
			{&d.cuGraphInstantiateWithFlags, []string{"cuGraphInstantiateWithFlags"}},
			{&d.cuGraphLaunch, []string{"cuGraphLaunch"}},
			{&d.cuGraphExecDestroy, []string{"cuGraphExecDestroy"}},
			{&d.cuGraphDestroy, []string{"cuGraphDestroy"}},
			{&d.cuGraphGetNodes, []string{"cuGraphGetNodes"}},
			{&d.cuEventCreate, []string{"cuEventCreate"}},
			{&d.cuEventRecord, []string{"cuEventRecord"}},
			{&d.cuEventSynchronize, []string{"cuEventSynchronize"}},
			{&d.cuEventElapsedTime, []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}},
			{&d.cuGetErrorString, []string{"cuGetErrorString"}},
		}
		for _, s := range syms {
			if err := bind(lib, s.fn, s.names); err != nil {
				drvErr = fmt.Errorf("CUDA not available: %s: %w", path, err)
				return
			}
		}
		if bind(lib, &d.cuGraphAddDependencies, []string{"cuGraphAddDependencies_v2"}) != nil {
			d.cuGraphAddDependencies = nil // an older driver: full dependencies only
		}
		if r := d.cuInit(0); r != 0 {
			hint := ""
			if r == errStubLibrary {
				hint = " (the toolkit's stub libcuda was loaded instead of the driver's)"
			}
			drvErr = fmt.Errorf("CUDA not available: cuInit: %s%s", d.errString(r), hint)
			return
		}
		drv = d
	})
	return drv, drvErr
}

// bind resolves the first of names that the library exports into fn (a pointer to a
// func variable).
func bind(lib uintptr, fn any, names []string) error {
	for _, n := range names {
		sym, err := purego.Dlsym(lib, n)
		if err == nil && sym != 0 {
			purego.RegisterFunc(fn, sym)
			return nil
		}
	}
	return fmt.Errorf("missing symbol %s", names[0])
}

// errString names a CUresult.
func (d *driverAPI) errString(r int32) string {
	var s *byte
	if d.cuGetErrorString != nil && d.cuGetErrorString(r, &s) == 0 && s != nil {
		return fmt.Sprintf("%s (%d)", cString(s), r)
	}
	return fmt.Sprintf("CUresult %d", r)
}

// check turns a CUresult into an error naming the call.
func (d *driverAPI) check(what string, r int32) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", what, d.errString(r))
}

func cString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

// openLibrary dlopens the first loadable candidate: the path in the environment
// variable env, the bare sonames (the loader's search path), then the usual install
// folders. Paths under a toolkit's stubs/ folder are skipped: a stub libcuda fails cuInit.
func openLibrary(env string, sonames []string, fileName string) (uintptr, string, error) {
	var tried []string
	try := func(p string) (uintptr, bool) {
		if p == "" || filepath.Base(filepath.Dir(p)) == "stubs" {
			return 0, false
		}
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			tried = append(tried, err.Error())
			return 0, false
		}
		return h, true
	}
	if p := os.Getenv(env); p != "" {
		if h, ok := try(p); ok {
			return h, p, nil
		}
	}
	for _, n := range sonames {
		if h, ok := try(n); ok {
			return h, n, nil
		}
	}
	for _, dir := range libraryDirs() {
		p := filepath.Join(dir, fileName)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if h, ok := try(p); ok {
			return h, p, nil
		}
	}
	if len(tried) > 3 {
		tried = tried[:3]
	}
	return 0, "", fmt.Errorf("cannot load %s (set %s to its path): %v", sonames[0], env, tried)
}

// libraryDirs are the folders searched after the loader's path.
func libraryDirs() []string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		dirs = append(dirs, d)
	}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if h := os.Getenv(v); h != "" {
			dirs = append(dirs, filepath.Join(h, "lib64"), filepath.Join(h, "lib"))
		}
	}
	dirs = append(dirs, "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/local/cuda/lib64",
		"/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/targets/sbsa-linux/lib")
	versioned, _ := filepath.Glob("/usr/local/cuda-*/lib64")
	sort.Sort(sort.Reverse(sort.StringSlice(versioned)))
	dirs = append(dirs, versioned...)
	dirs = append(dirs, "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib")
	// Python wheels (nvidia-cuda-nvrtc) put the libraries under site-packages.
	for _, pat := range []string{"/usr/local/lib/python3*/dist-packages/nvidia/*/lib", "/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib",
		"/usr/lib/python3*/site-packages/nvidia/*/lib", "/usr/local/lib/python3*/site-packages/nvidia/*/lib"} {
		m, _ := filepath.Glob(pat)
		dirs = append(dirs, m...)
	}
	return dirs
}
