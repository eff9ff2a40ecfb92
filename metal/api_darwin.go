//go:build darwin

package metal

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego/objc"
)

// metalAPI implements API with real Metal calls. Every method runs on the caller's
// thread, which must be the device's Metal thread (the encoder is driven inside
// device.thread.do).
type metalAPI struct {
	d        *device
	resident bool
}

func (a *metalAPI) Pipeline(kernel string) (Pipeline, error) {
	p, ok := a.d.pipelines[kernel]
	if !ok {
		return nil, fmt.Errorf("no pipeline for kernel %s", kernel)
	}
	return p, nil
}

func (a *metalAPI) NewCommandBuffer() (CommandBuffer, error) {
	cb := sendID(a.d.queue, selCommandBufferUnretained)
	if cb == 0 {
		return nil, fmt.Errorf("metal: commandBufferWithUnretainedReferences failed")
	}
	send(cb, selRetain) // autoreleased, and it outlives this call's pool until waited on
	a.d.commandBuffers++
	return &commandBuffer{d: a.d, id: cb, value: a.d.commandBuffers}, nil
}

func (a *metalAPI) ResidencySet() bool { return a.resident }

type commandBuffer struct {
	d     *device
	id    objc.ID
	value uint64 // this command buffer's number on the device's shared event
}

func (c *commandBuffer) ComputeEncoder(concurrent bool) ComputeEncoder {
	kind := uintptr(dispatchSerial)
	if concurrent {
		kind = dispatchConcurrent
	}
	return &computeEncoder{id: sendID(c.id, selComputeEncoderDispatchType, kind)}
}

func (c *commandBuffer) WaitForPrevious() {
	if c.value > 1 {
		send(c.id, selEncodeWaitForEvent, uintptr(c.d.event), uintptr(c.value-1))
	}
}

func (c *commandBuffer) SignalCompletion() {
	send(c.id, selEncodeSignalEvent, uintptr(c.d.event), uintptr(c.value))
}

func (c *commandBuffer) Commit() { send(c.id, selCommit) }

func (c *commandBuffer) Wait() error {
	send(c.id, selWaitUntilCompleted)
	defer send(c.id, selRelease)
	if status := send(c.id, selStatus); status == statusError {
		return fmt.Errorf("metal: command buffer failed: %s", errorText(sendID(c.id, selError)))
	}
	return nil
}

type computeEncoder struct{ id objc.ID }

func (e *computeEncoder) UseResources(bufs []Buffer) {
	ids := make([]objc.ID, 0, len(bufs))
	for _, b := range bufs {
		if mb, ok := b.(*buffer); ok {
			ids = append(ids, mb.id)
		}
	}
	if len(ids) > 0 {
		send(e.id, selUseResources, uintptr(unsafe.Pointer(&ids[0])), uintptr(len(ids)), usageRead|usageWrite)
	}
}

func (e *computeEncoder) SetPipeline(p Pipeline) {
	send(e.id, selSetComputePipelineState, uintptr(p.(*computePipeline).pso))
}

func (e *computeEncoder) SetBytes(b []byte, index int) {
	send(e.id, selSetBytes, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(index))
}

func (e *computeEncoder) Dispatch(groups [3]int, threads int) {
	sendDispatch(e.id, selDispatchThreadgroups, mtlSize{uint64(groups[0]), uint64(groups[1]), uint64(groups[2])}, mtlSize{uint64(threads), 1, 1})
}

func (e *computeEncoder) Barrier() { send(e.id, selMemoryBarrierWithScope, barrierScopeBuffer) }

func (e *computeEncoder) End() { send(e.id, selEndEncoding) }
