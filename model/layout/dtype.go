package layout

import (
	"fmt"
	"sort"
	"strings"
)

// DType is an element type. Its zero value is invalid.
type DType uint8

// The element types m2n knows. Resharding never converts between them: the
// source and destination of a tensor have one dtype.
const (
	Invalid DType = iota
	BF16
	FP16
	FP32
	FP64
	FP8E4M3
	FP8E5M2
	Int8
	Uint8
	Int32
	Int64
)

type dtypeInfo struct {
	name    string
	size    int64
	aliases []string
}

var dtypes = [...]dtypeInfo{
	Invalid: {name: "invalid"},
	BF16:    {"bf16", 2, []string{"bfloat16"}},
	FP16:    {"fp16", 2, []string{"float16", "half"}},
	FP32:    {"fp32", 4, []string{"float32", "float"}},
	FP64:    {"fp64", 8, []string{"float64", "double"}},
	FP8E4M3: {"fp8_e4m3", 1, []string{"fp8e4m3", "float8_e4m3fn", "e4m3"}},
	FP8E5M2: {"fp8_e5m2", 1, []string{"fp8e5m2", "float8_e5m2", "e5m2"}},
	Int8:    {"int8", 1, nil},
	Uint8:   {"uint8", 1, nil},
	Int32:   {"int32", 4, nil},
	Int64:   {"int64", 8, nil},
}

// Size is the size of one element in bytes; 0 for an invalid dtype.
func (d DType) Size() int64 {
	if int(d) >= len(dtypes) {
		return 0
	}
	return dtypes[d].size
}

// Float reports whether d is a floating-point dtype.
func (d DType) Float() bool {
	switch d {
	case BF16, FP16, FP32, FP64, FP8E4M3, FP8E5M2:
		return true
	}
	return false
}

// Valid reports whether d is one of the known dtypes.
func (d DType) Valid() bool { return d != Invalid && int(d) < len(dtypes) }

// String is the canonical name, as written in scenarios and the IR.
func (d DType) String() string {
	if int(d) >= len(dtypes) {
		return fmt.Sprintf("dtype(%d)", int(d))
	}
	return dtypes[d].name
}

// ParseDType reads a dtype by its canonical name or a common alias
// (torch spellings such as "bfloat16" and "float8_e4m3fn"), case-insensitively.
func ParseDType(s string) (DType, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for i := BF16; int(i) < len(dtypes); i++ {
		if dtypes[i].name == k {
			return i, nil
		}
		for _, a := range dtypes[i].aliases {
			if a == k {
				return i, nil
			}
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q (known: %s)", s, strings.Join(DTypeNames(), ", "))
}

// DTypeNames lists the canonical dtype names, sorted.
func DTypeNames() []string {
	var names []string
	for i := BF16; int(i) < len(dtypes); i++ {
		names = append(names, dtypes[i].name)
	}
	sort.Strings(names)
	return names
}

// MarshalText writes the canonical name.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("invalid dtype %d", int(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText reads a name accepted by [ParseDType].
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
