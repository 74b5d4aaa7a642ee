package scenario

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// setPath assigns a TOML value to the field a dotted key path names in f:
// "topology.nic", "meshes.generator.shape", "tensors[0].shape". Struct
// fields match by toml tag; maps by key; slices by [index]. Pointer fields
// are allocated as needed, so a sweep may set a key the file leaves out.
func setPath(f *File, path string, md toml.MetaData, prim toml.Primitive) error {
	steps, err := splitPath(path)
	if err != nil {
		return err
	}
	return setValue(reflect.ValueOf(f).Elem(), steps, path, md, prim)
}

type step struct {
	name  string
	index int // -1: none
}

func splitPath(path string) ([]step, error) {
	if path == "" {
		return nil, fmt.Errorf("empty key")
	}
	var steps []step
	for _, part := range strings.Split(path, ".") {
		name, rest, hasIdx := strings.Cut(part, "[")
		if name == "" {
			return nil, fmt.Errorf("key %q: empty component", path)
		}
		steps = append(steps, step{name: name, index: -1})
		for hasIdx {
			var num string
			num, rest, hasIdx = strings.Cut(rest, "]")
			i, err := strconv.Atoi(num)
			if err != nil || i < 0 {
				return nil, fmt.Errorf("key %q: bad index [%s]", path, num)
			}
			steps = append(steps, step{index: i})
			if rest == "" {
				break
			}
			if !strings.HasPrefix(rest, "[") {
				return nil, fmt.Errorf("key %q: text %q after an index", path, rest)
			}
			rest = rest[1:]
			hasIdx = true
		}
	}
	return steps, nil
}

func setValue(v reflect.Value, steps []step, path string, md toml.MetaData, prim toml.Primitive) error {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	if len(steps) == 0 {
		ptr := reflect.New(v.Type())
		if err := md.PrimitiveDecode(prim, ptr.Interface()); err != nil {
			return fmt.Errorf("key %q: %w", path, err)
		}
		v.Set(ptr.Elem())
		return nil
	}
	st := steps[0]
	switch {
	case st.index >= 0:
		if v.Kind() != reflect.Slice {
			return fmt.Errorf("key %q: [%d] applied to a value that is not a list", path, st.index)
		}
		if st.index >= v.Len() {
			return fmt.Errorf("key %q: index %d out of range (the list has %d entries)", path, st.index, v.Len())
		}
		return setValue(v.Index(st.index), steps[1:], path, md, prim)
	case v.Kind() == reflect.Struct:
		if f, ok := field(v, st.name); ok {
			return setValue(f, steps[1:], path, md, prim)
		}
		return fmt.Errorf("key %q: no key %q here", path, st.name)
	case v.Kind() == reflect.Map:
		key := reflect.ValueOf(st.name)
		cur := v.MapIndex(key)
		if !cur.IsValid() {
			return fmt.Errorf("key %q: no entry %q (add it to the file to sweep it)", path, st.name)
		}
		tmp := reflect.New(cur.Type()).Elem()
		tmp.Set(cur)
		if err := setValue(tmp, steps[1:], path, md, prim); err != nil {
			return err
		}
		v.SetMapIndex(key, tmp)
		return nil
	}
	return fmt.Errorf("key %q: %q is not a table", path, st.name)
}

// field returns the field of struct v whose toml tag is name, looking into
// embedded structs (whose keys TOML reads as the outer table's).
func field(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if tag == name {
			return v.Field(i), true
		}
		if t.Field(i).Anonymous && tag == "" && v.Field(i).Kind() == reflect.Struct {
			if f, ok := field(v.Field(i), name); ok {
				return f, true
			}
		}
	}
	return reflect.Value{}, false
}
