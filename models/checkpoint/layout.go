package checkpoint

import (
	"fmt"
	"strings"
)

// Layout is how a checkpoint names and shapes its tensors (model-spec §3).
type Layout int

const (
	UnknownLayout Layout = iota
	// HFOfficial is the official Hugging Face release: model.language_model.* names,
	// lm_head.weight at top level, experts fused (or per expert), norms stored as w.
	HFOfficial
	// HFText is what transformers' save_pretrained writes for the text-only model:
	// model.* names, per-expert (or fused) expert tensors, norms stored as w.
	HFText
	// MLX is the mlx-community layout: language_model.model.* and language_model.lm_head,
	// experts stacked under mlp.switch_mlp, conv1d [C,K,1], norms stored as 1+w, MLX
	// affine quantization given by the config's quantization block.
	MLX
)

func (l Layout) String() string {
	switch l {
	case HFOfficial:
		return "hf-official"
	case HFText:
		return "hf-text"
	case MLX:
		return "mlx"
	}
	return "unknown"
}

// ignoredPrefixes are tensors a text-only engine deliberately leaves alone: the vision
// tower (model.visual.* in HF, vision_tower.* in mlx-vlm conversions) and the multi-token
// prediction head (mtp.*). They are never reported as unused.
var ignoredPrefixes = []string{"model.visual.", "vision_tower.", "mtp."}

// Ignored reports whether a stored tensor is deliberately not bound.
func Ignored(name string) bool {
	for _, p := range ignoredPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// detectLayout classifies a checkpoint by its tensor names alone. Names of two layouts in
// one checkpoint are an error, not a vote.
func detectLayout(names []string) (Layout, error) {
	example := map[Layout]string{}
	for _, n := range names {
		if Ignored(n) {
			continue
		}
		var l Layout
		switch {
		case strings.HasPrefix(n, "language_model."):
			l = MLX
		case strings.HasPrefix(n, "model.language_model."):
			l = HFOfficial
		case strings.HasPrefix(n, "model."):
			l = HFText
		default:
			continue // lm_head.weight is shared by both HF layouts; others end up unused
		}
		if _, ok := example[l]; !ok {
			example[l] = n
		}
	}
	switch len(example) {
	case 0:
		return UnknownLayout, fmt.Errorf("no tensor is named like a Qwen3.5/3.6 MoE checkpoint (model.language_model.*, model.*, or language_model.*)")
	case 1:
		for l := range example {
			return l, nil
		}
	}
	var parts []string
	for _, l := range []Layout{HFOfficial, HFText, MLX} {
		if n, ok := example[l]; ok {
			parts = append(parts, fmt.Sprintf("%q (%s)", n, l))
		}
	}
	return UnknownLayout, fmt.Errorf("tensor names mix layouts: %s", strings.Join(parts, " and "))
}

// modulePrefix is what a canonical module path is prefixed with in this layout.
func (l Layout) modulePrefix() string {
	switch l {
	case HFOfficial:
		return "model.language_model."
	case MLX:
		return "language_model.model."
	}
	return "model."
}

// lmHead is the stored module path of the output projection.
func (l Layout) lmHead() string {
	if l == MLX {
		return "language_model.lm_head"
	}
	return "lm_head"
}

// zeroCentred reports whether a canonical name is one of the five zero-centred norms that
// HF stores as w and MLX as 1+w. linear_attn.norm is not one of them.
func zeroCentred(canonical string) bool {
	if canonical == "norm" {
		return true
	}
	for _, s := range []string{".input_layernorm", ".post_attention_layernorm", ".self_attn.q_norm", ".self_attn.k_norm"} {
		if strings.HasSuffix(canonical, s) {
			return true
		}
	}
	return false
}

// isParameter reports whether a canonical weight is stored without a ".weight" suffix.
func isParameter(canonical string) bool {
	return strings.HasSuffix(canonical, ".linear_attn.dt_bias") || strings.HasSuffix(canonical, ".linear_attn.A_log")
}
