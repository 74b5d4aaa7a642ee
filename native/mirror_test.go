package native

import (
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/kernels"
)

// The argument structs Go passes to the kernels match the kernels' own:
// kernels/copy.cu asserts each struct's size (static_assert, checked by
// NVRTC on the GPU, which has no offsetof), and this test checks those
// sizes against the Go mirrors and lays out each C struct from its source
// (u64, i64 and int fields, arrays of them, nested structs; each aligned
// to its size) to check every field's offset, so a change on either side
// fails here without a GPU.
func TestKernelArgsMirrored(t *testing.T) {
	mirrors := map[string]reflect.Type{
		"BoxArgs": reflect.TypeOf(boxArgs{}), "BatchDesc": reflect.TypeOf(batchDesc{}), "BatchArgs": reflect.TypeOf(batchArgs{}),
		"PatternArgs": reflect.TypeOf(patternArgs{}), "QuantArgs": reflect.TypeOf(quantArgs{}), "QuantCheckArgs": reflect.TypeOf(quantCheckArgs{}), "FlagArgs": reflect.TypeOf(flagArgs{}),
		"QuantBatchArgs": reflect.TypeOf(quantBatchArgs{}),
	}
	src := kernels.Source
	sized := map[string]bool{}
	for _, m := range regexp.MustCompile(`static_assert\(sizeof\((\w+)\) == (\d+),`).FindAllStringSubmatch(src, -1) {
		ty, ok := mirrors[m[1]]
		if !ok {
			t.Errorf("kernels assert the size of %s, which has no Go mirror listed here", m[1])
			continue
		}
		sized[m[1]] = true
		if n, _ := strconv.Atoi(m[2]); uintptr(n) != ty.Size() {
			t.Errorf("%s: the kernels assert %d bytes, Go's %s has %d", m[1], n, ty.Name(), ty.Size())
		}
	}
	layouts := cLayouts(t, src)
	for name, ty := range mirrors {
		if !sized[name] {
			t.Errorf("kernels/copy.cu does not assert the size of %s", name)
		}
		l, ok := layouts[name]
		if !ok {
			t.Errorf("kernels/copy.cu has no struct %s", name)
			continue
		}
		if l.size != ty.Size() {
			t.Errorf("%s: laid out from the source, %d bytes; Go's %s has %d", name, l.size, ty.Name(), ty.Size())
		}
		for i := range ty.NumField() {
			f := ty.Field(i)
			if f.Name == "_" {
				continue
			}
			off, ok := l.offset[strings.ToLower(f.Name)]
			switch {
			case !ok:
				t.Errorf("%s has no field for Go's %s.%s", name, ty.Name(), f.Name)
			case off != f.Offset:
				t.Errorf("%s: the field for Go's %s is at %d, Go's at %d", name, f.Name, off, f.Offset)
			}
		}
	}
}

// cLayout is a C struct's size and its fields' offsets, by name lowered
// without underscores.
type cLayout struct {
	size   uintptr
	align  uintptr
	offset map[string]uintptr
}

// cLayouts lays out the structs of a kernel source as the compiler does
// for these field types: each field at the next multiple of its alignment,
// the struct's size a multiple of its largest.
func cLayouts(t *testing.T, src string) map[string]cLayout {
	out := map[string]cLayout{}
	prim := map[string]uintptr{"u64": 8, "i64": 8, "int": 4, "unsigned": 4}
	maxd := 8 // M2N_MAXD
	if m := regexp.MustCompile(`#define M2N_MAXD (\d+)`).FindStringSubmatch(src); m != nil {
		maxd, _ = strconv.Atoi(m[1])
	}
	for _, m := range regexp.MustCompile(`(?s)struct (\w+) \{\n(.*?)\n\};`).FindAllStringSubmatch(src, -1) {
		l := cLayout{align: 1, offset: map[string]uintptr{}}
		ok := true
		for _, line := range strings.Split(m[2], "\n") {
			line = strings.TrimSpace(strings.Split(line, "//")[0])
			line = strings.TrimSuffix(line, ";")
			if line == "" {
				continue
			}
			ty, rest, _ := strings.Cut(line, " ")
			size, align := prim[ty], prim[ty]
			if inner, known := out[ty]; known {
				size, align = inner.size, inner.align
			}
			if size == 0 {
				ok = false // a type this layout does not know: not a mirrored struct
				break
			}
			for _, f := range strings.Split(rest, ",") {
				f = strings.TrimSpace(f)
				n := uintptr(1)
				if name, dim, isArr := strings.Cut(f, "["); isArr {
					f = name
					if strings.TrimSuffix(dim, "]") == "M2N_MAXD" {
						n = uintptr(maxd)
					} else {
						k, _ := strconv.Atoi(strings.TrimSuffix(dim, "]"))
						n = uintptr(k)
					}
				}
				l.size = (l.size + align - 1) / align * align
				l.offset[strings.ReplaceAll(f, "_", "")] = l.size
				l.size += n * size
				l.align = max(l.align, align)
			}
		}
		if ok {
			l.size = (l.size + l.align - 1) / l.align * l.align
			out[m[1]] = l
		}
	}
	return out
}
