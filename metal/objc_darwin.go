//go:build darwin

package metal

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// The Objective-C plumbing: frameworks loaded once, selectors registered once, and
// messages sent through objc_msgSend with purego.SyscallN (every argument an integer or
// pointer; SyscallN keeps inline pointer conversions alive). The one call with structs by
// value, dispatchThreadgroups:threadsPerThreadgroup:, has its own typed trampoline.

var (
	loadOnce sync.Once
	loadErr  error

	msgSend                        uintptr
	createSystemDefaultDevice      uintptr
	autoreleasePoolPush            uintptr
	autoreleasePoolPop             uintptr
	sendDispatch                   func(enc objc.ID, sel objc.SEL, groups, threads mtlSize)
	sendPointer                    func(id objc.ID, sel objc.SEL) unsafe.Pointer
	classNSString                  objc.Class
	classMTLCompileOptions         objc.Class
	classMTLResidencySetDescriptor objc.Class
)

// mtlSize is MTLSize: three NSUIntegers, 24 bytes (passed by pointer to a copy on arm64,
// which purego does for a struct argument of that size).
type mtlSize struct{ Width, Height, Depth uint64 }

func load() error {
	loadOnce.Do(func() {
		if runtime.GOARCH != "arm64" {
			loadErr = ErrUnavailable
			return
		}
		libobjc, err := purego.Dlopen("/usr/lib/libobjc.A.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			loadErr = fmt.Errorf("metal: libobjc: %w", err)
			return
		}
		if _, err := purego.Dlopen("/System/Library/Frameworks/Foundation.framework/Foundation", purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
			loadErr = fmt.Errorf("metal: Foundation: %w", err)
			return
		}
		mtl, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			loadErr = fmt.Errorf("metal: Metal.framework: %w", err)
			return
		}
		for _, s := range []struct {
			lib  uintptr
			name string
			addr *uintptr
		}{{libobjc, "objc_msgSend", &msgSend}, {libobjc, "objc_autoreleasePoolPush", &autoreleasePoolPush},
			{libobjc, "objc_autoreleasePoolPop", &autoreleasePoolPop}, {mtl, "MTLCreateSystemDefaultDevice", &createSystemDefaultDevice}} {
			if *s.addr, err = purego.Dlsym(s.lib, s.name); err != nil {
				loadErr = fmt.Errorf("metal: %s: %w", s.name, err)
				return
			}
		}
		purego.RegisterFunc(&sendDispatch, msgSend)
		purego.RegisterFunc(&sendPointer, msgSend)
		classNSString = objc.GetClass("NSString")
		classMTLCompileOptions = objc.GetClass("MTLCompileOptions")
		classMTLResidencySetDescriptor = objc.GetClass("MTLResidencySetDescriptor") // 0 before macOS 15
		if classNSString == 0 || classMTLCompileOptions == 0 {
			loadErr = errors.New("metal: Foundation or Metal classes are missing")
		}
	})
	return loadErr
}

// Selectors, registered once (sel_registerName takes the runtime's lock).
var (
	selAlloc                      = objc.RegisterName("alloc")
	selInit                       = objc.RegisterName("init")
	selRetain                     = objc.RegisterName("retain")
	selRelease                    = objc.RegisterName("release")
	selRespondsToSelector         = objc.RegisterName("respondsToSelector:")
	selStringWithUTF8String       = objc.RegisterName("stringWithUTF8String:")
	selUTF8String                 = objc.RegisterName("UTF8String")
	selLocalizedDescription       = objc.RegisterName("localizedDescription")
	selName                       = objc.RegisterName("name")
	selSupportsFamily             = objc.RegisterName("supportsFamily:")
	selMaxBufferLength            = objc.RegisterName("maxBufferLength")
	selRecommendedMaxWorkingSet   = objc.RegisterName("recommendedMaxWorkingSetSize")
	selMaxThreadgroupMemoryLength = objc.RegisterName("maxThreadgroupMemoryLength")
	selHasUnifiedMemory           = objc.RegisterName("hasUnifiedMemory")
	selNewCommandQueue            = objc.RegisterName("newCommandQueue")
	selNewSharedEvent             = objc.RegisterName("newSharedEvent")
	selSetLanguageVersion         = objc.RegisterName("setLanguageVersion:")
	selSetMathMode                = objc.RegisterName("setMathMode:")
	selSetFastMathEnabled         = objc.RegisterName("setFastMathEnabled:")
	selNewLibraryWithSource       = objc.RegisterName("newLibraryWithSource:options:error:")
	selNewFunctionWithName        = objc.RegisterName("newFunctionWithName:")
	selNewComputePipelineState    = objc.RegisterName("newComputePipelineStateWithFunction:error:")
	selThreadExecutionWidth       = objc.RegisterName("threadExecutionWidth")
	selMaxTotalThreads            = objc.RegisterName("maxTotalThreadsPerThreadgroup")
	selStaticThreadgroupMemory    = objc.RegisterName("staticThreadgroupMemoryLength")
	selNewBufferWithLength        = objc.RegisterName("newBufferWithLength:options:")
	selNewBufferWithBytesNoCopy   = objc.RegisterName("newBufferWithBytesNoCopy:length:options:deallocator:")
	selContents                   = objc.RegisterName("contents")
	selGPUAddress                 = objc.RegisterName("gpuAddress")
	selNewResidencySet            = objc.RegisterName("newResidencySetWithDescriptor:error:")
	selSetInitialCapacity         = objc.RegisterName("setInitialCapacity:")
	selAddAllocation              = objc.RegisterName("addAllocation:")
	selCommit                     = objc.RegisterName("commit")
	selRequestResidency           = objc.RegisterName("requestResidency")
	selAddResidencySet            = objc.RegisterName("addResidencySet:")
	selCommandBufferUnretained    = objc.RegisterName("commandBufferWithUnretainedReferences")
	selComputeEncoderDispatchType = objc.RegisterName("computeCommandEncoderWithDispatchType:")
	selUseResources               = objc.RegisterName("useResources:count:usage:")
	selSetComputePipelineState    = objc.RegisterName("setComputePipelineState:")
	selSetBytes                   = objc.RegisterName("setBytes:length:atIndex:")
	selDispatchThreadgroups       = objc.RegisterName("dispatchThreadgroups:threadsPerThreadgroup:")
	selMemoryBarrierWithScope     = objc.RegisterName("memoryBarrierWithScope:")
	selEndEncoding                = objc.RegisterName("endEncoding")
	selEncodeWaitForEvent         = objc.RegisterName("encodeWaitForEvent:value:")
	selEncodeSignalEvent          = objc.RegisterName("encodeSignalEvent:value:")
	selWaitUntilCompleted         = objc.RegisterName("waitUntilCompleted")
	selStatus                     = objc.RegisterName("status")
	selError                      = objc.RegisterName("error")
)

// send sends sel to id with integer/pointer arguments and returns the integer result.
func send(id objc.ID, sel objc.SEL, args ...uintptr) uintptr {
	all := append([]uintptr{uintptr(id), uintptr(sel)}, args...)
	r, _, _ := purego.SyscallN(msgSend, all...)
	return r
}

func sendID(id objc.ID, sel objc.SEL, args ...uintptr) objc.ID {
	return objc.ID(send(id, sel, args...))
}

func responds(id objc.ID, sel objc.SEL) bool {
	return send(id, selRespondsToSelector, uintptr(sel))&0xff != 0
}

// nsString is an autoreleased NSString of s (the caller holds an autorelease pool).
func nsString(s string) objc.ID {
	b := append([]byte(s), 0)
	id := objc.ID(send(objc.ID(classNSString), selStringWithUTF8String, uintptr(unsafe.Pointer(&b[0]))))
	runtime.KeepAlive(b)
	return id
}

// goString copies an NSString's UTF-8 bytes.
func goString(id objc.ID) string {
	if id == 0 {
		return ""
	}
	p := (*byte)(sendPointer(id, selUTF8String))
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// errorText is an NSError's localizedDescription.
func errorText(nsErr objc.ID) string {
	if nsErr == 0 {
		return "no NSError given"
	}
	return goString(sendID(nsErr, selLocalizedDescription))
}

// metalThread runs every Metal call on one locked OS thread, each call inside its own
// autorelease pool: command queues, encoders and pools belong to the thread that made
// them.
type metalThread struct {
	jobs chan func()
}

func newMetalThread() *metalThread {
	t := &metalThread{jobs: make(chan func())}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is the Metal thread for good
		for job := range t.jobs {
			pool, _, _ := purego.SyscallN(autoreleasePoolPush)
			job()
			purego.SyscallN(autoreleasePoolPop, pool)
		}
	}()
	return t
}

// do runs f on the Metal thread and returns its error.
func (t *metalThread) do(f func() error) error {
	done := make(chan error, 1)
	t.jobs <- func() { done <- f() }
	return <-done
}
