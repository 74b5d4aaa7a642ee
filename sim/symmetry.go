package sim

import (
	"cmp"
	"slices"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/units"
)

// Symmetry: a schedule whose data-parallel replicas (or any other parts)
// do the same thing on resources alike is simulated one representative
// per class and the result expanded, exactly.
//
// The classes are an equitable partition of the flows (units: a local op,
// or a send and its recv) and the resources, found by color refinement:
//
//   - two units share a class when they move the same bytes with the same
//     latency and host release, hold resources of the same classes with the
//     same coefficients, and the classes of the units they wait for are
//     the same set;
//   - two resources share a class when they have the same kind and
//     capacity and, for every unit class, carry the same coefficients of
//     its units, summed.
//
// By induction over the events, every unit of a class becomes ready, starts,
// runs at the same rate and ends at the same picosecond as every other:
// its start is the latest end among the classes it waits for; and max-min
// progressive filling, run in exact fixed point, reads of a resource only
// its capacity and the sums of its flows' coefficients and loads, which
// are the same for every resource of a class (W(F, R) x rate of F, summed
// over the unit classes F). So the simulator runs one flow per unit class,
// holding one resource per resource class with coefficient W(F, R), and
// gets the same levels, the same rates and the same end times bit for bit.
// Bytes carried are summed in fixed point (coefficient x bytes), so they
// are exact in any order too.

// symmetry is an equitable partition of a schedule's units and the
// engine's resources.
type symmetry struct {
	units  int     // units in the schedule
	uclass []int32 // per unit: its class
	urep   []int32 // per unit class: its representative unit (the least)
	usize  []int64 // per unit class: its units
	rclass []int32 // per resource: its class
	rrep   []int32 // per resource class: its representative (the least)
	unitA  []int32 // per unit: its first op (a local op or a send)
	// spec is per unit class its representative's flow, holding the
	// resource classes with coefficients W(F, R) (fixed point), and rel
	// its host release.
	spec  []flowRec
	rel   []units.Time
	qdeps [][]int32 // per unit class: the unit classes it waits for
}

// unitFlow is a unit's flow as the simulation reads it, but its
// dependencies: its flow (path, coefficients, bytes, class, latency) and
// host release.
func (e *engine) unitFlow(a int32) (flowRec, units.Time) {
	b := int32(-1)
	if op := &e.s.Ops[a]; op.Kind == ir.Send {
		b = op.Match
	}
	f := e.spec(a, b)
	var rel units.Time
	if e.rel != nil {
		rel = e.rel[a]
		if b >= 0 {
			rel = max(rel, e.rel[b])
		}
	}
	return f, rel
}

// unitKey is a unit's own part of its signature: what the simulation
// reads of it but its resources and dependencies.
type unitKey struct {
	bytes    int64
	lat, rel units.Time
	class    ir.Class
	local    bool
}

// resFx is a resource (or a class) and a coefficient.
type resFx struct {
	r  int32
	fx int64
}

func cmpResFx(x, y resFx) int {
	if x.r != y.r {
		return int(x.r - y.r)
	}
	return cmp.Compare(x.fx, y.fx)
}

// symMix is the hash the refinement folds with (a variable for the
// tests, which make it collide).
var symMix = mix

// mix folds x into hash h.
func mix(h, x uint64) uint64 {
	h ^= x
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>29
}

// findSymmetry refines the units and resources of e's schedule to an
// equitable partition (see above), or returns nil when it would not make
// the units at least symGain times fewer. Signatures are hashed to find
// the classes and compared in full once found: a class whose members
// differ (a collision) gives nil, so the partition used is always
// equitable.
func (e *engine) findSymmetry() *symmetry {
	s := e.s
	nu := 0 // a unit per op but recvs: counted, so that unitA is made once
	for i := range s.Ops {
		if s.Ops[i].Kind != ir.Recv {
			nu++
		}
	}
	unitA := make([]int32, 0, nu)
	unitOf := make([]int32, len(s.Ops))
	for i := range s.Ops {
		op := &s.Ops[i]
		if op.Kind == ir.Recv {
			continue
		}
		u := int32(len(unitA))
		unitOf[i] = u
		if op.Kind == ir.Send {
			unitOf[op.Match] = u
		}
		unitA = append(unitA, int32(i))
	}
	// Bounds, cheap, on the classes the refinement below would find: too
	// many, and the schedule has too little symmetry to pay for finding
	// it. Each stands a unit's ends for its resources: a GPU's sending
	// (or receiving, or local) side by link class, whose load is the sum
	// of its units' hashes. Units alike hold sides alike, so a bound finds
	// no more classes than the refinement (but where a GPU's NICs differ
	// in class, which costs symmetry, never a result).
	maxRank := int32(0)
	for _, r := range s.World {
		maxRank = max(maxRank, int32(r.Rank))
	}
	gpuOf := make([]int32, maxRank+1)
	for r, g := range e.rankG {
		gpuOf[r] = int32(g)
	}
	side := func(u int32) (int32, int32) {
		op := &s.Ops[unitA[u]]
		sg := gpuOf[op.Rank]
		if op.Kind != ir.Send {
			return sg * 6, -1
		}
		dg := gpuOf[op.Peer]
		a, b := e.gpus[sg], e.gpus[dg]
		c := int32(2) // net
		switch {
		case a == b:
			c = 0
		case a/e.tp.GPUsPerDomain == b/e.tp.GPUsPerDomain:
			c = 1
		}
		return sg*6 + c*2, dg*6 + c*2 + 1
	}
	gsum := make([]uint64, 6*len(e.gpus))
	// sides refines hashes uh by the sides' loads, twice, and says whether
	// they still bound the classes low enough.
	sides := func(uh []uint64) bool {
		for range 2 {
			clear(gsum)
			for u := range int32(nu) {
				a, b := side(u)
				gsum[a] += symMix(uh[u], 0x11)
				if b >= 0 {
					gsum[b] += symMix(uh[u], 0x22)
				}
			}
			for u := range int32(nu) {
				a, b := side(u)
				h := symMix(uh[u], gsum[a])
				if b >= 0 {
					h = symMix(h, gsum[b])
				}
				uh[u] = h
			}
		}
		return distinctEstimate(uh)*symGain <= nu
	}
	// The units each unit waits for (duplicates kept), CSR, and a
	// topological order: the units' own where every unit waits only for
	// units before it (as m2n's builders emit them), else Kahn's; a unit
	// on a cycle gives nil, and the simulation reports the deadlock.
	predLo := make([]int32, nu+1)
	for u, a := range unitA {
		n := len(s.Deps(a))
		if op := &s.Ops[a]; op.Kind == ir.Send {
			n += len(s.Deps(op.Match))
		}
		predLo[u+1] = predLo[u] + int32(n)
	}
	preds := make([]int32, predLo[nu])
	inOrder := true
	for u, a := range unitA {
		k := predLo[u]
		ops := [2]int32{a, -1}
		if s.Ops[a].Kind == ir.Send {
			ops[1] = s.Ops[a].Match
		}
		for _, o := range ops {
			if o < 0 {
				continue
			}
			for _, d := range s.Deps(o) {
				p := unitOf[d]
				preds[k] = p
				inOrder = inOrder && p < int32(u)
				k++
			}
		}
	}
	unitOf = nil
	order := kahn(nu, predLo, preds, inOrder)
	if order == nil {
		return nil
	}
	// The bound: units by what they are (local or a pair, and bytes), the
	// set of the units they wait for, and their sides.
	uh := make([]uint64, nu)
	var hs []uint64
	predHash := func(u int32, h uint64) uint64 {
		hs = hs[:0]
		for _, p := range preds[predLo[u]:predLo[u+1]] {
			hs = append(hs, uh[p])
		}
		slices.Sort(hs)
		hs = slices.Compact(hs)
		for _, x := range hs {
			h = symMix(h, x)
		}
		return symMix(h, uint64(len(hs)))
	}
	for _, u := range order {
		op := &s.Ops[unitA[u]]
		uh[u] = predHash(u, symMix(symMix(0x7f1, uint64(op.Kind)), uint64(op.Src.Bytes)))
	}
	if distinctEstimate(uh)*symGain > nu || !sides(uh) {
		return nil
	}
	// Resources, first by kind and capacity.
	nr := len(e.res)
	rc := make([]int32, nr)
	var nrc int32
	{
		ids := map[Resource]int32{}
		for r := range nr {
			key := Resource{Class: e.res[r].Class, Capacity: e.res[r].Capacity}
			id, ok := ids[key]
			if !ok {
				id = int32(len(ids))
				ids[key] = id
			}
			rc[r] = id
		}
		nrc = int32(len(ids))
	}
	// Each unit's key (hashed) and path: the paths' lengths first, so
	// that they fill one exact allocation.
	keyOf := func(u int32) (unitKey, flowRec) {
		f, rel := e.unitFlow(unitA[u])
		return unitKey{bytes: f.bytes, lat: f.lat, rel: rel, class: f.class, local: s.Ops[unitA[u]].Kind != ir.Send}, f
	}
	keyHash := make([]uint64, nu)
	pathLo := make([]int32, nu+1)
	for u := range int32(nu) {
		k, f := keyOf(u)
		h := symMix(symMix(symMix(symMix(0, uint64(k.bytes)), uint64(k.lat)), uint64(k.rel)), uint64(k.class))
		if k.local {
			h = symMix(h, 1)
		}
		keyHash[u] = h
		pathLo[u+1] = pathLo[u] + int32(f.nres)
	}
	path := make([]resFx, pathLo[nu])
	for u := range int32(nu) {
		_, f := keyOf(u)
		for i := range f.nres {
			path[pathLo[u]+int32(i)] = resFx{f.res[i], f.fx[i]}
		}
	}

	// The slots on each resource: unit and coefficient.
	slotLo := make([]int32, nr+1)
	for _, p := range path {
		slotLo[p.r+1]++
	}
	for r := range nr {
		slotLo[r+1] += slotLo[r]
	}
	slots := make([]resFx, slotLo[nr])
	{
		rfill := append([]int32(nil), slotLo[:nr]...)
		for u := range nu {
			for _, p := range path[pathLo[u]:pathLo[u+1]] {
				slots[rfill[p.r]] = resFx{int32(u), p.fx}
				rfill[p.r]++
			}
		}
	}
	// Refinement on hashes. A unit's hash folds its key's, its path's (an
	// order-free sum over its slots of the resource's hash and the
	// coefficient) and the set of the hashes of the units it waits for
	// (in topological order, so those are this round's); a resource's
	// folds its own and the order-free sum over its slots of the unit's
	// hash and the coefficient. Each round refines the last; it ends when
	// the resources split no further.
	rh := make([]uint64, nr)
	for r := range nr {
		rh[r] = symMix(0x51ed, uint64(rc[r]))
	}
	next := make([]uint64, nr)
	for {
		for _, u := range order {
			var ps uint64
			for _, p := range path[pathLo[u]:pathLo[u+1]] {
				ps += symMix(symMix(0x9a7, rh[p.r]), uint64(p.fx))
			}
			uh[u] = predHash(u, symMix(keyHash[u], ps))
		}
		if distinctEstimate(uh)*symGain > nu {
			return nil
		}
		for r := range nr {
			var sum uint64
			for _, p := range slots[slotLo[r]:slotLo[r+1]] {
				sum += symMix(symMix(0x3c1, uh[p.r]), uint64(p.fx))
			}
			next[r] = symMix(rh[r], sum)
		}
		rh, next = next, rh
		n := int32(distinct(slices.Clone(rh)))
		if n == nrc {
			break
		}
		nrc = n
	}
	// Dense classes, numbered by their least member.
	sym := &symmetry{units: nu}
	uc := make([]int32, nu)
	sym.uclass, sym.urep = uc, denseClasses(uh, uc)
	if len(sym.urep)*symGain > nu {
		return nil
	}
	sym.rclass, sym.rrep = rc, denseClasses(rh, rc)
	uh, rh, next = nil, nil, nil
	sym.usize = make([]int64, len(sym.urep))
	for _, c := range uc {
		sym.usize[c]++
	}
	var scratch []int32
	var pairs, loads []resFx
	// predSet is the sorted set of the classes unit u waits for, in
	// scratch.
	predSet := func(u int32) []int32 {
		scratch = scratch[:0]
		for _, p := range preds[predLo[u]:predLo[u+1]] {
			scratch = append(scratch, uc[p])
		}
		slices.Sort(scratch)
		scratch = slices.Compact(scratch)
		return scratch
	}
	// pathSet is unit u's path on resource classes, sorted, in pairs.
	pathSet := func(u int32) []resFx {
		pairs = pairs[:0]
		for _, p := range path[pathLo[u]:pathLo[u+1]] {
			pairs = append(pairs, resFx{rc[p.r], p.fx})
		}
		slices.SortFunc(pairs, cmpResFx)
		return pairs
	}
	// Every member is compared with its class's representative in full.
	var repPairs, repLoads []resFx
	var repPreds []int32
	repKey := make([]unitKey, len(sym.urep))
	for k, u := range sym.urep {
		repKey[k], _ = keyOf(u)
	}
	for u := range int32(nu) {
		u0 := sym.urep[uc[u]]
		if u0 == u {
			continue
		}
		if k, _ := keyOf(u); k != repKey[uc[u]] {
			return nil
		}
		repPairs = append(repPairs[:0], pathSet(u0)...)
		if !slices.Equal(pathSet(u), repPairs) {
			return nil
		}
		repPreds = append(repPreds[:0], predSet(u0)...)
		if !slices.Equal(predSet(u), repPreds) {
			return nil
		}
	}
	for r := range nr {
		r0 := sym.rrep[rc[r]]
		if int(r0) == r {
			continue
		}
		repLoads = append(repLoads[:0], resLoads(slots[slotLo[r0]:slotLo[r0+1]], uc, &loads)...)
		if !slices.Equal(resLoads(slots[slotLo[r]:slotLo[r+1]], uc, &loads), repLoads) {
			return nil
		}
	}
	// The quotient: per unit class, its representative's flow holding
	// each resource class R it holds once, with W(F, R) read on R's
	// representative.
	ncls := len(sym.urep)
	sym.unitA = unitA
	sym.spec = make([]flowRec, ncls)
	sym.rel = make([]units.Time, ncls)
	sym.qdeps = make([][]int32, ncls)
	for k, u := range sym.urep {
		full, rel := e.unitFlow(unitA[u])
		f := full
		f.nres = 0
		for _, r := range full.res[:full.nres] {
			R := sym.rclass[r]
			if !slices.Contains(f.res[:f.nres], R) {
				f.res[f.nres], f.fx[f.nres] = R, 0
				f.nres++
			}
		}
		sym.spec[k], sym.rel[k] = f, rel
		sym.qdeps[k] = slices.Clone(predSet(u))
	}
	for R, r0 := range sym.rrep {
		for _, p := range resLoads(slots[slotLo[r0]:slotLo[r0+1]], uc, &loads) {
			f := &sym.spec[p.r]
			f.fx[slices.Index(f.res[:f.nres], int32(R))] = p.fx
		}
	}
	for k := range sym.spec {
		f := &sym.spec[k]
		for i := range f.nres {
			f.coef[i] = float64(f.fx[i]) / (1 << coefBits)
		}
	}
	return sym
}

// denseClasses numbers hashes hs by first appearance into class (per
// value, its class) and returns each class's first member.
func denseClasses(hs []uint64, class []int32) (first []int32) {
	ids := make(map[uint64]int32)
	for i, h := range hs {
		id, ok := ids[h]
		if !ok {
			id = int32(len(first))
			ids[h] = id
			first = append(first, int32(i))
		}
		class[i] = id
	}
	return first
}

// resLoads is a resource's load by unit class: the classes (uc) of its
// slots' units and their coefficients summed, sorted by class, in *buf.
func resLoads(slots []resFx, uc []int32, buf *[]resFx) []resFx {
	out := (*buf)[:0]
	for _, p := range slots {
		out = append(out, resFx{uc[p.r], p.fx})
	}
	slices.SortFunc(out, cmpResFx)
	w := 0
	for i := 0; i < len(out); {
		j, sum := i, int64(0)
		for ; j < len(out) && out[j].r == out[i].r; j++ {
			sum += out[j].fx
		}
		out[w] = resFx{out[i].r, sum}
		w++
		i = j
	}
	*buf = out
	return out[:w]
}

// symMinOps is the least ops a schedule has for the engine to look for
// symmetry, and symGain the least units per class for it to use what it
// finds (below, the refinement costs more than it saves).
var symMinOps = 4096 // a variable for the tests

const symGain = 2

// quotient is what the engine runs with symmetry: one flow per unit class.
type quotient struct {
	sym     *symmetry
	opClass []int32 // per op of the quotient schedule: its unit class
}

// quotient makes the engine run sym's quotient: a schedule of one unit per
// class (a local op, or a send and its recv, the send waiting for the
// classes the class waits for), its flows holding the resource classes
// with coefficients W(F, R), and a solver over the resource classes.
func (e *engine) quotient(sym *symmetry) {
	full := e.s
	q := &quotient{sym: sym}
	qs := &ir.Schedule{Route: full.Route, World: full.World}
	first := make([]int32, len(sym.urep)) // per class: its first op in qs
	for k, u := range sym.urep {
		a := sym.unitA[u]
		first[k] = int32(len(qs.Ops))
		op := full.Ops[a]
		op.DepOff, op.DepLen = 0, 0
		if op.Kind == ir.Send {
			rcv := full.Ops[op.Match]
			rcv.DepOff, rcv.DepLen = 0, 0
			op.Match, rcv.Match = first[k]+1, first[k]
			qs.Ops = append(qs.Ops, op, rcv)
			q.opClass = append(q.opClass, int32(k), int32(k))
		} else {
			qs.Ops = append(qs.Ops, op)
			q.opClass = append(q.opClass, int32(k))
		}
	}
	for k := range sym.urep {
		op := &qs.Ops[first[k]]
		op.DepOff = int32(len(qs.DepPool))
		for _, c := range sym.qdeps[k] {
			qs.DepPool = append(qs.DepPool, first[c])
		}
		op.DepLen = int32(len(qs.DepPool)) - op.DepOff
	}
	e.s, e.q = qs, q
	nrc := len(sym.rrep)
	caps := make([]u128, nrc)
	for R, r := range sym.rrep {
		caps[R] = e.caps[r]
	}
	if e.newSolver == nil {
		e.fluid = newFluid(caps)
	} else {
		e.fluid = e.newSolver(caps)
	}
	e.active = make([]int32, nrc)
	e.since = make([]units.Time, nrc)
	e.busy = make([]units.Time, nrc)
	e.bytes = make([]u128, nrc)
}

// mul is the flows f stands for: its class's units with symmetry, else 1.
func (e *engine) mul(f *flowRec) int64 {
	if e.q == nil {
		return 1
	}
	return e.q.sym.usize[e.q.opClass[f.ops[0]]]
}

// resName names resource r of the engine's solver (with symmetry, a class:
// its representative).
func (e *engine) resName(r int32) string {
	if e.q != nil {
		return e.res[e.q.sym.rrep[r]].Name + " (and those alike)"
	}
	return e.res[r].Name
}

// float is a as a float64 (rounded).
func (a u128) float() float64 { return float64(a.hi)*0x1p64 + float64(a.lo) }

// distinct is the number of distinct values in hs (sorted in place).
func distinct(hs []uint64) int {
	slices.Sort(hs)
	return len(slices.Compact(hs))
}

// distinctEstimate estimates the distinct values of hashes hs: exactly
// below 65,536 values, else from those of them whose low 4 bits are 0.
func distinctEstimate(hs []uint64) int {
	if len(hs) < 1<<16 {
		return distinct(slices.Clone(hs))
	}
	var sample []uint64
	for _, h := range hs {
		if h&15 == 0 {
			sample = append(sample, h)
		}
	}
	return 16 * distinct(sample)
}

// kahn returns a topological order of n nodes whose predecessors are
// preds[predLo[u]:predLo[u+1]]: 0..n-1 when inOrder (every node's come
// before it), else Kahn's; nil if they form a cycle.
func kahn(n int, predLo, preds []int32, inOrder bool) []int32 {
	order := make([]int32, 0, n)
	if inOrder {
		for u := range int32(n) {
			order = append(order, u)
		}
		return order
	}
	succLo := make([]int32, n+1)
	for _, p := range preds {
		succLo[p+1]++
	}
	for u := range n {
		succLo[u+1] += succLo[u]
	}
	succ := make([]int32, succLo[n])
	fill := append([]int32(nil), succLo[:n]...)
	wait := make([]int32, n)
	for u := range n {
		for _, p := range preds[predLo[u]:predLo[u+1]] {
			succ[fill[p]] = int32(u)
			fill[p]++
		}
		wait[u] = predLo[u+1] - predLo[u]
	}
	for u := range n {
		if wait[u] == 0 {
			order = append(order, int32(u))
		}
	}
	for i := 0; i < len(order); i++ {
		for _, v := range succ[succLo[order[i]]:succLo[order[i]+1]] {
			if wait[v]--; wait[v] == 0 {
				order = append(order, v)
			}
		}
	}
	if len(order) != n {
		return nil
	}
	return order
}
