// Package regularfile opens and reads model files only when they are regular files, so
// that a named pipe in place of a checkpoint cannot hang a load, a link to /dev/zero
// cannot be read forever, and a symlink loop is reported as one instead of as a missing
// file. Every error names the path and what is wrong with it.
package regularfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Check returns nil when path (after symlinks) is a regular file, else an error saying
// what it is. A missing file gives an error that matches fs.ErrNotExist.
func Check(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, describe(path, err)
	}
	if err := kindError(path, st.Mode()); err != nil {
		return nil, err
	}
	return st, nil
}

// Open opens a regular file for reading. A FIFO is opened without blocking and refused,
// so that swapping one in between the check and the open cannot hang the caller either.
func Open(path string) (*os.File, fs.FileInfo, error) {
	if _, err := Check(path); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, describe(path, err)
	}
	st, err := f.Stat()
	if err == nil {
		err = kindError(path, st.Mode())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// Read reads a whole regular file of at most limit bytes.
func Read(path string, limit int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d this file may have", path, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s grew past %d bytes while it was read", path, limit)
	}
	return data, nil
}

func kindError(path string, m fs.FileMode) error {
	var what string
	switch {
	case m.IsRegular():
		return nil
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeCharDevice != 0:
		what = "a character device"
	case m&fs.ModeDevice != 0:
		what = "a block device"
	default:
		what = "not a regular file (mode " + m.String() + ")"
		return fmt.Errorf("%s is %s", path, what)
	}
	return fmt.Errorf("%s is %s, not a regular file", path, what)
}

// describe words an open or stat error; the underlying error stays wrapped.
func describe(path string, err error) error {
	switch {
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%s is a symbolic link loop: %w", path, err)
	case errors.Is(err, fs.ErrNotExist):
		if target, lerr := os.Readlink(path); lerr == nil {
			// Not wrapped as fs.ErrNotExist: a link was put there, so this is not "absent".
			return fmt.Errorf("%s is a symbolic link to %s, which does not exist", path, target)
		}
		return err
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s cannot be read (permission denied): %w", path, err)
	}
	return err
}
