package graph

// OpFlags describe properties passes rely on. They live in the op table (package ops),
// never in switch statements spread across passes.
type OpFlags uint32

const (
	// Source ops (weight, state, input, const) have no args and produce bound data.
	Source OpFlags = 1 << iota
	// Elementwise ops map each output element from the same-index input elements.
	Elementwise
	// Fusable ops may be folded into a neighbour by a fusion pass.
	Fusable
	// ReorderSafe ops may be moved within a bounded window by a reorder pass.
	ReorderSafe
	// StateUpdate ops take a state value and return its updated version (in place).
	StateUpdate
	// View ops produce no data of their own: their result aliases an argument's storage
	// (reshape, select of a tuple element, a contiguous slice).
	View
	// StepScalars ops read the per-step scalars (position C, token count T) at run time.
	StepScalars
)

// OpDef is what the graph needs to know of an op to check a value of it.
type OpDef struct {
	Name  string
	Doc   string // one line of meaning, shown by dumps and `pistil dump --ops`
	Args  int    // number of args; -1 for variadic
	Flags OpFlags
	// Infer computes the result type from the args' types and the attrs, or says why the
	// combination is invalid.
	Infer func(v *Value) (Type, error)
	// Attrs lists the attribute names the op requires.
	Attrs []string
}

// Has reports whether all of f are set.
func (d *OpDef) Has(f OpFlags) bool { return d.Flags&f == f }

// OpSet looks up op definitions by name. Package ops provides the table.
type OpSet interface {
	Lookup(name string) (*OpDef, bool)
}
