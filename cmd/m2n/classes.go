package main

import (
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
)

// classJSON is the bytes of one class of a workload's tensors (docs/cli.md).
type classJSON struct {
	Class       string `json:"class"`
	Weights     int    `json:"weights"`
	UniqueBytes int64  `json:"unique_bytes"`
}

// tensorClasses sums a point's tensors by class, counting a bucket's
// members in their own classes; nil when no tensor has a class (a scenario
// without a workload).
func tensorClasses(p *scenario.Point) []classJSON {
	sum := map[string]*classJSON{}
	add := func(class string, bytes int64) {
		c, ok := sum[class]
		if !ok {
			c = &classJSON{Class: class}
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
	out := make([]classJSON, 0, len(sum))
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

// printClasses writes each point's tensor classes once.
func printClasses(e *env, out simOutput) error {
	seen := map[string]bool{}
	for _, r := range out.Records {
		if len(r.TensorClasses) == 0 || seen[r.label] {
			continue
		}
		seen[r.label] = true
		var total int64
		for _, c := range r.TensorClasses {
			total += c.UniqueBytes
		}
		fmt.Fprintf(e.stdout, "\nworkload at point %s: %s in all, by class (weights: parameters as the frameworks store them)\n", r.label, units.Bytes(total).Human())
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "class\tweights\tbytes\tshare")
		for _, c := range r.TensorClasses {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f%%\n", c.Class, c.Weights, units.Bytes(c.UniqueBytes).Human(), 100*float64(c.UniqueBytes)/float64(max(total, 1)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
