//go:build linux

package cuda

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"pistil/ops/kernels"
)

// device is GPU 0 with its primary context, one non-blocking stream and the kernel
// module compiled for its architecture. It is shared by every backend instance of the
// process (the context, the module and the weights' device memory belong to it).
type device struct {
	d       *driverAPI
	ctx     uintptr
	ordinal int32
	name    string
	arch    int // compute capability as 10*major+minor
	sms     int
	// groupMemoryLimit is the most group memory a kernel may opt in to (bytes; 232,448 on
	// the H100 and H200): which dynamic size kernels.DynamicGroupMemory picks.
	groupMemoryLimit int
	// groupMemoryShort are the CUDA-only kernels whose dynamic group memory is more than
	// groupMemoryLimit (a GPU with 99 KB a group: sm_86 and sm_89 cards), with the bytes
	// each needs: the module loads without them, and a plan that names one is refused.
	groupMemoryShort map[string]int
	stream           uintptr
	module           uintptr
	funcs            map[string]uintptr // the default module's: early loads on, tuning macros at their defaults
	// variants are the modules compiled with other options, by their -D options joined:
	// PZ_LATE_LOADS (every kernel waits for the kernels before it at entry: pipeline.toml
	// [cuda] early_loads = false) and tuning macros ([cuda] kernel_defines), each built
	// on first use.
	variants map[string]map[string]uintptr

	// mu serialises CUDA work: a context is current per OS thread and stream capture is
	// thread-local, so every call runs on a locked OS thread under mu.
	mu sync.Mutex

	// sizes and live count the device memory the process holds through alloc, exactly:
	// cuMemGetInfo moves in the driver's page granularity (2 MiB), so it cannot show
	// that a small buffer was freed.
	sizesMu sync.Mutex
	sizes   map[uint64]int64
	live    int64
}

// liveBytes is the device memory alloc has handed out and free has not taken back.
func (g *device) liveBytes() int64 {
	g.sizesMu.Lock()
	defer g.sizesMu.Unlock()
	return g.live
}

var (
	devOnce sync.Once
	dev     *device
	devErr  error
)

// openDevice initialises the driver, GPU 0 and its primary context, and compiles the
// kernels with NVRTC, once per process.
func openDevice() (*device, error) {
	devOnce.Do(func() { dev, devErr = newDevice() })
	return dev, devErr
}

func newDevice() (*device, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var count int32
	if err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&count)); err != nil {
		return nil, fmt.Errorf("CUDA not available: %w", err)
	}
	if count == 0 {
		return nil, fmt.Errorf("CUDA not available: the driver reports no GPU")
	}
	g := &device{d: d}
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&g.ordinal, 0)); err != nil {
		return nil, err
	}
	name := make([]byte, 256)
	if d.cuDeviceGetName(&name[0], int32(len(name)), g.ordinal) == 0 {
		g.name = cString(&name[0])
	}
	var major, minor, sms, groupMemory int32
	if err := d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&major, attrComputeMajor, g.ordinal)); err != nil {
		return nil, err
	}
	d.cuDeviceGetAttribute(&minor, attrComputeMinor, g.ordinal)
	d.cuDeviceGetAttribute(&sms, attrMultiprocessors, g.ordinal)
	d.cuDeviceGetAttribute(&groupMemory, attrMaxGroupMemoryOptIn, g.ordinal)
	g.arch, g.sms, g.groupMemoryLimit = int(10*major+minor), int(sms), int(groupMemory)
	g.groupMemoryShort = map[string]int{}
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&g.ctx, g.ordinal)); err != nil {
		return nil, err
	}
	if err := d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(g.ctx)); err != nil {
		return nil, err
	}
	if err := d.check("cuStreamCreate", d.cuStreamCreate(&g.stream, streamNonBlocking)); err != nil {
		return nil, err
	}
	if err := g.loadKernels(); err != nil {
		return nil, err
	}
	return g, nil
}

// tuningDefines are the kernel tuning macros of PISTIL_CUDA_DEFINES (space-separated
// NAME=VALUE, e.g. "MMA_XPARTS=2"), passed to NVRTC as -D options: a developer's
// way to time a kernel variant against the default in one binary and one device call.
// Unset, the kernels build with their defaults.
func tuningDefines() []string {
	var opts []string
	for _, d := range strings.Fields(os.Getenv("PISTIL_CUDA_DEFINES")) {
		opts = append(opts, "-D"+d)
	}
	return opts
}

// loadKernels compiles the dialect kernels for the device and resolves every function.
func (g *device) loadKernels() error {
	module, funcs, err := g.compileModule(nil)
	if err != nil {
		return err
	}
	g.module, g.funcs = module, funcs
	return nil
}

// kernelsFor returns the functions of the module a backend launches: the default one,
// or one compiled with PZ_LATE_LOADS (lateLoads) and the tuning macros of defines
// (NAME=VALUE, kernels.CheckTuningDefines), compiled here the first time it is asked for.
// The caller holds the device.
func (g *device) kernelsFor(lateLoads bool, defines []string) (map[string]uintptr, error) {
	if err := kernels.CheckTuningDefines(defines); err != nil {
		return nil, err
	}
	var opts []string
	for _, d := range defines {
		opts = append(opts, "-D"+d)
	}
	if lateLoads {
		opts = append(opts, "-DPZ_LATE_LOADS")
	}
	if len(opts) == 0 {
		return g.funcs, nil
	}
	key := strings.Join(opts, " ")
	if funcs, ok := g.variants[key]; ok {
		return funcs, nil
	}
	_, funcs, err := g.compileModule(opts)
	if err != nil {
		return nil, fmt.Errorf("the kernels compiled with %s: %w", key, err)
	}
	if g.variants == nil {
		g.variants = map[string]map[string]uintptr{}
	}
	g.variants[key] = funcs
	return funcs, nil
}

// compileModule compiles the dialect kernels with extra -D options (and
// PISTIL_CUDA_DEFINES), loads the module and resolves every function.
func (g *device) compileModule(extra []string) (uintptr, map[string]uintptr, error) {
	n, err := loadNVRTC()
	if err != nil {
		return 0, nil, err
	}
	defines := append(tuningDefines(), extra...)
	cubin, _, err := n.compile(kernels.CUDASource(), "pistil_kernels.cu", g.arch, defines)
	if err != nil {
		if os.Getenv("PISTIL_CUDA_DEFINES") != "" {
			return 0, nil, fmt.Errorf("%w (the kernels were compiled with PISTIL_CUDA_DEFINES=%q)", err, os.Getenv("PISTIL_CUDA_DEFINES"))
		}
		return 0, nil, err
	}
	var module uintptr
	if err := g.d.check("cuModuleLoadData", g.d.cuModuleLoadData(&module, unsafe.Pointer(&cubin[0]))); err != nil {
		return 0, nil, err
	}
	funcs := map[string]uintptr{}
	for _, name := range append(kernels.NamesFor("cuda"), kernels.KernelProbeLayout) {
		var f uintptr
		if err := g.d.check("cuModuleGetFunction "+name, g.d.cuModuleGetFunction(&f, module, name)); err != nil {
			return 0, nil, err
		}
		funcs[name] = f
		if n := kernels.DynamicGroupMemory(name, g.groupMemoryLimit); n > g.groupMemoryLimit {
			g.groupMemoryShort[name] = n
		} else if n > 0 {
			if err := g.d.check("cuFuncSetAttribute "+name, g.d.cuFuncSetAttribute(f, funcAttrMaxDynamicShared, int32(n))); err != nil {
				return 0, nil, err
			}
		}
	}
	return module, funcs, nil
}

// do runs f with the context current on a locked OS thread, one caller at a time.
func (g *device) do(f func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := g.d.check("cuCtxSetCurrent", g.d.cuCtxSetCurrent(g.ctx)); err != nil {
		return err
	}
	return f()
}

// alloc returns n bytes of device memory (at least 1 byte, so every buffer has an
// address), zeroed. Memory traffic goes through the device's own stream (non-blocking:
// it does not wait for the legacy stream that the synchronous cuMemcpy/cuMemset calls
// use, so those could land after a kernel that follows them).
func (g *device) alloc(n int64) (uint64, error) {
	if n < 1 {
		n = 1
	}
	var p uint64
	if r := g.d.cuMemAlloc(&p, uint64(n)); r != 0 {
		var free, total uint64
		g.d.cuMemGetInfo(&free, &total)
		return 0, fmt.Errorf("cuMemAlloc of %d bytes (%d of %d bytes free): %s", n, free, total, g.d.errString(r))
	}
	g.sizesMu.Lock()
	if g.sizes == nil {
		g.sizes = map[uint64]int64{}
	}
	g.sizes[p] = n
	g.live += n
	g.sizesMu.Unlock()
	if err := g.d.check("cuMemsetD8Async", g.d.cuMemsetD8Async(p, 0, uint64(n), g.stream)); err != nil {
		return 0, err
	}
	return p, nil
}

func (g *device) free(p uint64) {
	if p != 0 {
		g.d.cuMemFree(p)
		g.sizesMu.Lock()
		g.live -= g.sizes[p]
		delete(g.sizes, p)
		g.sizesMu.Unlock()
	}
}

// upload copies host bytes to device address p, ordered after the stream's earlier
// work and complete when it returns.
func (g *device) upload(p uint64, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := g.d.check("cuMemcpyHtoDAsync", g.d.cuMemcpyHtoDAsync(p, unsafe.Pointer(&b[0]), uint64(len(b)), g.stream)); err != nil {
		return err
	}
	return g.sync()
}

// download copies device bytes at p into b after the stream's earlier work.
func (g *device) download(b []byte, p uint64) error {
	if len(b) == 0 {
		return nil
	}
	if err := g.d.check("cuMemcpyDtoHAsync", g.d.cuMemcpyDtoHAsync(unsafe.Pointer(&b[0]), p, uint64(len(b)), g.stream)); err != nil {
		return err
	}
	return g.sync()
}

// launch is one recorded kernel launch: the function, its geometry and a pointer to
// its args struct (kept alive by args).
type launch struct {
	name   string
	fn     uintptr
	grid   [3]uint32
	block  uint32
	shared uint32         // dynamic group memory, bytes (kernels.DynamicGroupMemory for the device)
	args   any            // the args struct value's owner (a pointer)
	params unsafe.Pointer // void** with one entry: the args struct's address
}

// newLaunch records a kernel launch with its args (a pointer to an args struct).
func (g *device) newLaunch(name string, grid [3]int, block int, args any, argPtr unsafe.Pointer) (*launch, error) {
	return g.newLaunchFrom(g.funcs, name, grid, block, args, argPtr)
}

// newLaunchFrom is newLaunch of a function of funcs (a module kernelsFor returned).
func (g *device) newLaunchFrom(funcs map[string]uintptr, name string, grid [3]int, block int, args any, argPtr unsafe.Pointer) (*launch, error) {
	fn, ok := funcs[name]
	if !ok {
		return nil, fmt.Errorf("kernel %s is not in the compiled module", name)
	}
	for i := range grid {
		if grid[i] < 1 {
			grid[i] = 1
		}
	}
	if grid[1] > 65535 || grid[2] > 65535 {
		return nil, fmt.Errorf("kernel %s: grid %v exceeds the y/z limit 65535", name, grid)
	}
	params := make([]unsafe.Pointer, 1)
	params[0] = argPtr
	return &launch{name: name, fn: fn, grid: [3]uint32{uint32(grid[0]), uint32(grid[1]), uint32(grid[2])},
		block: uint32(block), shared: uint32(kernels.DynamicGroupMemory(name, g.groupMemoryLimit)), args: args, params: unsafe.Pointer(&params[0])}, nil
}

// run launches l on the device's stream (the caller holds the device).
func (g *device) run(l *launch) error {
	r := g.d.cuLaunchKernel(l.fn, l.grid[0], l.grid[1], l.grid[2], l.block, 1, 1, l.shared, g.stream, l.params, nil)
	return g.d.check("cuLaunchKernel "+l.name, r)
}

func (g *device) sync() error {
	return g.d.check("cuStreamSynchronize", g.d.cuStreamSynchronize(g.stream))
}
