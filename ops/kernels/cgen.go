package kernels

import (
	"fmt"
	"reflect"
	"strings"
)

// headerConstants are the Go constants the kernels see as #defines.
var headerConstants = []struct {
	name  string
	value int32
}{
	{"DT_F32", DTF32}, {"DT_BF16", DTBF16}, {"DT_F16", DTF16}, {"DT_Q4", DTQ4}, {"DT_Q8", DTQ8}, {"DT_I32", DTI32},
	{"UNARY_NEG", UnaryNeg}, {"UNARY_EXP", UnaryExp}, {"UNARY_SIGMOID", UnarySigmoid}, {"UNARY_SILU", UnarySiLU},
	{"UNARY_SOFTPLUS", UnarySoftplus},
	{"BINARY_ADD", BinaryAdd}, {"BINARY_MUL", BinaryMul}, {"BINARY_SWIGLU", BinarySwiGLU},
	{"MAX_RANK", MaxRank},
	{"MV_SEPARATE", MatvecSeparate}, {"MV_SWIGLU", MatvecSwiGLU},
}

// CDecls is the generated header: the constants and one C struct per args type, in the
// dialect's scalar types (u64, i32, f32). It is the only C-side definition of the args.
func CDecls() string {
	var b strings.Builder
	b.WriteString("// Generated from ops/kernels/args.go by CDecls; do not edit.\n")
	for _, c := range headerConstants {
		fmt.Fprintf(&b, "#define %s %d\n", c.name, c.value)
	}
	for _, a := range argTypes {
		t := reflect.TypeOf(a)
		fmt.Fprintf(&b, "struct %s {\n", t.Name())
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			ct, suffix := cType(f.Type)
			fmt.Fprintf(&b, "\t%s %s%s;\n", ct, f.Name, suffix)
		}
		b.WriteString("};\n")
	}
	return b.String()
}

// cType maps a Go field type to its dialect C type (and an array suffix).
func cType(t reflect.Type) (string, string) {
	switch t.Kind() {
	case reflect.Uint64:
		return "u64", ""
	case reflect.Int32:
		return "i32", ""
	case reflect.Float32:
		return "f32", ""
	case reflect.Array:
		et, _ := cType(t.Elem())
		return et, fmt.Sprintf("[%d]", t.Len())
	case reflect.Struct:
		return "struct " + t.Name(), ""
	}
	panic(fmt.Sprintf("kernels: args field of type %s has no C type", t))
}

// FieldLayout is one field's offset in an args struct.
type FieldLayout struct {
	Struct, Field string
	Offset        uintptr
}

// Layouts lists, for every args struct, each field's Go offset and the struct's size
// (Field "sizeof"): what the device-side probe (ProbeSource) must report.
func Layouts() []FieldLayout {
	var out []FieldLayout
	for _, a := range argTypes {
		t := reflect.TypeOf(a)
		for i := 0; i < t.NumField(); i++ {
			out = append(out, FieldLayout{t.Name(), t.Field(i).Name, t.Field(i).Offset})
		}
		out = append(out, FieldLayout{t.Name(), "sizeof", t.Size()})
	}
	return out
}

// ProbeSource is a kernel (dialect) that writes offsetof/sizeof of every entry of
// Layouts, in order, to a u64 buffer: run on a device it checks the compiler's layout
// of the generated structs against Go's.
func ProbeSource() string {
	var b strings.Builder
	b.WriteString("struct ProbeArgs { u64 Out; };\nKERNEL(probe_layout, ProbeArgs) {\n\tif (THREAD_ID != 0 || GROUP_ID_X != 0) return;\n\tGLOBAL u64* o = PTR(u64, a.Out);\n")
	for i, l := range Layouts() {
		if l.Field == "sizeof" {
			fmt.Fprintf(&b, "\to[%d] = sizeof(struct %s);\n", i, l.Struct)
		} else {
			fmt.Fprintf(&b, "\to[%d] = offsetof(struct %s, %s);\n", i, l.Struct, l.Field)
		}
	}
	b.WriteString("}\n")
	return b.String()
}
