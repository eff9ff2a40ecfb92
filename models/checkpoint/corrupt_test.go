package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
)

type outTensor struct {
	spec safetensors.Spec
	data []byte
}

func keep(info safetensors.TensorInfo, data []byte) []outTensor {
	return []outTensor{{safetensors.Spec{Name: info.Name, DType: info.DType, Shape: info.Shape}, data}}
}

// copyCheckpoint writes an edited copy of the checkpoint in src to a fresh temp folder:
// edit maps each stored tensor to what the copy holds instead (nothing drops it), extra
// tensors are appended, editConfig rewrites config.json. Shards of at most maxShard bytes.
func copyCheckpoint(t *testing.T, src string, maxShard int64, edit func(safetensors.TensorInfo, []byte) []outTensor,
	editConfig func(map[string]any), extra ...outTensor) string {
	t.Helper()
	dst := t.TempDir()
	set, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var out []outTensor
	for _, name := range set.Names() {
		info, _, _ := set.Info(name)
		data, _ := set.Data(name)
		if edit == nil {
			out = append(out, keep(info, data)...)
		} else {
			out = append(out, edit(info, data)...)
		}
	}
	out = append(out, extra...)
	specs := make([]safetensors.Spec, len(out))
	for i, o := range out {
		specs[i] = o.spec
	}
	w, err := safetensors.CreateSharded(dst, specs, maxShard, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		if err := w.Write(o.spec.Name, o.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if editConfig != nil {
		var cfg map[string]any
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		editConfig(cfg)
		raw, _ = json.Marshal(cfg)
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func bindErr(t *testing.T, dir string) *BindError {
	t.Helper()
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	_, err = ck.Bind(qwen35moe.WeightNames(ck.Config()))
	var be *BindError
	if !errors.As(err, &be) {
		t.Fatalf("Bind: %v, want a *BindError", err)
	}
	return be
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q does not mention %q", what, got, w)
		}
	}
}

func TestShardedCopyBinds(t *testing.T) {
	for _, src := range []string{goldenHF, goldenMLX} {
		dir := copyCheckpoint(t, src, 1<<20, nil, nil)
		if _, err := os.Stat(filepath.Join(dir, safetensors.IndexFile)); err != nil {
			t.Fatalf("expected a sharded copy: %v", err)
		}
		ck, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ck.Bind(qwen35moe.WeightNames(ck.Config())); err != nil {
			t.Fatal(err)
		}
		ck.Close()
	}
}

func TestTruncatedFileNamesTheFile(t *testing.T) {
	dir := copyCheckpoint(t, goldenMLX, 1<<40, nil, nil)
	path := filepath.Join(dir, safetensors.SingleFile)
	st, _ := os.Stat(path)
	if err := os.Truncate(path, st.Size()-100); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir)
	if err == nil {
		t.Fatal("opened a truncated checkpoint")
	}
	mustContain(t, "truncated", err.Error(), path, "truncated")
}

// rewriteHeader edits the JSON header of a single-file checkpoint in place.
func rewriteHeader(t *testing.T, path string, edit func(map[string]map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	var hdr map[string]map[string]any
	if err := json.Unmarshal(raw[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	data := raw[8+n:]
	edit(hdr)
	js, _ := json.Marshal(hdr)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	out = append(append(out, js...), data...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLyingHeaderNamesTheFile(t *testing.T) {
	const aLog = "language_model.model.layers.0.linear_attn.A_log"
	cases := []struct {
		name  string
		edit  func(map[string]map[string]any)
		wants []string
	}{
		{"offsets", func(h map[string]map[string]any) {
			o := h[aLog]["data_offsets"].([]any)
			h[aLog]["data_offsets"] = []any{o[0].(float64) + 4, o[1].(float64) + 4}
		}, []string{aLog}},
		{"dtype size", func(h map[string]map[string]any) { h[aLog]["dtype"] = "BF16" }, []string{aLog, "needs 8 bytes"}},
		{"offsets past the end", func(h map[string]map[string]any) {
			for name, e := range h {
				if name == "__metadata__" {
					continue
				}
				o := e["data_offsets"].([]any)
				if o[1].(float64) > 3e6 { // the last tensors of the 3.9 MB file
					e["data_offsets"] = []any{o[0].(float64) + 1e6, o[1].(float64) + 1e6}
				}
			}
		}, []string{"gap"}},
	}
	for _, tc := range cases {
		dir := copyCheckpoint(t, goldenMLX, 1<<40, nil, nil)
		path := filepath.Join(dir, safetensors.SingleFile)
		rewriteHeader(t, path, tc.edit)
		_, err := Open(dir)
		if err == nil {
			t.Fatalf("%s: opened a checkpoint whose header lies", tc.name)
		}
		mustContain(t, tc.name, err.Error(), append(tc.wants, path)...)
	}
}

// A dtype that keeps the byte size passes the header check but not the binding.
func TestWrongDTypeNamesTensorAndFile(t *testing.T) {
	const aLog = "language_model.model.layers.0.linear_attn.A_log"
	dir := copyCheckpoint(t, goldenMLX, 1<<40, nil, nil)
	path := filepath.Join(dir, safetensors.SingleFile)
	rewriteHeader(t, path, func(h map[string]map[string]any) { h[aLog]["dtype"] = "I32" })
	be := bindErr(t, dir)
	if len(be.Problems) != 1 || len(be.Missing)+len(be.Unused) != 0 {
		t.Fatalf("want exactly one problem: %v", be)
	}
	mustContain(t, "wrong dtype", be.Problems[0], "layers.0.linear_attn.A_log", aLog, "I32", path)
}

func TestMissingShardNamesTheShard(t *testing.T) {
	dir := copyCheckpoint(t, goldenHF, 1<<20, nil, nil)
	shard := filepath.Join(dir, "model-00002-of-"+shardCount(t, dir)+".safetensors")
	if err := os.Remove(shard); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir)
	if err == nil {
		t.Fatal("opened a checkpoint with a missing shard")
	}
	mustContain(t, "missing shard", err.Error(), filepath.Base(shard), safetensors.IndexFile)
}

func shardCount(t *testing.T, dir string) string {
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
	if len(shards) < 2 {
		t.Fatalf("%d shards", len(shards))
	}
	return fmt.Sprintf("%05d", len(shards))
}

func TestBindListsEverythingAtOnce(t *testing.T) {
	const (
		dropped  = "model.language_model.layers.1.mlp.shared_expert_gate.weight"
		reshaped = "model.language_model.layers.0.linear_attn.in_proj_a.weight"
		bogus    = "model.language_model.layers.0.mlp.bogus.weight"
	)
	edit := func(info safetensors.TensorInfo, data []byte) []outTensor {
		switch info.Name {
		case dropped:
			return nil
		case reshaped: // [4,192] stored as [8,96]: same bytes, wrong shape
			return []outTensor{{safetensors.Spec{Name: info.Name, DType: info.DType, Shape: []int{8, 96}}, data}}
		}
		return keep(info, data)
	}
	extra := []outTensor{
		{safetensors.Spec{Name: bogus, DType: safetensors.BF16, Shape: []int{2}}, make([]byte, 4)},
		{safetensors.Spec{Name: "mtp.fc.weight", DType: safetensors.BF16, Shape: []int{2}}, make([]byte, 4)},
		{safetensors.Spec{Name: "model.visual.blocks.0.attn.qkv.weight", DType: safetensors.F64, Shape: []int{1}}, make([]byte, 8)},
	}
	dir := copyCheckpoint(t, goldenHF, 1<<40, edit, nil, extra...)
	be := bindErr(t, dir)
	if len(be.Missing) != 1 || len(be.Unused) != 1 || len(be.Problems) != 1 {
		t.Fatalf("want 1 missing, 1 unused, 1 invalid:\n%v", be)
	}
	mustContain(t, "missing", be.Missing[0], "layers.1.mlp.shared_expert_gate", dropped)
	mustContain(t, "unused", be.Unused[0], bogus)
	mustContain(t, "wrong shape", be.Problems[0], "layers.0.linear_attn.in_proj_a", reshaped, "[8 96]", "[4 192]", dir)
	mustContain(t, "message", be.Error(), dropped, bogus, reshaped)
}

func TestConvShapeCrossCheck(t *testing.T) {
	const conv = "model.language_model.layers.0.linear_attn.conv1d.weight"
	edit := func(info safetensors.TensorInfo, data []byte) []outTensor {
		if info.Name == conv { // HF names with the MLX conv convention
			s := info.Shape
			return []outTensor{{safetensors.Spec{Name: conv, DType: info.DType, Shape: []int{s[0], s[2], s[1]}}, data}}
		}
		return keep(info, data)
	}
	_, err := Open(copyCheckpoint(t, goldenHF, 1<<40, edit, nil))
	if err == nil {
		t.Fatal("opened HF names with an MLX-shaped conv1d")
	}
	mustContain(t, "cross-check", err.Error(), conv, "hf-official", "+1")
}

func TestMixedLayoutsRejected(t *testing.T) {
	extra := outTensor{safetensors.Spec{Name: "language_model.model.norm.weight", DType: safetensors.BF16, Shape: []int{2}}, make([]byte, 4)}
	_, err := Open(copyCheckpoint(t, goldenHF, 1<<40, nil, nil, extra))
	if err == nil {
		t.Fatal("opened a checkpoint mixing layouts")
	}
	mustContain(t, "mixed", err.Error(), "mix layouts", "language_model.model.norm.weight")
}

func TestMLXBitsCrossCheck(t *testing.T) {
	dropOverride := func(cfg map[string]any) {
		delete(cfg["quantization"].(map[string]any), "language_model.model.layers.0.mlp.gate")
	}
	be := bindErr(t, copyCheckpoint(t, goldenMLX, 1<<40, nil, dropOverride))
	if len(be.Problems) != 1 {
		t.Fatalf("want one problem:\n%v", be)
	}
	mustContain(t, "bits", be.Problems[0], "layers.0.mlp.gate", "config says 4 bits", "imply 8 bits")

	noQuant := func(cfg map[string]any) { delete(cfg, "quantization") }
	be = bindErr(t, copyCheckpoint(t, goldenMLX, 1<<40, nil, noQuant))
	mustContain(t, "no quantization block", be.Error(), "no quantization block")
}

// The bare text layout transformers writes: model.* names, per-expert tensors, text config.
func TestHFTextPerExpertLayout(t *testing.T) {
	hf := openGolden(t, goldenHF, HFOfficial)
	I := hf.Config().MoEIntermediate
	edit := func(info safetensors.TensorInfo, data []byte) []outTensor {
		name := strings.Replace(info.Name, "model.language_model.", "model.", 1)
		var out []outTensor
		split := func(proj string, rows, rowBytes, off int) {
			for e := 0; e < info.Shape[0]; e++ {
				start := e*info.Shape[1]*rowBytes + off
				out = append(out, outTensor{
					safetensors.Spec{Name: fmt.Sprintf("%s%d.%s.weight", name[:strings.LastIndex(name, ".")+1], e, proj), DType: info.DType, Shape: []int{rows, info.Shape[2]}},
					data[start : start+rows*rowBytes]})
			}
		}
		rowBytes := 0
		if len(info.Shape) == 3 {
			rowBytes = info.Shape[2] * info.DType.Size()
		}
		switch {
		case strings.HasSuffix(name, "experts.gate_up_proj"):
			split("gate_proj", I, rowBytes, 0)
			split("up_proj", I, rowBytes, I*rowBytes)
		case strings.HasSuffix(name, "experts.down_proj"):
			split("down_proj", info.Shape[1], rowBytes, 0)
		default:
			out = []outTensor{{safetensors.Spec{Name: name, DType: info.DType, Shape: info.Shape}, data}}
		}
		return out
	}
	textConfig := func(cfg map[string]any) {
		text := cfg["text_config"].(map[string]any)
		for k := range cfg {
			delete(cfg, k)
		}
		for k, v := range text {
			cfg[k] = v
		}
	}
	ck := openGolden(t, copyCheckpoint(t, goldenHF, 1<<40, edit, textConfig), HFText)
	text := bindAll(t, ck)
	official := bindAll(t, hf)
	for _, name := range []string{"layers.6.mlp.experts.gate_proj", "layers.6.mlp.experts.up_proj", "layers.6.mlp.experts.down_proj", "layers.6.input_layernorm"} {
		a, b := text[name], official[name]
		if !slices.Equal(a.Shape, b.Shape) {
			t.Fatalf("%s: %v vs %v", name, a.Shape, b.Shape)
		}
		cols := a.Shape[len(a.Shape)-1]
		rows := a.Elements() / cols
		for r := 0; r < rows; r += 7 {
			x, y := row(a, r, cols), row(b, r, cols)
			for c := range x {
				if x[c] != y[c] {
					t.Fatalf("%s row %d col %d: per-expert %g, fused %g", name, r, c, x[c], y[c])
				}
			}
		}
	}
}

// With tie_word_embeddings and no lm_head tensor, lm_head is the embedding.
func TestTiedEmbeddings(t *testing.T) {
	drop := func(info safetensors.TensorInfo, data []byte) []outTensor {
		if info.Name == "lm_head.weight" {
			return nil
		}
		return keep(info, data)
	}
	tie := func(cfg map[string]any) { cfg["text_config"].(map[string]any)["tie_word_embeddings"] = true }
	ws := bindAll(t, openGolden(t, copyCheckpoint(t, goldenHF, 1<<40, drop, tie), HFOfficial))
	if &ws["lm_head"].Data[0] != &ws["embed_tokens"].Data[0] {
		t.Error("tied lm_head does not alias the embedding")
	}
	// Without the tie, the same checkpoint misses lm_head.
	be := bindErr(t, copyCheckpoint(t, goldenHF, 1<<40, drop, nil))
	if len(be.Missing) != 1 || !strings.Contains(be.Missing[0], "lm_head") {
		t.Errorf("untied: %v", be)
	}
}
