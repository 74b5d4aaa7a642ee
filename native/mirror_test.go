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
// kernels/copy.cu asserts each struct's size and every field's offset
// (static_assert, checked by NVRTC on the GPU), and this test checks those
// numbers against the Go mirrors, so a change on either side fails here
// without a GPU.
func TestKernelArgsMirrored(t *testing.T) {
	mirrors := map[string]reflect.Type{
		"BoxArgs": reflect.TypeOf(boxArgs{}), "BatchDesc": reflect.TypeOf(batchDesc{}), "BatchArgs": reflect.TypeOf(batchArgs{}),
		"PatternArgs": reflect.TypeOf(patternArgs{}), "QuantArgs": reflect.TypeOf(quantArgs{}), "QuantCheckArgs": reflect.TypeOf(quantCheckArgs{}),
	}
	src := kernels.Source
	sizes := regexp.MustCompile(`static_assert\(sizeof\((\w+)\) == (\d+),`).FindAllStringSubmatch(src, -1)
	offsets := regexp.MustCompile(`static_assert\(__builtin_offsetof\((\w+), (\w+)\) == (\d+),`).FindAllStringSubmatch(src, -1)
	sized := map[string]bool{}
	for _, m := range sizes {
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
	checked := map[string]bool{}
	for _, m := range offsets {
		ty, ok := mirrors[m[1]]
		if !ok {
			continue
		}
		f, ok := ty.FieldByNameFunc(func(name string) bool { return strings.EqualFold(name, strings.ReplaceAll(m[2], "_", "")) })
		if !ok {
			t.Errorf("%s.%s: no such field in Go's %s", m[1], m[2], ty.Name())
			continue
		}
		checked[m[1]+"."+f.Name] = true
		if n, _ := strconv.Atoi(m[3]); uintptr(n) != f.Offset {
			t.Errorf("%s.%s: the kernels assert offset %d, Go's %s.%s is at %d", m[1], m[2], n, ty.Name(), f.Name, f.Offset)
		}
	}
	for name, ty := range mirrors {
		if !sized[name] {
			t.Errorf("kernels/copy.cu does not assert the size of %s", name)
		}
		for i := range ty.NumField() {
			if f := ty.Field(i); f.Name != "_" && !checked[name+"."+f.Name] {
				t.Errorf("kernels/copy.cu does not assert the offset of %s's field for Go's %s", name, f.Name)
			}
		}
	}
}
