package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"pistil/internal/regularfile"
)

// IndexFile and SingleFile are the names Hugging Face and MLX give a checkpoint's tensors.
const (
	IndexFile  = "model.safetensors.index.json"
	SingleFile = "model.safetensors"
)

// maxIndexBytes bounds model.safetensors.index.json (a few hundred kB for the largest
// models: one line per tensor).
const maxIndexBytes = 64 << 20

// Set is the tensors of a checkpoint folder: one file, or the shards an index names.
type Set struct {
	Dir   string
	Files []*File
	where map[string]*File
}

type index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// OpenDir opens dir/model.safetensors.index.json and every shard it names, or else
// dir/model.safetensors. A shard the index names but the folder lacks, a tensor the index
// places in a shard that does not hold it, and a tensor held by two shards are errors.
func OpenDir(dir string) (*Set, error) {
	s := &Set{Dir: dir, where: map[string]*File{}}
	idxPath := filepath.Join(dir, IndexFile)
	raw, err := regularfile.Read(idxPath, maxIndexBytes)
	switch {
	case err == nil:
		if err := s.openIndexed(idxPath, raw); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	single := filepath.Join(dir, SingleFile)
	if _, err := regularfile.Check(single); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("safetensors: %s has neither %s nor %s", dir, IndexFile, SingleFile)
	} else if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if err := s.add(single); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Set) openIndexed(idxPath string, raw []byte) error {
	var idx index
	if err := json.Unmarshal(raw, &idx); err != nil {
		return fmt.Errorf("safetensors index %s: %w", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("safetensors index %s: empty weight_map", idxPath)
	}
	shards := map[string]bool{}
	for name, shard := range idx.WeightMap {
		if shard == "" || shard != filepath.Base(shard) || strings.HasPrefix(shard, ".") {
			return fmt.Errorf("safetensors index %s: tensor %q maps to %q, which is not a file name in the folder", idxPath, name, shard)
		}
		shards[shard] = true
	}
	names := make([]string, 0, len(shards))
	for sh := range shards {
		names = append(names, sh)
	}
	sort.Strings(names)
	var missing []string
	for _, sh := range names {
		if _, err := regularfile.Check(filepath.Join(s.Dir, sh)); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, sh)
		} else if err != nil {
			return fmt.Errorf("safetensors index %s: %w", idxPath, err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("safetensors index %s names shard(s) missing from the folder: %s", idxPath, strings.Join(missing, ", "))
	}
	for _, sh := range names {
		if err := s.add(filepath.Join(s.Dir, sh)); err != nil {
			return err
		}
	}
	for name, shard := range idx.WeightMap {
		f, ok := s.where[name]
		if !ok {
			return fmt.Errorf("safetensors index %s places %q in %s, which does not hold it", idxPath, name, shard)
		}
		if filepath.Base(f.Path) != shard {
			return fmt.Errorf("safetensors index %s places %q in %s, but it is in %s", idxPath, name, shard, f.Path)
		}
	}
	return nil
}

func (s *Set) add(path string) error {
	f, err := Open(path)
	if err != nil {
		return err
	}
	s.Files = append(s.Files, f)
	for _, t := range f.Header.Tensors {
		if prev, dup := s.where[t.Name]; dup {
			return fmt.Errorf("safetensors: tensor %q is in both %s and %s", t.Name, prev.Path, path)
		}
		s.where[t.Name] = f
	}
	return nil
}

// Info returns a tensor's header entry and the file holding it.
func (s *Set) Info(name string) (TensorInfo, *File, bool) {
	f, ok := s.where[name]
	if !ok {
		return TensorInfo{}, nil, false
	}
	t, _ := f.Info(name)
	return t, f, true
}

// Has reports whether some file holds the tensor.
func (s *Set) Has(name string) bool { _, ok := s.where[name]; return ok }

// Data returns a tensor's mapped bytes.
func (s *Set) Data(name string) ([]byte, error) {
	f, ok := s.where[name]
	if !ok {
		return nil, fmt.Errorf("safetensors %s: no tensor %q", s.Dir, name)
	}
	return f.Data(name)
}

// Names lists every tensor of every file, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.where))
	for n := range s.where {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close unmaps every file.
func (s *Set) Close() error {
	var first error
	for _, f := range s.Files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.Files, s.where = nil, map[string]*File{}
	return first
}
