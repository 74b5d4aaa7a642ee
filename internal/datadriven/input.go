package datadriven

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
)

// Tensors reads the tensors and the topology of a case's input:
//
//	topology preset=hgx-h200 domains=2 gpus_per_domain=4
//	tensor name=w shape=10,7,3 dtype=fp32
//	src mesh=2,2,2 ranks=0-3,8-11 place=S(0),R,S(0)
//	dst mesh=3,2 ranks=8,2,9,4,5,6 place=S(1),S(0)
//
// A tensor's src and dst lines follow its tensor line. The topology line is
// optional (default: the hgx-h200 preset, with domains enough for every
// rank).
func Tensors(c *Case) ([]ir.Tensor, *topo.Topology, error) {
	var tensors []ir.Tensor
	var tp *topo.Topology
	var shape []int64
	var dtype layout.DType
	for _, line := range c.Input {
		fields := strings.Fields(line)
		args := map[string]string{}
		for _, a := range fields[1:] {
			k, v, _ := strings.Cut(a, "=")
			args[k] = v
		}
		switch fields[0] {
		case "topology":
			var err error
			if tp, err = topo.Preset(orDefault(args["preset"], "hgx-h200")); err != nil {
				return nil, nil, err
			}
			for k, dst := range map[string]*int{"domains": &tp.Domains, "gpus_per_domain": &tp.GPUsPerDomain} {
				if v, ok := args[k]; ok {
					if *dst, err = strconv.Atoi(v); err != nil {
						return nil, nil, fmt.Errorf("%s: %w", line, err)
					}
				}
			}
		case "tensor":
			var err error
			if shape, err = ints64(args["shape"]); err != nil {
				return nil, nil, fmt.Errorf("%s: shape: %w", line, err)
			}
			if dtype, err = layout.ParseDType(orDefault(args["dtype"], "bf16")); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", line, err)
			}
			tensors = append(tensors, ir.Tensor{Name: args["name"]})
		case "src", "dst":
			if len(tensors) == 0 {
				return nil, nil, fmt.Errorf("%s: no tensor line before it", line)
			}
			l, err := parseLayout(shape, dtype, args)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", line, err)
			}
			t := &tensors[len(tensors)-1]
			if fields[0] == "src" {
				t.Src = l
			} else {
				t.Dst = l
			}
		default:
			return nil, nil, fmt.Errorf("%s: want topology, tensor, src or dst", line)
		}
	}
	if tp == nil {
		tp, _ = topo.Preset("hgx-h200")
		most := 0
		for _, t := range tensors {
			for _, r := range append(append([]int(nil), t.Src.Mesh.Ranks...), t.Dst.Mesh.Ranks...) {
				most = max(most, r)
			}
		}
		tp.Domains = most/tp.GPUsPerDomain + 1
	}
	return tensors, tp, nil
}

func parseLayout(shape []int64, dtype layout.DType, args map[string]string) (layout.Layout, error) {
	l := layout.Layout{Shape: shape, DType: dtype}
	ms, err := ints64(args["mesh"])
	if err != nil {
		return l, fmt.Errorf("mesh: %w", err)
	}
	for _, m := range ms {
		l.Mesh.Shape = append(l.Mesh.Shape, int(m))
	}
	if l.Mesh.Ranks, err = layout.ParseRanks(args["ranks"]); err != nil {
		return l, err
	}
	// Placements hold commas inside S(d): split at commas outside parentheses.
	var ps []string
	depth, start := 0, 0
	s := args["place"]
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				ps = append(ps, s[start:i])
				start = i + 1
			}
		}
	}
	ps = append(ps, s[start:])
	if l.Placements, err = layout.ParsePlacements(ps); err != nil {
		return l, err
	}
	return l, nil
}

func ints64(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
