package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Spec declares one tensor to write: the header is complete before any data is written,
// so every tensor is declared up front and its bytes streamed afterwards.
type Spec struct {
	Name  string
	DType DType
	Shape []int
}

// Bytes is the tensor's size in the file.
func (s Spec) Bytes() int64 {
	n := int64(s.DType.Size())
	for _, d := range s.Shape {
		n *= int64(d)
	}
	return n
}

// Writer streams tensors into one file in the order they were declared. Data may arrive
// in pieces of any size, so no tensor need be held whole in memory.
type Writer struct {
	path   string
	file   *os.File
	buf    *bufio.Writer
	specs  []Spec
	cur    int   // index of the tensor being written
	filled int64 // bytes of specs[cur] written so far
	err    error
}

// Create writes path's header for specs (in that order) and returns a writer for the data.
func Create(path string, specs []Spec, metadata map[string]string) (*Writer, error) {
	hdr, err := encodeHeader(specs, metadata)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	w := &Writer{path: path, file: f, buf: bufio.NewWriterSize(f, 4<<20), specs: specs}
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(hdr)))
	w.buf.Write(prefix[:])
	if _, err := w.buf.Write(hdr); err != nil {
		f.Close()
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	w.skipEmpty()
	return w, nil
}

// encodeHeader lays the tensors out back to back and pads the JSON with spaces to a
// multiple of 8 bytes, so the data section starts aligned.
func encodeHeader(specs []Spec, metadata map[string]string) ([]byte, error) {
	entries := map[string]any{}
	if len(metadata) > 0 {
		entries["__metadata__"] = metadata
	}
	var off int64
	for _, s := range specs {
		if _, dup := entries[s.Name]; dup || s.Name == "__metadata__" {
			return nil, fmt.Errorf("tensor %q declared twice (or reserved)", s.Name)
		}
		if !s.DType.Supported() && s.DType.Size() == 0 {
			return nil, fmt.Errorf("tensor %q: invalid dtype", s.Name)
		}
		shape := s.Shape
		if shape == nil {
			shape = []int{}
		}
		n := s.Bytes()
		entries[s.Name] = map[string]any{"dtype": s.DType.String(), "shape": shape, "data_offsets": [2]int64{off, off + n}}
		off += n
	}
	js, err := json.Marshal(entries)
	if err != nil {
		return nil, err
	}
	if pad := (8 - len(js)%8) % 8; pad > 0 {
		js = append(js, bytes.Repeat([]byte(" "), pad)...)
	}
	return js, nil
}

// skipEmpty advances past tensors that are complete (zero-sized ones included).
func (w *Writer) skipEmpty() {
	for w.cur < len(w.specs) && w.filled == w.specs[w.cur].Bytes() {
		w.cur++
		w.filled = 0
	}
}

// Write appends p to tensor name, which must be the tensor being written: tensors go in
// declaration order, each completely before the next.
func (w *Writer) Write(name string, p []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(p) == 0 {
		return nil // nothing to place; zero-sized tensors are complete from the start
	}
	if w.cur >= len(w.specs) {
		return w.fail(fmt.Errorf("tensor %q written after every declared tensor was complete", name))
	}
	s := w.specs[w.cur]
	if s.Name != name {
		return w.fail(fmt.Errorf("tensor %q written while %q (declared next) is %d of %d bytes", name, s.Name, w.filled, s.Bytes()))
	}
	if w.filled+int64(len(p)) > s.Bytes() {
		return w.fail(fmt.Errorf("tensor %q: %d bytes written, more than its %d", name, w.filled+int64(len(p)), s.Bytes()))
	}
	if _, err := w.buf.Write(p); err != nil {
		return w.fail(err)
	}
	w.filled += int64(len(p))
	w.skipEmpty()
	return nil
}

func (w *Writer) fail(err error) error {
	w.err = fmt.Errorf("safetensors %s: %w", w.path, err)
	return w.err
}

// Close flushes and closes the file; it is an error if any declared tensor is incomplete.
func (w *Writer) Close() error {
	if w.file == nil {
		return w.err
	}
	ferr := w.buf.Flush()
	cerr := w.file.Close()
	w.file = nil
	switch {
	case w.err != nil:
		return w.err
	case w.cur < len(w.specs):
		s := w.specs[w.cur]
		return w.fail(fmt.Errorf("closed with tensor %q at %d of %d bytes", s.Name, w.filled, s.Bytes()))
	case ferr != nil:
		return w.fail(ferr)
	case cerr != nil:
		return w.fail(cerr)
	}
	return nil
}

// ShardedWriter writes a checkpoint folder: model.safetensors when everything fits one
// shard, else model-0000k-of-0000n.safetensors shards of at most maxShard bytes each (a
// tensor larger than that gets a shard of its own) plus model.safetensors.index.json.
type ShardedWriter struct {
	dir      string
	shards   [][]Spec
	files    []string
	of       map[string]int // tensor -> shard
	open     *Writer
	openIdx  int
	metadata map[string]string
	total    int64
	err      error
}

// CreateSharded plans the shards for specs (kept in order) and opens the first.
func CreateSharded(dir string, specs []Spec, maxShard int64, metadata map[string]string) (*ShardedWriter, error) {
	if maxShard <= 0 {
		return nil, fmt.Errorf("safetensors: shard limit %d must be positive", maxShard)
	}
	w := &ShardedWriter{dir: dir, of: map[string]int{}, openIdx: -1, metadata: metadata}
	var size int64
	for _, s := range specs {
		n := s.Bytes()
		if len(w.shards) == 0 || size > 0 && size+n > maxShard {
			w.shards = append(w.shards, nil)
			size = 0
		}
		last := len(w.shards) - 1
		w.shards[last] = append(w.shards[last], s)
		w.of[s.Name] = last
		size += n
		w.total += n
	}
	for i := range w.shards {
		name := SingleFile
		if len(w.shards) > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(w.shards))
		}
		w.files = append(w.files, name)
	}
	if err := w.openShard(0); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *ShardedWriter) openShard(i int) error {
	if w.open != nil {
		if err := w.open.Close(); err != nil {
			return err
		}
		w.open = nil
	}
	if i >= len(w.shards) {
		return nil
	}
	ww, err := Create(filepath.Join(w.dir, w.files[i]), w.shards[i], w.metadata)
	if err != nil {
		return err
	}
	w.open, w.openIdx = ww, i
	return nil
}

// Write appends p to tensor name; tensors go in declaration order across all shards.
func (w *ShardedWriter) Write(name string, p []byte) error {
	if w.err != nil {
		return w.err
	}
	shard, ok := w.of[name]
	if !ok {
		w.err = fmt.Errorf("safetensors %s: tensor %q was not declared", w.dir, name)
		return w.err
	}
	if len(p) == 0 {
		return nil
	}
	for w.openIdx < shard {
		if err := w.openShard(w.openIdx + 1); err != nil {
			w.err = err
			return err
		}
	}
	if err := w.open.Write(name, p); err != nil {
		w.err = err
		return err
	}
	return nil
}

// Close completes the last shard (every shard must be complete) and writes the index when
// there is more than one shard.
func (w *ShardedWriter) Close() error {
	if w.err != nil {
		if w.open != nil {
			w.open.Close()
		}
		return w.err
	}
	for w.openIdx < len(w.shards)-1 {
		if err := w.openShard(w.openIdx + 1); err != nil {
			return err
		}
	}
	if err := w.openShard(len(w.shards)); err != nil {
		return err
	}
	if len(w.shards) < 2 {
		return nil
	}
	wm := make(map[string]string, len(w.of))
	for name, i := range w.of {
		wm[name] = w.files[i]
	}
	js, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": w.total}, "weight_map": wm}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(w.dir, IndexFile)
	if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
