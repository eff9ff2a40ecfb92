package graph

import (
	"errors"
	"fmt"
	"strings"
)

// maxCheckErrors bounds the report: past a few, the rest are usually consequences.
const maxCheckErrors = 20

// Check verifies every invariant passes rely on and returns all violations found (up to
// a bound) as one error, each naming the value and the rule:
//   - IDs are dense and match list positions; every arg is a value of this graph defined
//     on an earlier line (topological order);
//   - every op is in the table, has the table's arg count and required attrs, attr values
//     the text format can carry, and the type its Infer computes from its args
//     (dtypes and shapes); source ops have no args;
//   - session state: each StateUpdate op updates exactly one state version, each version
//     is updated at most once, every other read of a version comes before its update (the
//     update is in place), and no output reads a superseded version; the final version of
//     every updated state is an output under the state's name;
//   - outputs are values of the graph with unique names.
func Check(g *Graph, ops OpSet) error {
	var errs []string
	fail := func(v *Value, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if v != nil {
			msg = fmt.Sprintf("%s (%s): %s", v.Ref(), v.Op, msg)
		}
		errs = append(errs, msg)
	}
	dense := true
	for i, v := range g.Values {
		if v == nil {
			fail(nil, "value at position %d is nil", i)
			dense = false
			continue
		}
		if int(v.ID) != i {
			fail(v, "ID %d at position %d: IDs must be dense in list order", v.ID, i)
			dense = false
		}
	}
	if !dense {
		return report(g, errs)
	}
	for i, v := range g.Values {
		argsOK := true
		for j, a := range v.Args {
			switch {
			case a == nil:
				fail(v, "arg %d is nil", j)
				argsOK = false
			case !inGraph(g, a):
				fail(v, "arg %d (%s) is not a value of this graph", j, a.Ref())
				argsOK = false
			case int(a.ID) >= i:
				fail(v, "arg %d (%s) is defined after its use: values must be in topological order", j, a.Ref())
				argsOK = false
			}
		}
		def, ok := ops.Lookup(v.Op)
		if !ok {
			fail(v, "unknown op %q", v.Op)
			continue
		}
		if def.Args >= 0 && len(v.Args) != def.Args {
			fail(v, "has %d args, op %s takes %d", len(v.Args), v.Op, def.Args)
			argsOK = false
		}
		for _, k := range def.Attrs {
			if _, ok := v.Attrs[k]; !ok {
				fail(v, "missing attr %q", k)
				argsOK = false
			}
		}
		for _, k := range v.Attrs.Keys() {
			if !ValidAttr(v.Attrs[k]) {
				fail(v, "attr %s has unsupported type %T", k, v.Attrs[k])
			}
		}
		if def.Has(Source) {
			if len(v.Args) != 0 {
				fail(v, "source op with %d args", len(v.Args))
			}
			if v.Name == "" {
				fail(v, "source value without a binding name")
			} else if def.Infer != nil {
				if _, err := inferSafely(def, v); err != nil {
					fail(v, "source type: %v", err)
				}
			}
			continue
		}
		if !argsOK || def.Infer == nil {
			if def.Infer == nil {
				fail(v, "op %s has no Infer in the table", v.Op)
			}
			continue
		}
		want, err := inferSafely(def, v)
		if err != nil {
			fail(v, "type inference: %v", err)
			continue
		}
		if !want.Equal(v.Type) {
			fail(v, "type is %s but its args give %s", v.Type, want)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, checkState(g, ops)...)
	}
	seen := map[string]bool{}
	for _, o := range g.Outputs {
		if seen[o.Name] {
			fail(nil, "output %s listed twice", o.Name)
		}
		seen[o.Name] = true
		if !inGraph(g, o.Value) {
			fail(nil, "output %s is not a value of this graph", o.Name)
		}
	}
	return report(g, errs)
}

// inferSafely runs an op's Infer, turning a panic (an Infer bug meeting odd input) into
// an error that names the value instead of crashing the compiler.
func inferSafely(def *OpDef, v *Value) (t Type, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("Infer panicked: %v", r)
		}
	}()
	probe := &Value{ID: v.ID, Op: v.Op, Args: v.Args, Attrs: v.Attrs, Name: v.Name}
	if def.Has(Source) {
		probe.Type = v.Type // a source's type is given, and its Infer validates it
	}
	return def.Infer(probe)
}

func checkState(g *Graph, ops OpSet) []string {
	stateOf, stateArg, err := StateVersions(g, ops)
	if err != nil {
		return []string{err.Error()}
	}
	var errs []string
	updater := make([]*Value, len(g.Values)) // version ID -> the op that updates it
	for i, v := range g.Values {
		if stateArg[i] < 0 {
			continue
		}
		s := v.Args[stateArg[i]]
		if prev := updater[s.ID]; prev != nil {
			errs = append(errs, fmt.Sprintf("%s (%s): updates state version %s (%s) already updated by %s: each version is updated at most once",
				v.Ref(), v.Op, s.Ref(), stateOf[s.ID].Name, prev.Ref()))
			continue
		}
		updater[s.ID] = v
	}
	// Reads through views count as reads of the viewed version.
	versionOf := make([]*Value, len(g.Values))
	for i, v := range g.Values {
		if stateOf[i] != nil {
			versionOf[i] = v
			continue
		}
		if def, ok := ops.Lookup(v.Op); ok && def.Has(View) && v.Op != OpSelect && len(v.Args) > 0 {
			versionOf[i] = versionOf[v.Args[0].ID]
		}
	}
	for i, v := range g.Values {
		for j, a := range v.Args {
			ver := versionOf[a.ID]
			if ver == nil || stateArg[i] == j && a == ver {
				continue
			}
			if u := updater[ver.ID]; u != nil && u.ID < v.ID {
				errs = append(errs, fmt.Sprintf("%s (%s): reads %s version %s after %s updated it in place: read the updated version",
					v.Ref(), v.Op, stateOf[ver.ID].Name, ver.Ref(), u.Ref()))
			}
		}
	}
	final := map[string]*Value{}
	for i, v := range g.Values {
		if s := stateOf[i]; s != nil && updater[i] == nil && s != v {
			final[s.Name] = v
		}
	}
	for _, o := range g.Outputs {
		if o.Value == nil || !inGraph(g, o.Value) {
			continue
		}
		ver := versionOf[o.Value.ID]
		if ver == nil {
			continue
		}
		if u := updater[ver.ID]; u != nil {
			errs = append(errs, fmt.Sprintf("output %s is state version %s, superseded by %s's update", o.Name, ver.Ref(), u.Ref()))
		}
		if name := stateOf[ver.ID].Name; o.Value == final[name] && o.Name != name {
			errs = append(errs, fmt.Sprintf("output %s is the final version of state %s: name it %s", o.Name, name, name))
		}
	}
	for _, name := range sortedKeys(final) {
		if g.Output(name) != final[name] {
			errs = append(errs, fmt.Sprintf("state %s is updated but its final version %s is not the output named %s", name, final[name].Ref(), name))
		}
	}
	return errs
}

func sortedKeys(m map[string]*Value) []string {
	a := Attrs{}
	for k := range m {
		a[k] = true
	}
	return a.Keys()
}

func report(g *Graph, errs []string) error {
	if len(errs) == 0 {
		return nil
	}
	more := ""
	if len(errs) > maxCheckErrors {
		more = fmt.Sprintf("\n  ... and %d more", len(errs)-maxCheckErrors)
		errs = errs[:maxCheckErrors]
	}
	return errors.New("check " + g.Name + ":\n  " + strings.Join(errs, "\n  ") + more)
}
