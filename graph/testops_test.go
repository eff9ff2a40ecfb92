package graph

import "fmt"

// testOps is a small op table for graph tests, independent of package ops.
type testOps map[string]*OpDef

func (t testOps) Lookup(name string) (*OpDef, bool) { d, ok := t[name]; return d, ok }

func sameAsArg0(v *Value) (Type, error) { return v.Args[0].Type, nil }

func newTestOps() testOps {
	return testOps{
		"input":  {Name: "input", Flags: Source},
		"weight": {Name: "weight", Flags: Source},
		"state":  {Name: "state", Flags: Source},
		"matmul": {Name: "matmul", Args: 2, Infer: func(v *Value) (Type, error) {
			x, w := v.Args[0].Type, v.Args[1].Type
			if len(w.Shape) != 2 || len(x.Shape) == 0 || x.Shape[len(x.Shape)-1] != w.Shape[1] {
				return Type{}, fmt.Errorf("matmul %s by %s", x, w)
			}
			s := append(Shape{}, x.Shape[:len(x.Shape)-1]...)
			return TensorType(F32, append(s, w.Shape[0])...), nil
		}},
		"add":      {Name: "add", Args: 2, Flags: Elementwise, Infer: sameAsArg0},
		"rms_norm": {Name: "rms_norm", Args: 2, Attrs: []string{"eps"}, Infer: sameAsArg0},
		"reshape": {Name: "reshape", Args: 1, Flags: View, Attrs: []string{"shape"}, Infer: func(v *Value) (Type, error) {
			s, err := ParseShape(v.Attrs.String("shape"))
			return TensorType(v.Args[0].Type.DType, s...), err
		}},
		"select": {Name: "select", Args: 1, Flags: View, Attrs: []string{"index"}, Infer: func(v *Value) (Type, error) {
			t, i := v.Args[0].Type, v.Attrs.Int("index")
			if i < 0 || i >= len(t.Elems) {
				return Type{}, fmt.Errorf("select %d of %s", i, t)
			}
			return t.Elems[i], nil
		}},
		// append(cache, x) -> cache'
		"append": {Name: "append", Args: 2, Flags: StateUpdate, Infer: sameAsArg0},
		// scan(x, state) -> (y, state')
		"scan": {Name: "scan", Args: 2, Flags: StateUpdate, Infer: func(v *Value) (Type, error) {
			return Tuple(v.Args[0].Type, v.Args[1].Type), nil
		}},
		// step(conv, cache) -> (f32 like conv, cache'): updates cache, reads conv
		"step": {Name: "step", Args: 2, Flags: StateUpdate, Infer: func(v *Value) (Type, error) {
			return Tuple(TensorType(F32, v.Args[0].Type.Shape...), v.Args[1].Type), nil
		}},
		// read(x, cache) -> f32 like x
		"read": {Name: "read", Args: 2, Infer: sameAsArg0},
	}
}

const sampleText = `graph sample
v0 = input <f32[T,8]> @tokens
v1 = weight <q4g64[16,8]> @layers.0.w
v2 = weight <bf16[8]> @"odd name #1"
v3 = state <f32[N,8]> @layers.0.cache
v4 = state <bf16[3,16]> @layers.0.conv_state
v5 = rms_norm <f32[T,8]> {eps=1e-06} v0 v2
v6 = matmul <f32[T,16]> v5 v1 @proj
v7 = scan <(f32[T,16],bf16[3,16])> {flag=true, form="recurrent", list=[1,-2], scale=2.0} v6 v4
v8 = select <f32[T,16]> {index=0} v7
v9 = select <bf16[3,16]> {index=1} v7
v10 = append <f32[N,8]> v3 v5
v11 = read <f32[T,8]> v5 v10
v12 = reshape <f32[T,2,8]> {shape="[T,2,8]"} v8
output y = v12
output layers.0.cache = v10
output layers.0.conv_state = v9
output h = v11
`
