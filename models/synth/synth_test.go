package synth

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"pistil/internal/fixtures"
	"slices"
	"strings"
	"testing"

	"pistil/graph"
	"pistil/models/checkpoint"
	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
	"pistil/models/tokenizer"
	"pistil/ops"
)

var golden = map[Layout]string{
	MLXQ4: fixtures.Path("golden/tiny-s1/mlx-q4"),
	HF:    fixtures.Path("golden/tiny-s1/hf"),
}

func writeTiny(t *testing.T, layout Layout, seed uint64, maxShard int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := Write(Options{Preset: "tiny", Layout: layout, Seed: seed, Out: dir, MaxShard: maxShard}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The tiny preset in either layout has exactly the tensors (names, dtypes, shapes) that
// make_golden.py wrote, and a config with the same dimensions.
func TestTinyMatchesGolden(t *testing.T) {
	for layout, gdir := range golden {
		dir := writeTiny(t, layout, 1, 0)
		a, err := safetensors.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := safetensors.OpenDir(gdir)
		if err != nil {
			t.Fatal(err)
		}
		an, bn := a.Names(), b.Names()
		if strings.Join(an, "\n") != strings.Join(bn, "\n") {
			t.Fatalf("%s: %d tensors, golden has %d", layout, len(an), len(bn))
		}
		for _, n := range an {
			x, _, _ := a.Info(n)
			y, _, _ := b.Info(n)
			if x.DType != y.DType || !slices.Equal(x.Shape, y.Shape) {
				t.Errorf("%s %s: %s %v, golden %s %v", layout, n, x.DType, x.Shape, y.DType, y.Shape)
			}
		}
		a.Close()
		b.Close()
		got, err := qwen35moe.LoadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := qwen35moe.LoadConfig(gdir)
		got.Quant, want.Quant = nil, nil // compared through Bind's bits cross-check below
		if g, w := configDims(got), configDims(want); g != w {
			t.Errorf("%s config:\n got %s\nwant %s", layout, g, w)
		}
	}
}

// configDims prints the config fields that fix tensor shapes and behaviour.
func configDims(c *qwen35moe.Config) string {
	return fmt.Sprint(c.HiddenSize, c.NumLayers, c.NumHeads, c.NumKVHeads, c.HeadDim, c.PartialRotaryFactor, c.RopeTheta,
		c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernel,
		c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediate, c.SharedIntermediate, c.RMSNormEps, c.VocabSize,
		c.TieWordEmbeddings, c.Layers)
}

func openBound(t *testing.T, dir string) (*checkpoint.Checkpoint, map[string]*ops.Tensor) {
	t.Helper()
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	ws, err := ck.Bind(qwen35moe.WeightNames(ck.Config()))
	if err != nil {
		t.Fatal(err)
	}
	return ck, ws
}

// stats returns the mean and std of a tensor's decoded rows.
func stats(w *ops.Tensor) (mean, std float64) {
	cols := w.Shape[len(w.Shape)-1]
	rows := w.Elements() / cols
	row := make([]float32, cols)
	var s, s2 float64
	for r := 0; r < rows; r++ {
		w.Row(r, cols, row)
		for _, v := range row {
			s += float64(v)
			s2 += float64(v) * float64(v)
		}
	}
	n := float64(rows * cols)
	mean = s / n
	return mean, math.Sqrt(s2/n - mean*mean)
}

// Both layouts round-trip through Open/Bind with no missing or unused tensor, and the
// values have the scales synth promises (what the engine sees, after the transforms).
func TestTinyRoundTripAndScales(t *testing.T) {
	for _, layout := range []Layout{MLXQ4, HF} {
		ck, ws := openBound(t, writeTiny(t, layout, 7, 0))
		wantLayout := map[Layout]checkpoint.Layout{MLXQ4: checkpoint.MLX, HF: checkpoint.HFOfficial}[layout]
		if ck.Layout() != wantLayout {
			t.Fatalf("%s: opened as %s", layout, ck.Layout())
		}
		H := float64(ck.Config().HiddenSize)
		for _, tc := range []struct {
			name      string
			mean, std float64
		}{
			{"embed_tokens", 0, 1},
			{"layers.3.self_attn.q_proj", 0, 1 / math.Sqrt(H)},
			{"layers.0.mlp.gate", 0, 1 / math.Sqrt(H)},
			{"layers.5.mlp.experts.up_proj", 0, 1 / math.Sqrt(H)},
			{"layers.5.mlp.experts.down_proj", 0, 1 / math.Sqrt(float64(ck.Config().MoEIntermediate))},
			{"lm_head", 0, 4 / math.Sqrt(H)},
			{"layers.2.input_layernorm", 1, 0.1},
			{"norm", 1, 0.1},
			{"layers.1.linear_attn.norm", 1, 0.1},
		} {
			m, s := stats(ws[tc.name])
			// Five standard errors of the sample mean and of the sample standard deviation
			// (sd(s) ≈ σ/√(2n)), plus a little for quantization: loose enough for any seed,
			// tight enough to catch a wrong scale.
			n := float64(ws[tc.name].Elements())
			if math.Abs(m-tc.mean) > 5*tc.std/math.Sqrt(n)+0.01*tc.std || math.Abs(s-tc.std) > (5/math.Sqrt(2*n)+0.05)*tc.std {
				t.Errorf("%s %s: mean %.4f std %.4f, want about %.4f and %.4f", layout, tc.name, m, s, tc.mean, tc.std)
			}
		}
		aLog := ws["layers.0.linear_attn.A_log"]
		for i := 0; i < aLog.Elements(); i++ {
			if v := aLog.Float(i); v < 0 || v > float32(math.Log(16))+0.01 {
				t.Errorf("%s A_log[%d] = %g, want log of [1, 16]", layout, i, v)
			}
		}
	}
}

func TestDeterministicAndSeeded(t *testing.T) {
	read := func(dir string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, safetensors.SingleFile))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b, c := read(writeTiny(t, MLXQ4, 3, 0)), read(writeTiny(t, MLXQ4, 3, 0)), read(writeTiny(t, MLXQ4, 4, 0))
	if !bytes.Equal(a, b) {
		t.Error("the same seed wrote different checkpoints")
	}
	if bytes.Equal(a, c) {
		t.Error("different seeds wrote the same checkpoint")
	}
}

func TestShardedOutput(t *testing.T) {
	dir := writeTiny(t, HF, 1, 2<<20)
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
	if len(shards) < 3 {
		t.Fatalf("%d shards at a 2 MB limit", len(shards))
	}
	for _, s := range shards {
		if st, _ := os.Stat(s); st.Size() > 2<<20+64<<10 { // a header rides on top of the limit
			t.Errorf("%s is %d bytes", s, st.Size())
		}
	}
	openBound(t, dir)
}

func TestRefusesUsedFolderAndBadOptions(t *testing.T) {
	dir := writeTiny(t, MLXQ4, 1, 0)
	if _, err := Write(Options{Preset: "tiny", Layout: MLXQ4, Out: dir}); err == nil || !strings.Contains(err.Error(), "already holds") {
		t.Errorf("overwrote a checkpoint: %v", err)
	}
	if _, err := Write(Options{Preset: "huge", Layout: MLXQ4, Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "huge") {
		t.Errorf("unknown preset: %v", err)
	}
	if _, err := Write(Options{Preset: "tiny", Layout: "gguf", Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "gguf") {
		t.Errorf("unknown layout: %v", err)
	}
}

// The full preset's tensors add up to model-spec §6.2's MLX 4-bit size, without writing it.
func TestFullPresetSize(t *testing.T) {
	d, _ := PresetDims("full")
	_, cfg, err := configJSON(d, MLXQ4, 0)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, tp := range plan(cfg, MLXQ4, 0) {
		total += tp.spec.Bytes()
	}
	if want := int64(19_508_789_376); total != want {
		t.Errorf("full MLX preset is %d bytes, model-spec §6.2 gives %d", total, want)
	}
}

// The synthetic tokenizer ships with the checkpoint, and the model stops on its
// end-of-turn tokens.
func TestTokenizerAndStopIDs(t *testing.T) {
	dir := writeTiny(t, MLXQ4, 1, 0)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := qwen35moe.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() > cfg.VocabSize {
		t.Errorf("tokenizer has %d ids, the model %d", tok.VocabSize(), cfg.VocabSize)
	}
	imEnd, _ := tok.TokenID("<|im_end|>")
	eot, _ := tok.TokenID("<|endoftext|>")
	if fmt.Sprint(cfg.EOSTokenIDs) != fmt.Sprint([]int{int(imEnd), int(eot)}) {
		t.Errorf("stop ids %v, want <|im_end|> %d and <|endoftext|> %d", cfg.EOSTokenIDs, imEnd, eot)
	}
	if ids := tok.Encode("hello world"); len(ids) == 0 || tok.Decode(ids) != "hello world" {
		t.Errorf("tokenizer round trip: %v", ids)
	}
}

// lm_head rows past the tokenizer's ids are zero in both layouts, and nothing else is.
func TestLMHeadPaddingRows(t *testing.T) {
	d, _ := PresetDims("tiny")
	_, cfg, err := configJSON(d, MLXQ4, 0)
	if err != nil {
		t.Fatal(err)
	}
	const live = 300
	for _, layout := range []Layout{MLXQ4, HF} {
		padded := 0
		for _, tp := range plan(cfg, layout, live) {
			if tp.liveRows == 0 {
				continue
			}
			padded++
			if !strings.Contains(tp.spec.Name, "lm_head") || tp.liveRows != live {
				t.Fatalf("%s: %s padded from row %d", layout, tp.spec.Name, tp.liveRows)
			}
			if tp.content == codes {
				continue // codes times a zero scale and bias are zero
			}
			buf := make([]byte, tp.spec.Bytes())
			fill(&tp, 1, 0, 0, buf)
			cols := tp.spec.Shape[len(tp.spec.Shape)-1]
			dt := map[safetensors.DType]graph.DType{safetensors.BF16: graph.BF16, safetensors.F32: graph.F32}[tp.spec.DType]
			vals := &ops.Tensor{DType: dt, Shape: tp.spec.Shape, Data: buf}
			for _, r := range []int{0, live - 1, live, cfg.VocabSize - 1} {
				zero := true
				for c := 0; c < cols; c++ {
					zero = zero && vals.Float(r*cols+c) == 0
				}
				if zero != (r >= live) {
					t.Errorf("%s %s row %d: all zero = %v", layout, tp.spec.Name, r, zero)
				}
			}
		}
		if want := map[Layout]int{MLXQ4: 3, HF: 1}[layout]; padded != want {
			t.Errorf("%s: %d padded tensors, want %d", layout, padded, want)
		}
	}
}

// A checkpoint of any valid dimensions, in every layout, binds with no missing or unused
// tensor and has the dimensions asked for; mlx-q8 quantizes every matrix at 8 bits.
func TestAnyDimsRoundTrip(t *testing.T) {
	d := Dims{Vocab: 400, Hidden: 128, Layers: 3, AttentionInterval: 2, Heads: 4, KVHeads: 2, HeadDim: 128,
		LinearKeyHeads: 4, LinearValueHeads: 4, LinearKeyDim: 64, LinearValueDim: 32, ConvKernel: 3,
		Experts: 8, TopK: 2, ExpertWidth: 128, SharedWidth: 64}
	for _, layout := range Layouts {
		dir := filepath.Join(t.TempDir(), "ck")
		res, err := Write(Options{Dims: &d, Preset: "ignored", Layout: layout, Seed: 1, Out: dir})
		if err != nil {
			t.Fatalf("%s: %v", layout, err)
		}
		if res.Dims != d {
			t.Errorf("%s: wrote %v", layout, res.Dims)
		}
		ck, ws := openBound(t, dir)
		c := ck.Config()
		got := Dims{Vocab: c.VocabSize, Hidden: c.HiddenSize, Layers: c.NumLayers, AttentionInterval: c.FullAttentionInterval,
			Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim, LinearKeyHeads: c.LinearNumKeyHeads,
			LinearValueHeads: c.LinearNumValueHeads, LinearKeyDim: c.LinearKeyHeadDim, LinearValueDim: c.LinearValueHeadDim,
			ConvKernel: c.LinearConvKernel, Experts: c.NumExperts, TopK: c.NumExpertsPerTok, ExpertWidth: c.MoEIntermediate,
			SharedWidth: c.SharedIntermediate}
		if got != d {
			t.Errorf("%s: config reads back as %v", layout, got)
		}
		if want := []qwen35moe.LayerKind{qwen35moe.LinearAttention, qwen35moe.FullAttention, qwen35moe.LinearAttention}; !slices.Equal(c.Layers, want) {
			t.Errorf("%s: layers %v", layout, c.Layers)
		}
		wantDT := map[Layout]graph.DType{MLXQ4: graph.Q4, MLXQ8: graph.Q8, HF: graph.BF16}[layout]
		for name, dt := range map[string]graph.DType{
			"layers.1.self_attn.q_proj": wantDT, "layers.0.mlp.experts.down_proj": wantDT, "lm_head": wantDT,
			"layers.0.mlp.gate": map[Layout]graph.DType{MLXQ4: graph.Q8, MLXQ8: graph.Q8, HF: graph.BF16}[layout],
		} {
			if w := ws[name]; w.DType != dt {
				t.Errorf("%s: %s is %s, want %s", layout, name, w.DType, dt)
			}
		}
		if s := ws["layers.1.self_attn.q_proj"].Shape; !slices.Equal(s, []int{2 * 4 * 128, 128}) {
			t.Errorf("%s: q_proj shape %v", layout, s)
		}
		if s := ws["layers.0.linear_attn.in_proj_qkv"].Shape; !slices.Equal(s, []int{2*4*64 + 4*32, 128}) {
			t.Errorf("%s: in_proj_qkv shape %v", layout, s)
		}
		// 8-bit weights keep the promised scale too.
		if m, s := stats(ws["layers.1.self_attn.q_proj"]); math.Abs(m) > 0.01 || math.Abs(s-1/math.Sqrt(128)) > 0.1/math.Sqrt(128) {
			t.Errorf("%s: q_proj mean %.4f std %.4f", layout, m, s)
		}
	}
}

// Every invalid dimension is refused before anything is written, naming the flag.
func TestInvalidDims(t *testing.T) {
	base, _ := PresetDims("tiny")
	for _, tc := range []struct {
		change func(*Dims)
		want   string
	}{
		{func(d *Dims) { d.Hidden = 0 }, "--hidden"},
		{func(d *Dims) { d.Experts = -3 }, "--experts"},
		{func(d *Dims) { d.Heads = 6; d.KVHeads = 4 }, "--kv-heads"},
		{func(d *Dims) { d.LinearValueHeads = 3 }, "--linear-value-heads"},
		{func(d *Dims) { d.TopK = 17 }, "--top-k"},
		{func(d *Dims) { d.HeadDim = 36 }, "--head-dim"},
		{func(d *Dims) { d.AttentionInterval = 9 }, "--attention-every"},
	} {
		d := base
		tc.change(&d)
		dir := filepath.Join(t.TempDir(), "ck")
		_, err := Write(Options{Dims: &d, Layout: MLXQ4, Out: dir})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v does not name %s", d, err, tc.want)
		}
		if _, serr := os.Stat(dir); serr == nil {
			t.Errorf("%v: the output folder was created", d)
		}
	}
	d := base
	d.Vocab = 100
	if _, err := Write(Options{Dims: &d, Layout: MLXQ4, Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "--vocab 100") {
		t.Errorf("vocab below the tokenizer's ids: %v", err)
	}
}

// A dims file sets the keys it names; unknown keys are refused unless the file is a
// model's config.json, whose text config is read.
func TestReadDims(t *testing.T) {
	d, _ := PresetDims("tiny")
	if err := ReadDims([]byte(`{"hidden_size": 256, "num_experts": 32}`), &d); err != nil {
		t.Fatal(err)
	}
	if d.Hidden != 256 || d.Experts != 32 || d.Layers != 8 {
		t.Errorf("dims file gave %v", d)
	}
	if err := ReadDims([]byte(`{"hidden": 256}`), &d); err == nil || !strings.Contains(err.Error(), "hidden") || !strings.Contains(err.Error(), "hidden_size") {
		t.Errorf("unknown key: %v", err)
	}
	if err := ReadDims([]byte(`{"hidden_size": "wide"}`), &d); err == nil || !strings.Contains(err.Error(), "hidden_size") {
		t.Errorf("a string dimension: %v", err)
	}
	if err := ReadDims([]byte(`[1]`), &d); err == nil {
		t.Error("a JSON array was accepted")
	}
	cfg, err := os.ReadFile(filepath.Join(golden[HF], "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fromCfg Dims
	if err := ReadDims(cfg, &fromCfg); err != nil {
		t.Fatal(err)
	}
	if tiny, _ := PresetDims("tiny"); fromCfg != tiny {
		t.Errorf("the golden tiny config.json reads as %v, want the tiny preset %v", fromCfg, tiny)
	}
}
