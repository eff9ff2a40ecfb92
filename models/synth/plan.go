package synth

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"

	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
)

// Layout is a checkpoint layout synth can write.
type Layout string

const (
	// MLXQ4 is the mlx-community layout, MLX affine 4-bit with 8-bit router gates.
	MLXQ4 Layout = "mlx-q4"
	// MLXQ8 is the same layout at 8 bits (mlx_lm.convert -q --q-bits 8): affine, group
	// 64, every quantizable matrix at 8 bits, the gates as in MLXQ4.
	MLXQ8 Layout = "mlx-q8"
	// HF is the official Hugging Face layout in bf16 (fused experts, norms stored as w).
	HF Layout = "hf"
)

// Layouts lists the layouts synth writes.
var Layouts = []Layout{MLXQ4, MLXQ8, HF}

// ParseLayout checks a layout name.
func ParseLayout(s string) (Layout, error) {
	for _, l := range Layouts {
		if Layout(s) == l {
			return l, nil
		}
	}
	return "", fmt.Errorf("unknown layout %q (have mlx-q4, mlx-q8, hf)", s)
}

// bits is the default quantization width of an MLX layout, 0 for a dense one.
func (l Layout) bits() int {
	switch l {
	case MLXQ4:
		return 4
	case MLXQ8:
		return 8
	}
	return 0
}

const groupSize = 64

// eightBitModules are quantized at 8 bits in MLX checkpoints (model-spec §3.2).
var eightBitModules = []string{"mlp.gate", "mlp.shared_expert_gate"}

// content says how a stored tensor's bytes are generated.
type content int

const (
	// uniformValues: dense float values, uniform with the given mean and std.
	uniformValues content = iota
	// aLogValues: log(U(1, 16)), so -exp(A_log) spans the decay range of a trained model.
	aLogValues
	// codes: uniformly random quantized codes (random bytes).
	codes
	// scales and biases of the group g: s_g = ±std/codeStd * (0.75 + 0.5*u_g) and
	// b_g = -s_g*(2^bits-1)/2, so the dequantized weights have mean 0 and the target std.
	scales
	biases
)

// tensorPlan is one stored tensor and how to fill it.
type tensorPlan struct {
	spec      safetensors.Spec
	content   content
	mean, std float64
	bits      int
	seed      uint64 // a module's weight, scales and biases share it (scales and biases must agree)
	// liveRows, when positive, zeroes every row from it on (values, or scales and biases):
	// lm_head rows past the tokenizer's ids are padding, as in the real model, so sampling
	// stays on ids the synthetic tokenizer can decode.
	liveRows int
}

// valueScale is the mean and std of a canonical weight's (dequantized) values, chosen as a
// trained model's would be: unit embeddings, 1/sqrt(fan-in) matrices, peaked logits, norm
// weights near 1 (HF zero-centred norms near 0, since the model adds 1).
func valueScale(name string, shape []int, layout Layout, cfg *qwen35moe.Config) (mean, std float64) {
	switch {
	case name == "embed_tokens":
		return 0, 1
	case name == "lm_head":
		return 0, 4 / math.Sqrt(float64(cfg.HiddenSize))
	case isZeroCentredNorm(name):
		if layout == HF {
			return 0, 0.1
		}
		return 1, 0.1
	case strings.HasSuffix(name, "linear_attn.norm"):
		return 1, 0.1
	case strings.HasSuffix(name, "linear_attn.conv1d"):
		return 0, 0.3
	case strings.HasSuffix(name, "linear_attn.dt_bias"):
		return 0, 0.5
	}
	return 0, 1 / math.Sqrt(float64(shape[len(shape)-1]))
}

func isZeroCentredNorm(name string) bool {
	if name == "norm" {
		return true
	}
	for _, s := range []string{"input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm"} {
		if strings.HasSuffix(name, "."+s) {
			return true
		}
	}
	return false
}

// plan lists the stored tensors of a layout in model order, each with how to fill it.
// liveVocab is the number of ids the tokenizer defines; lm_head rows past it are zero.
func plan(cfg *qwen35moe.Config, layout Layout, liveVocab int) []tensorPlan {
	var out []tensorPlan
	for _, w := range qwen35moe.Weights(cfg) {
		// Seeded by name, so a weight's values do not depend on its place in the list.
		h := fnv.New64a()
		h.Write([]byte(w.Name))
		seed := h.Sum64()
		first := len(out)
		mean, std := valueScale(w.Name, w.Shape, layout, cfg)
		dense := func(name string, dt safetensors.DType, shape []int) {
			c := uniformValues
			if strings.HasSuffix(w.Name, "linear_attn.A_log") {
				c = aLogValues
			}
			out = append(out, tensorPlan{spec: safetensors.Spec{Name: name, DType: dt, Shape: shape}, content: c, mean: mean, std: std, seed: seed})
		}
		if layout == HF {
			hfTensors(w, cfg, dense)
			padLMHead(w, out[first:], liveVocab)
			continue
		}
		module := "language_model.model." + w.Name
		switch {
		case w.Name == "lm_head":
			module = "language_model.lm_head"
		case strings.Contains(w.Name, ".mlp.experts."):
			module = "language_model.model." + strings.Replace(w.Name, ".mlp.experts.", ".mlp.switch_mlp.", 1)
		}
		switch {
		case strings.HasSuffix(w.Name, "linear_attn.conv1d"):
			dense(module+".weight", safetensors.BF16, []int{w.Shape[0], w.Shape[1], 1})
		case strings.HasSuffix(w.Name, "linear_attn.A_log"):
			dense(module, safetensors.F32, w.Shape)
		case strings.HasSuffix(w.Name, "linear_attn.dt_bias"):
			dense(module, safetensors.BF16, w.Shape)
		case len(w.Shape) >= 2 && w.Shape[len(w.Shape)-1]%groupSize == 0:
			out = append(out, quantized(module, w, layout.bits(), mean, std, seed)...)
		default:
			dense(module+".weight", safetensors.BF16, w.Shape)
		}
		padLMHead(w, out[first:], liveVocab)
	}
	return out
}

// padLMHead zeroes lm_head rows past the tokenizer's ids.
func padLMHead(w qwen35moe.Weight, tensors []tensorPlan, liveVocab int) {
	if w.Name != "lm_head" || liveVocab <= 0 || liveVocab >= w.Shape[0] {
		return
	}
	for i := range tensors {
		tensors[i].liveRows = liveVocab
	}
}

// hfTensors names a canonical weight's tensors in the official Hugging Face layout: bf16
// throughout, conv1d [C,1,K], experts fused as gate_up_proj (emitted with gate_proj) and
// down_proj, both without a .weight suffix.
func hfTensors(w qwen35moe.Weight, cfg *qwen35moe.Config, dense func(string, safetensors.DType, []int)) {
	module := "model.language_model." + w.Name
	switch {
	case w.Name == "lm_head":
		dense("lm_head.weight", safetensors.BF16, w.Shape)
	case strings.HasSuffix(w.Name, ".mlp.experts.gate_proj"):
		base := strings.TrimSuffix(module, "gate_proj")
		dense(base+"gate_up_proj", safetensors.BF16, []int{w.Shape[0], 2 * w.Shape[1], w.Shape[2]})
	case strings.HasSuffix(w.Name, ".mlp.experts.up_proj"):
		// part of gate_up_proj
	case strings.HasSuffix(w.Name, ".mlp.experts.down_proj"):
		dense(module, safetensors.BF16, w.Shape)
	case strings.HasSuffix(w.Name, "linear_attn.conv1d"):
		dense(module+".weight", safetensors.BF16, []int{w.Shape[0], 1, w.Shape[1]})
	case strings.HasSuffix(w.Name, "linear_attn.A_log"), strings.HasSuffix(w.Name, "linear_attn.dt_bias"):
		dense(module, safetensors.BF16, w.Shape)
	default:
		dense(module+".weight", safetensors.BF16, w.Shape)
	}
}

// quantized lays out an MLX affine module at the layout's width (the gates always at 8
// bits): U32 codes [..., in*bits/32] and bf16 scales and biases [..., in/64].
func quantized(module string, w qwen35moe.Weight, bits int, mean, std float64, seed uint64) []tensorPlan {
	for _, m := range eightBitModules {
		if strings.HasSuffix(module, "."+m) {
			bits = 8
		}
	}
	lead, in := w.Shape[:len(w.Shape)-1], w.Shape[len(w.Shape)-1]
	shape := func(last int) []int { return append(append([]int(nil), lead...), last) }
	return []tensorPlan{
		{spec: safetensors.Spec{Name: module + ".weight", DType: safetensors.U32, Shape: shape(in * bits / 32)}, content: codes, bits: bits, seed: seed},
		{spec: safetensors.Spec{Name: module + ".scales", DType: safetensors.BF16, Shape: shape(in / groupSize)}, content: scales, mean: mean, std: std, bits: bits, seed: seed},
		{spec: safetensors.Spec{Name: module + ".biases", DType: safetensors.BF16, Shape: shape(in / groupSize)}, content: biases, mean: mean, std: std, bits: bits, seed: seed},
	}
}
