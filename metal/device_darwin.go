//go:build darwin

package metal

import (
	"fmt"
	"sort"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"

	"pistil/ops/kernels"
)

// Metal constants (the shifted storage bits are the MTLResourceOptions layout).
const (
	storageShared      = 0 << 4
	hazardUntracked    = 1 << 8
	bufferOptions      = storageShared | hazardUntracked
	dispatchConcurrent = 1
	dispatchSerial     = 0
	barrierScopeBuffer = 1
	usageRead          = 1
	usageWrite         = 2
	mathModeSafe       = 0
	msl31              = 0x30001
	statusError        = 5
)

// Families pistil knows, highest first (supportsFamily: codes).
var families = []struct {
	Name string
	Code uintptr
}{{"Apple10", 1010}, {"Apple9", 1009}, {"Apple8", 1008}, {"Apple7", 1007}, {"Metal3", 5001}}

// DeviceInfo is what setup reads from the device and reports.
type DeviceInfo struct {
	Name                         string   `json:"name"`
	Families                     []string `json:"families"`
	MaxBufferLength              uint64   `json:"max_buffer_length"`
	RecommendedMaxWorkingSetSize uint64   `json:"recommended_max_working_set_size"`
	MaxThreadgroupMemoryLength   uint64   `json:"max_threadgroup_memory_length"`
	UnifiedMemory                bool     `json:"unified_memory"`
	ResidencySets                bool     `json:"residency_sets"`
	SafeMathMode                 bool     `json:"safe_math_mode"` // setMathMode: (macOS 15+); else fastMathEnabled = NO
}

// device is the default Metal device with its queue, shared event and compiled library.
type device struct {
	thread *metalThread
	dev    objc.ID
	queue  objc.ID
	event  objc.ID
	info   DeviceInfo

	library   objc.ID
	pipelines map[string]*computePipeline
	// commandBuffers counts the command buffers made, the shared event's values.
	commandBuffers uint64
}

// openDevice creates the system default device and reads its limits. Apple7 (M1) is the
// floor: the kernels need simdgroup functions and gpuAddress (Metal 3).
func openDevice() (*device, error) {
	if err := load(); err != nil {
		return nil, err
	}
	d := &device{thread: newMetalThread(), pipelines: map[string]*computePipeline{}}
	err := d.thread.do(func() error {
		r, _, _ := purego.SyscallN(createSystemDefaultDevice)
		d.dev = objc.ID(r)
		if d.dev == 0 {
			return fmt.Errorf("metal: MTLCreateSystemDefaultDevice returned no device")
		}
		d.info.Name = goString(sendID(d.dev, selName))
		for _, f := range families {
			if send(d.dev, selSupportsFamily, f.Code)&0xff != 0 {
				d.info.Families = append(d.info.Families, f.Name)
			}
		}
		if !d.supports("Apple7") {
			return fmt.Errorf("metal: %s does not support the Apple7 GPU family (M1 or later); %s", d.info.Name, ErrUnavailable)
		}
		d.info.MaxBufferLength = uint64(send(d.dev, selMaxBufferLength))
		d.info.RecommendedMaxWorkingSetSize = uint64(send(d.dev, selRecommendedMaxWorkingSet))
		d.info.MaxThreadgroupMemoryLength = uint64(send(d.dev, selMaxThreadgroupMemoryLength))
		d.info.UnifiedMemory = send(d.dev, selHasUnifiedMemory)&0xff != 0
		d.info.ResidencySets = classMTLResidencySetDescriptor != 0 && responds(d.dev, selNewResidencySet)
		if d.queue = sendID(d.dev, selNewCommandQueue); d.queue == 0 {
			return fmt.Errorf("metal: newCommandQueue failed")
		}
		if d.event = sendID(d.dev, selNewSharedEvent); d.event == 0 {
			return fmt.Errorf("metal: newSharedEvent failed")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (d *device) supports(family string) bool {
	for _, f := range d.info.Families {
		if f == family {
			return true
		}
	}
	return false
}

// compile builds an MSL library at language version 3.1 with safe math. A failure carries
// the compiler's own message. Call on the Metal thread.
func (d *device) compile(src string) (objc.ID, error) {
	opts := sendID(sendID(objc.ID(classMTLCompileOptions), selAlloc), selInit)
	defer send(opts, selRelease)
	send(opts, selSetLanguageVersion, msl31)
	if responds(opts, selSetMathMode) {
		send(opts, selSetMathMode, mathModeSafe)
		d.info.SafeMathMode = true
	} else {
		send(opts, selSetFastMathEnabled, 0)
	}
	var nsErr objc.ID
	lib := sendID(d.dev, selNewLibraryWithSource, uintptr(nsString(src)), uintptr(opts), uintptr(unsafe.Pointer(&nsErr)))
	if lib == 0 {
		return 0, fmt.Errorf("metal: the MSL compiler rejected the kernels:\n%s", errorText(nsErr))
	}
	return lib, nil
}

// computePipeline is one kernel's compute pipeline and what Metal reports about it.
type computePipeline struct {
	kernel          string
	pso             objc.ID
	ExecutionWidth  int `json:"thread_execution_width"`
	MaxThreads      int `json:"max_total_threads_per_threadgroup"`
	StaticTGMemory  int `json:"static_threadgroup_memory_length"`
	DeclaredTGBytes int `json:"declared_threadgroup_bytes"`
}

func (p *computePipeline) Kernel() string { return p.kernel }

// buildPipelines compiles the Metal source and builds every kernel's pipeline, checking
// each: SIMD width 32 (the kernels' LANE and shuffles assume it), threadgroup memory
// within the device's limit, and 256 threads per group allowed. Call on the Metal thread.
func (d *device) buildPipelines() error {
	lib, err := d.compile(kernels.MetalSource())
	if err != nil {
		return err
	}
	d.library = lib
	declared := map[string]int{}
	if gms, err := kernels.GroupMemoryOf(kernels.Metal); err == nil {
		for _, gm := range gms {
			declared[gm.Kernel] = gm.Bytes
		}
	}
	var problems []string
	for _, name := range append(append([]string(nil), kernels.Names...), kernels.KernelProbeLayout) {
		p, err := d.newPipeline(lib, name)
		if err != nil {
			return err
		}
		p.DeclaredTGBytes = declared[name]
		if p.ExecutionWidth != 32 {
			problems = append(problems, fmt.Sprintf("%s: threadExecutionWidth %d, the kernels need 32", name, p.ExecutionWidth))
		}
		if uint64(p.StaticTGMemory) > d.info.MaxThreadgroupMemoryLength {
			problems = append(problems, fmt.Sprintf("%s: %d bytes of threadgroup memory, the device allows %d", name, p.StaticTGMemory, d.info.MaxThreadgroupMemoryLength))
		}
		if p.MaxThreads < 256 {
			problems = append(problems, fmt.Sprintf("%s: at most %d threads per threadgroup, the kernels launch up to 256", name, p.MaxThreads))
		}
		d.pipelines[name] = p
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("metal: pipelines unusable on %s:\n%s", d.info.Name, strings.Join(problems, "\n"))
	}
	return nil
}

func (d *device) newPipeline(lib objc.ID, name string) (*computePipeline, error) {
	fn := sendID(lib, selNewFunctionWithName, uintptr(nsString(name)))
	if fn == 0 {
		return nil, fmt.Errorf("metal: the library has no kernel %s", name)
	}
	defer send(fn, selRelease)
	var nsErr objc.ID
	pso := sendID(d.dev, selNewComputePipelineState, uintptr(fn), uintptr(unsafe.Pointer(&nsErr)))
	if pso == 0 {
		return nil, fmt.Errorf("metal: pipeline %s: %s", name, errorText(nsErr))
	}
	return &computePipeline{kernel: name, pso: pso, ExecutionWidth: int(send(pso, selThreadExecutionWidth)),
		MaxThreads: int(send(pso, selMaxTotalThreads)), StaticTGMemory: int(send(pso, selStaticThreadgroupMemory))}, nil
}

// buffer is an MTLBuffer in shared storage with hazard tracking off (the plan's barriers
// order every access).
type buffer struct {
	id   objc.ID
	addr uint64
	data []byte
}

func (b *buffer) GPUAddress() uint64 { return b.addr }
func (b *buffer) Contents() []byte   { return b.data }
func (b *buffer) Length() int64      { return int64(len(b.data)) }

// newBuffer allocates n bytes (zeroed by Metal). Call on the Metal thread.
func (d *device) newBuffer(n int64) (*buffer, error) {
	if n <= 0 || uint64(n) > d.info.MaxBufferLength {
		return nil, fmt.Errorf("metal: a buffer of %d bytes (the device's maxBufferLength is %d)", n, d.info.MaxBufferLength)
	}
	id := sendID(d.dev, selNewBufferWithLength, uintptr(n), bufferOptions)
	if id == 0 {
		return nil, fmt.Errorf("metal: newBufferWithLength %d failed (out of memory?)", n)
	}
	return wrapBuffer(id, n), nil
}

// newNoCopyBuffer wraps n bytes at p (page-aligned, a whole number of pages: PlanViews
// makes them so) without copying; the memory must outlive the buffer.
func (d *device) newNoCopyBuffer(p unsafe.Pointer, n int64) (*buffer, error) {
	id := sendID(d.dev, selNewBufferWithBytesNoCopy, uintptr(p), uintptr(n), bufferOptions, 0)
	if id == 0 {
		return nil, fmt.Errorf("metal: newBufferWithBytesNoCopy of %d bytes at %p failed (page alignment, or over maxBufferLength)", n, p)
	}
	return wrapBuffer(id, n), nil
}

func wrapBuffer(id objc.ID, n int64) *buffer {
	p := sendPointer(id, selContents)
	return &buffer{id: id, addr: uint64(send(id, selGPUAddress)), data: unsafe.Slice((*byte)(p), n)}
}

// makeResident puts buffers in a residency set added to the queue (macOS 15+); it
// returns false when the device has none, and encoders then declare them with
// useResources:.
func (d *device) makeResident(bufs []*buffer) (bool, error) {
	if !d.info.ResidencySets {
		return false, nil
	}
	desc := sendID(sendID(objc.ID(classMTLResidencySetDescriptor), selAlloc), selInit)
	defer send(desc, selRelease)
	send(desc, selSetInitialCapacity, uintptr(len(bufs)))
	var nsErr objc.ID
	set := sendID(d.dev, selNewResidencySet, uintptr(desc), uintptr(unsafe.Pointer(&nsErr)))
	if set == 0 {
		return false, fmt.Errorf("metal: newResidencySetWithDescriptor: %s", errorText(nsErr))
	}
	for _, b := range bufs {
		send(set, selAddAllocation, uintptr(b.id))
	}
	send(set, selCommit)
	send(set, selRequestResidency)
	send(d.queue, selAddResidencySet, uintptr(set))
	return true, nil
}
