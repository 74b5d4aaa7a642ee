package plan

import (
	"fmt"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
)

// SOL is the speed-of-light bound of a route: the aggregate data-movement
// model of docs/sim.md, computed from the layouts and the topology's line
// rates. Every rank's bytes on each port (network egress and ingress,
// NVLink egress and ingress), with the route's work spread over replicas as
// evenly as the route allows, divided by the port's line rate; the bound is
// the largest. It leaves out latencies, chunking, and the order of work.
//
// Each route's bound reads the same geometry as its builder, from the same
// functions: the hierarchical route's entry domains ([hierRotation]),
// agbcast's gather sources and broadcast ring, nemo-legacy's ring segments,
// roots and broadcast rings.
type SOL struct {
	Route       string
	Time        units.Time // the bound
	Term        string     // the binding term, e.g. "network egress of rank 0"
	UniqueBytes int64      // bytes of the tensors, each counted once
}

// ports indexes a rank's loads.
const (
	netOut = iota
	netIn
	nvlOut
	nvlIn
)

var portNames = [4]string{"network egress", "network ingress", "NVLink egress", "NVLink ingress"}

// Bound computes the SOL of moving tensors by a route over a topology.
func Bound(route string, tensors []ir.Tensor, tp *topo.Topology) (SOL, error) {
	load, move := mover(tp) // move adds bytes sent from rank a to rank b
	sol := SOL{Route: route}
	rt, err := lookup(route)
	if err != nil {
		return sol, err
	}
	bd := rt.bounder(tensors, tp)
	// Quantized tensors are bound as they move: fp8 and scales when
	// quantized at the source, the source dtype when at the destination.
	// A schedule's tensors hold scale tensors; expand derives them again.
	var weights []ir.Tensor
	for _, t := range tensors {
		if t.ScaleOf == 0 {
			weights = append(weights, t)
		}
	}
	_, moved, site, entries, err := expand(weights, rt)
	if err != nil {
		return sol, err
	}
	// A tensor quantized at its entry replicas moves twice: gathered in its
	// source dtype, then spread in fp8 (after the other tensors here).
	n := len(moved)
	for ti := range n {
		if e, ok := entries[ti]; ok {
			moved = append(moved, e.spread)
			site = append(site, quantAtEntry)
		}
	}
	for ti, t := range moved {
		if site[ti] == scaleAtDest {
			continue
		}
		r, err := Derive(t.Src, t.Dst)
		if err != nil {
			return sol, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		if ti < n {
			sol.UniqueBytes += t.Src.Bytes()
		}
		bd.add(&t, r, move)
	}
	best, term := maxPort(load, tp)
	sol.Term = term
	if chain, chainTerm := bd.chain(); chain > best {
		best, sol.Term = chain, chainTerm
	}
	sol.Time = units.Time(best*float64(units.Second) + 0.5)
	return sol, nil
}

// maxPort is the largest time any port of l needs at its line rate, and
// the port's name; ranks are visited in increasing order.
func maxPort(l *loads, tp *topo.Topology) (float64, string) {
	rate := [4]float64{
		netOut: float64(tp.NICLine) * float64(tp.NICsPerGPU), netIn: float64(tp.NICLine) * float64(tp.NICsPerGPU),
		nvlOut: float64(tp.NVLinkLine), nvlIn: float64(tp.NVLinkLine),
	}
	var best float64
	var term string
	for rk := range l.ld {
		if !l.has[rk] {
			continue
		}
		for p, b := range l.ld[rk] {
			if s := b / rate[p]; s > best {
				best = s
				term = fmt.Sprintf("%s of rank %d", portNames[p], rk)
			}
		}
	}
	return best, term
}

// loads are the bytes on each port of each rank (ld[rank], where
// has[rank]), summed in the order they were added.
type loads struct {
	tp  *topo.Topology
	dom []int32 // per rank: 1 + its NVLink domain; 0: not looked up yet
	ld  [][4]float64
	has []bool
}

// at returns rank's loads, making room for them.
func (l *loads) at(rank int) *[4]float64 {
	if rank >= len(l.ld) {
		n := max(rank+1, 2*len(l.ld))
		l.ld = append(l.ld, make([][4]float64, n-len(l.ld))...)
		l.has = append(l.has, make([]bool, n-len(l.has))...)
	}
	l.has[rank] = true
	return &l.ld[rank]
}

// domain is tp.Domain(rank), looked up once per rank (a map lookup each,
// two per move: most of the hierarchical bound on scaling-dsv3's
// 2,048-GPU point, called 10^8 times there).
func (l *loads) domain(rank int) int32 {
	if rank >= len(l.dom) {
		l.dom = append(l.dom, make([]int32, max(rank+1, 2*len(l.dom))-len(l.dom))...)
	}
	if l.dom[rank] == 0 {
		l.dom[rank] = int32(l.tp.Domain(rank)) + 1
	}
	return l.dom[rank]
}

// only returns the loads of one rank of l.
func (l *loads) only(rank int) *loads {
	o := &loads{tp: l.tp}
	if rank < len(l.has) && l.has[rank] {
		*o.at(rank) = l.ld[rank]
	}
	return o
}

// mover returns a load map and the function that adds bytes sent from rank
// a to rank b to it.
func mover(tp *topo.Topology) (*loads, func(a, b int, bytes float64)) {
	l := &loads{tp: tp}
	return l, func(a, b int, bytes float64) {
		switch {
		case a == b:
		case l.domain(a) == l.domain(b):
			l.at(a)[nvlOut] += bytes
			l.at(b)[nvlIn] += bytes
		default:
			l.at(a)[netOut] += bytes
			l.at(b)[netIn] += bytes
		}
	}
}
