package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path string, specs []Spec, fill func(Spec) []byte) {
	t.Helper()
	w, err := Create(path, specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		data := fill(s)
		// Stream in uneven pieces: the writer must not care how data arrives.
		for len(data) > 0 {
			n := min(len(data), 7)
			if err := w.Write(s.Name, data[:n]); err != nil {
				t.Fatal(err)
			}
			data = data[n:]
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func pattern(s Spec) []byte {
	b := make([]byte, s.Bytes())
	for i := range b {
		b[i] = byte(len(s.Name)*31 + i)
	}
	return b
}

var testSpecs = []Spec{
	{"a.weight", BF16, []int{3, 5}},
	{"empty", F32, []int{0, 4}},
	{"scalar", F32, nil},
	{"b.ids", I32, []int{6}},
	{"c.codes", U32, []int{2, 2}},
	{"d.half", F16, []int{5}},
}

func TestWriteThenRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	writeFile(t, path, testSpecs, pattern)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Header.Metadata["format"] != "pt" {
		t.Errorf("metadata %v", f.Header.Metadata)
	}
	if n := binary.LittleEndian.Uint64(mustRead(t, path)[:8]); n%8 != 0 {
		t.Errorf("header length %d is not padded to 8", n)
	}
	for _, s := range testSpecs {
		info, ok := f.Info(s.Name)
		if !ok || info.DType != s.DType || len(info.Shape) != len(s.Shape) {
			t.Fatalf("%s: info %+v", s.Name, info)
		}
		data, err := f.Data(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, pattern(s)) {
			t.Errorf("%s: data differs", s.Name)
		}
	}
	if _, err := f.Data("nope"); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("missing tensor error %v does not name the file", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWriterEnforcesOrderAndSizes(t *testing.T) {
	dir := t.TempDir()
	specs := []Spec{{"first", U32, []int{2}}, {"second", U32, []int{1}}}
	w, _ := Create(filepath.Join(dir, "order.safetensors"), specs, nil)
	if err := w.Write("second", make([]byte, 4)); err == nil {
		t.Error("wrote a tensor out of declaration order")
	}
	w.Close()
	w, _ = Create(filepath.Join(dir, "over.safetensors"), specs, nil)
	if err := w.Write("first", make([]byte, 12)); err == nil {
		t.Error("wrote past a tensor's size")
	}
	w.Close()
	w, _ = Create(filepath.Join(dir, "short.safetensors"), specs, nil)
	w.Write("first", make([]byte, 8))
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "second") {
		t.Errorf("closing with an incomplete tensor: %v", err)
	}
	if _, err := Create(filepath.Join(dir, "dup.safetensors"), []Spec{specs[0], specs[0]}, nil); err == nil {
		t.Error("declared the same tensor twice")
	}
}

func TestShardedWriteAndOpenDir(t *testing.T) {
	dir := t.TempDir()
	w, err := CreateSharded(dir, testSpecs, 40, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range testSpecs {
		if err := w.Write(s.Name, pattern(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
	if len(shards) < 2 {
		t.Fatalf("%d shards, want several at a 40-byte limit", len(shards))
	}
	set, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for _, s := range testSpecs {
		data, err := set.Data(s.Name)
		if err != nil || !bytes.Equal(data, pattern(s)) {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
	if len(set.Names()) != len(testSpecs) {
		t.Errorf("names %v", set.Names())
	}

	// A shard the index names but the folder lacks is named in the error.
	os.Remove(shards[1])
	_, err = OpenDir(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Base(shards[1])) {
		t.Errorf("missing shard: %v", err)
	}
}

func TestOpenDirSingleAndEmpty(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("empty folder: %v", err)
	}
	w, _ := CreateSharded(dir, testSpecs[:1], 1<<20, nil)
	w.Write(testSpecs[0].Name, pattern(testSpecs[0]))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, SingleFile)); err != nil {
		t.Fatalf("one shard should be written as %s: %v", SingleFile, err)
	}
	set, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	set.Close()
}

func TestOpenRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	writeFile(t, good, testSpecs, pattern)
	raw := mustRead(t, good)
	hlen := binary.LittleEndian.Uint64(raw)

	withHeader := func(js string) []byte {
		var b bytes.Buffer
		binary.Write(&b, binary.LittleEndian, uint64(len(js)))
		b.WriteString(js)
		b.Write(raw[8+hlen:])
		return b.Bytes()
	}
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"truncated", "truncated", raw[:len(raw)-3]},
		{"tiny", "truncated", raw[:5]},
		{"header longer than file", "truncated", append(binary.LittleEndian.AppendUint64(nil, 1<<20), '{', '}')},
		{"absurd header length", "limit", binary.LittleEndian.AppendUint64(nil, 1<<62)},
		{"trailing bytes", "cover only", append(append([]byte(nil), raw...), 0, 0)},
		{"lying offsets", "gap", withHeader(strings.Replace(string(raw[8:8+hlen]), `"data_offsets":[0,30]`, `"data_offsets":[2,32]`, 1))},
		{"lying dtype", "needs", withHeader(strings.Replace(string(raw[8:8+hlen]), `"dtype":"BF16"`, `"dtype":"F32"`, 1))},
		{"unknown dtype", "unknown dtype", withHeader(strings.Replace(string(raw[8:8+hlen]), `"dtype":"BF16"`, `"dtype":"Q4"`, 1))},
		{"not json", "header", withHeader("[1,2]")},
	}
	for _, tc := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".safetensors")
		if err := os.WriteFile(path, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", tc.name, err, path, tc.want)
		}
	}
}

func TestParseHeaderRejects(t *testing.T) {
	cases := []struct{ js, want string }{
		{`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}}`, "gap"},
		{`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, "overlaps"},
		{`{"a":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}}`, "truncated"},
		{`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, "negative"},
		{`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,5]}}`, "overflows"},
		{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,5]}}`, "needs 8 bytes"},
		{`{"a":{"dtype":"U8","shape":[5],"data_offsets":[0]}}`, "2"},
		{`{"a":{"dtype":"U8","shape":[5],"data_offsets":[5,0]}}`, "bad data_offsets"},
		{`{"a":{"dtype":"U8","shape":[5],"data_offsets":[0,5]},"a":{"dtype":"U8","shape":[0],"data_offsets":[5,5]}}`, "twice"},
		{`{"__metadata__":{"k":1}}`, "__metadata__"},
		{`{} {}`, "trailing"},
		{`{"a":{"dtype":"U8","shape":[2.5],"data_offsets":[0,5]}}`, "tensor"},
	}
	for _, tc := range cases {
		_, err := ParseHeader([]byte(tc.js), 5)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.js, err, tc.want)
		}
	}
}

// A header that claims an exabyte tensor in a tiny file must fail fast without
// allocating anything near what it claims.
func TestLyingHeaderAllocatesLittle(t *testing.T) {
	js := []byte(`{"w":{"dtype":"F32","shape":[262144,1048576,1024],"data_offsets":[0,1125899906842624]}}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ParseHeader(js, 64)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("accepted a header larger than its file")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("parsing a lying header allocated %d bytes", grew)
	}
}
