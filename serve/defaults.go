package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"pistil/internal/regularfile"
)

// samplingDefaults are the sampling settings a model ships in generation_config.json.
// A client that sends no temperature, top_p, top_k or min_p gets these, as vLLM does,
// rather than the bare OpenAI defaults (temperature 1 over the whole vocabulary), which
// the model's authors do not recommend. nil: the model sets nothing.
type samplingDefaults struct {
	Temperature *float64 `json:"temperature"`
	TopP        *float64 `json:"top_p"`
	TopK        *float64 `json:"top_k"`
	MinP        *float64 `json:"min_p"`
}

// samplingGiven records which sampling fields a request set itself.
type samplingGiven struct {
	Temperature, TopP, TopK, MinP bool
}

// loadSamplingDefaults reads dir/generation_config.json; a missing file sets nothing.
func loadSamplingDefaults(dir string) (samplingDefaults, error) {
	var d samplingDefaults
	path := filepath.Join(dir, "generation_config.json")
	data, err := regularfile.Read(path, 16<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("generation config: %w", err)
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return d, fmt.Errorf("generation_config.json: %w", err)
	}
	in := func(name string, v *float64, lo, hi float64) error {
		if v != nil && !(*v >= lo && *v <= hi) {
			return fmt.Errorf("generation_config.json: %s %v is outside [%v, %v]", name, *v, lo, hi)
		}
		return nil
	}
	return d, errors.Join(in("temperature", d.Temperature, 0, 2), in("top_p", d.TopP, 0, 1),
		in("top_k", d.TopK, -1, 1<<30), in("min_p", d.MinP, 0, 1))
}

// apply fills the sampling fields the request left out.
func (d samplingDefaults) apply(g *genRequest) {
	s := &g.Sampling
	if d.Temperature != nil && !g.SamplingGiven.Temperature {
		s.Temperature = *d.Temperature
	}
	if d.TopP != nil && !g.SamplingGiven.TopP {
		s.TopP = *d.TopP
		if s.TopP == 0 { // as for a request's top_p 0: the most probable token alone
			s.TopP, s.TopK = 1, 1
		}
	}
	if d.TopK != nil && !g.SamplingGiven.TopK && s.TopK != 1 {
		s.TopK = max(int(*d.TopK), 0)
	}
	if d.MinP != nil && !g.SamplingGiven.MinP {
		s.MinP = *d.MinP
	}
}
