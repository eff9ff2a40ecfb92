//go:build darwin

package metal

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	"pistil/exec"
)

func init() {
	exec.RegisterBackend("metal", func(o exec.BackendOptions) (exec.Backend, error) {
		d, err := openDevice()
		if err != nil {
			return nil, err
		}
		if err := d.thread.do(d.buildPipelines); err != nil {
			return nil, err
		}
		return NewBackend(&darwinDevice{metalAPI{d: d}}, ConfigOfOptions(o.Metal)), nil
	})
}

// darwinDevice is the Device over Metal.
type darwinDevice struct{ metalAPI }

func (d *darwinDevice) Do(f func() error) error { return d.d.thread.do(f) }

func (d *darwinDevice) NewBuffer(n int64) (Buffer, error) { return d.d.newBuffer(n) }

func (d *darwinDevice) NewNoCopyBuffer(p unsafe.Pointer, n int64) (Buffer, error) {
	return d.d.newNoCopyBuffer(p, n)
}

func (d *darwinDevice) MakeResident(bufs []Buffer) error {
	var mbs []*buffer
	for _, b := range bufs {
		mbs = append(mbs, b.(*buffer))
	}
	on, err := d.d.makeResident(mbs)
	d.resident = d.resident || on
	return err
}

func (d *darwinDevice) Release(b Buffer) {
	if mb, ok := b.(*buffer); ok {
		send(mb.id, selRelease)
	}
}

func (d *darwinDevice) MaxBufferLength() int64 { return int64(d.d.info.MaxBufferLength) }

func (d *darwinDevice) PageSize() int64 { return int64(os.Getpagesize()) }

func (d *darwinDevice) Describe() string {
	return fmt.Sprintf("%s (%s)", d.d.info.Name, strings.Join(d.d.info.Families, ", "))
}
