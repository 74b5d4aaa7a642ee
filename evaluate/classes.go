package evaluate

import (
	"sort"

	"github.com/m2n-project/m2n/model/scenario"
)

// Class is the bytes of one class of a workload's tensors; its JSON form
// is part of `m2n sim --json` (docs/cli.md).
type Class struct {
	Class       string `json:"class"`
	Weights     int    `json:"weights"`
	UniqueBytes int64  `json:"unique_bytes"`
}

// TensorClasses sums a point's tensors by class, counting a bucket's
// members in their own classes; nil when no tensor has a class (a scenario
// without a workload).
func TensorClasses(p *scenario.Point) []Class {
	sum := map[string]*Class{}
	add := func(class string, bytes int64) {
		c, ok := sum[class]
		if !ok {
			c = &Class{Class: class}
			sum[class] = c
		}
		c.Weights++
		c.UniqueBytes += bytes
	}
	any := false
	for _, t := range p.Tensors {
		if t.Class == "" {
			add("tensors", t.Src.Bytes())
			continue
		}
		any = true
		if len(t.Members) == 0 {
			add(t.Class, t.Src.Bytes())
			continue
		}
		for _, m := range t.Members {
			add(m.Class, m.Elems*t.Src.DType.Size())
		}
	}
	if !any {
		return nil
	}
	out := make([]Class, 0, len(sum))
	for _, c := range sum {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].UniqueBytes != out[j].UniqueBytes {
			return out[i].UniqueBytes > out[j].UniqueBytes
		}
		return out[i].Class < out[j].Class
	})
	return out
}
