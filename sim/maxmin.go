package sim

import "math"

// fluid is a set of resources shared by active flows. Rates are max-min
// fair: progressive filling raises every unfrozen flow's rate together
// until some resource saturates, freezes the flows crossing it, and repeats.
// A flow may use a resource with a coefficient (2 for memory: a copy reads
// and writes each byte). Rates are in bytes per picosecond.
//
// Solving is incremental: only the connected component (flows linked by
// shared resources) around resources whose flow set changed is re-solved.
type fluid struct {
	capacity []float64 // per resource, bytes/ps
	users    [][]int32 // per resource, its active flows
	userPos  [][]int32 // per resource, per user: index of the resource in the flow's list

	flows []flowState
	free  []int32 // recycled flow slots

	dirty []int32 // resources whose flow set changed since the last solve
	// scratch, stamped per solve
	resMark  []uint32
	flowMark []uint32
	epoch    uint32
	compRes  []int32
	compFlow []int32
	left     []float64 // per resource in the component: capacity minus frozen load
	weight   []float64 // per resource: sum of coefficients of unfrozen flows
	count    []int32   // per resource: number of unfrozen flows
	changed  []change  // flows whose rate changed in the last solve
	capped   []int32   // scratch: unfrozen flows with a rate cap
}

// change records a flow whose rate a solve changed, with its old rate.
type change struct {
	id  int32
	old float64
}

type flowState struct {
	limit  float64 // rate cap in bytes/ps; 0 for none
	res    [maxPath]int32
	coef   [maxPath]float64
	pos    [maxPath]int32 // index of this flow in users[res[k]]
	n      int8
	active bool
	frozen bool
	rate   float64 // bytes/ps
}

// maxPath is the most resources one flow holds at once: egress and ingress
// ports, two fabric links and a rate cap.
const maxPath = 6

func newFluid(capacity []float64) *fluid {
	n := len(capacity)
	return &fluid{
		capacity: capacity,
		users:    make([][]int32, n),
		userPos:  make([][]int32, n),
		resMark:  make([]uint32, n),
		left:     make([]float64, n),
		weight:   make([]float64, n),
		count:    make([]int32, n),
	}
}

// add starts a flow over resources res with coefficients coef and returns
// its id. Its rate is set by the next solve.
func (f *fluid) add(res []int32, coef []float64, limit float64) int32 {
	var id int32
	if k := len(f.free); k > 0 {
		id = f.free[k-1]
		f.free = f.free[:k-1]
	} else {
		id = int32(len(f.flows))
		f.flows = append(f.flows, flowState{})
		f.flowMark = append(f.flowMark, 0)
	}
	fl := &f.flows[id]
	*fl = flowState{n: int8(len(res)), active: true, limit: limit}
	for k, r := range res {
		fl.res[k], fl.coef[k] = r, coef[k]
		fl.pos[k] = int32(len(f.users[r]))
		f.users[r] = append(f.users[r], id)
		f.userPos[r] = append(f.userPos[r], int32(k))
		f.dirty = append(f.dirty, r)
	}
	return id
}

// remove ends a flow.
func (f *fluid) remove(id int32) {
	fl := &f.flows[id]
	for k := range int(fl.n) {
		r := fl.res[k]
		p := fl.pos[k]
		us, ps := f.users[r], f.userPos[r]
		last := int32(len(us) - 1)
		if p != last {
			moved := us[last]
			us[p], ps[p] = moved, ps[last]
			f.flows[moved].pos[ps[p]] = p
		}
		f.users[r], f.userPos[r] = us[:last], ps[:last]
		f.dirty = append(f.dirty, r)
	}
	fl.active = false
	fl.rate = 0
	f.free = append(f.free, id)
}

// solve recomputes the rates of the flows in the components touched since
// the last solve and returns the flows whose rate changed.
func (f *fluid) solve() []change {
	f.changed = f.changed[:0]
	if len(f.dirty) == 0 {
		return f.changed
	}
	f.epoch++
	if f.epoch == 0 { // wrapped: reset stamps
		clear(f.resMark)
		clear(f.flowMark)
		f.epoch = 1
	}
	e := f.epoch
	// The component: every resource and flow reachable from a dirty resource.
	f.compRes, f.compFlow = f.compRes[:0], f.compFlow[:0]
	for _, r := range f.dirty {
		if f.resMark[r] != e {
			f.resMark[r] = e
			f.compRes = append(f.compRes, r)
		}
	}
	f.dirty = f.dirty[:0]
	for i := 0; i < len(f.compRes); i++ {
		for _, id := range f.users[f.compRes[i]] {
			if f.flowMark[id] == e {
				continue
			}
			f.flowMark[id] = e
			f.compFlow = append(f.compFlow, id)
			fl := &f.flows[id]
			for k := range int(fl.n) {
				if r := fl.res[k]; f.resMark[r] != e {
					f.resMark[r] = e
					f.compRes = append(f.compRes, r)
				}
			}
		}
	}
	// Progressive filling. Every unfrozen flow has the same rate, level.
	for _, r := range f.compRes {
		f.left[r] = f.capacity[r]
		f.weight[r] = 0
		f.count[r] = 0
	}
	f.capped = f.capped[:0]
	for _, id := range f.compFlow {
		fl := &f.flows[id]
		fl.frozen = false
		if fl.limit > 0 {
			f.capped = append(f.capped, id)
		}
		for k := range int(fl.n) {
			f.weight[fl.res[k]] += fl.coef[k]
			f.count[fl.res[k]]++
		}
	}
	active := f.compRes[:0:0] // resources with unfrozen flows, as a fresh slice
	active = append(active, f.compRes...)
	unfrozen := len(f.compFlow)
	level := 0.0
	for unfrozen > 0 {
		// The next level is where the first active resource saturates.
		next := math.Inf(1)
		keep := active[:0]
		for _, r := range active {
			if f.count[r] == 0 {
				continue
			}
			keep = append(keep, r)
			if l := level + f.left[r]/f.weight[r]; l < next {
				next = l
			}
		}
		active = keep
		for _, id := range f.capped {
			if fl := &f.flows[id]; !fl.frozen && fl.limit < next {
				next = fl.limit
			}
		}
		if math.IsInf(next, 1) {
			break // flows on no resource: cannot happen, every flow has one
		}
		inc := next - level
		for _, r := range active {
			f.left[r] -= inc * f.weight[r]
		}
		level = next
		// Freeze capped flows that reached their cap.
		for _, id := range f.capped {
			if fl := &f.flows[id]; !fl.frozen && fl.limit <= level*(1+1e-12) {
				f.freeze(id, level)
				unfrozen--
			}
		}
		// Freeze the flows of every resource saturated at this level.
		for _, r := range active {
			if f.count[r] == 0 || f.left[r] > 1e-12*f.capacity[r] {
				continue
			}
			for _, id := range f.users[r] {
				if !f.flows[id].frozen {
					f.freeze(id, level)
					unfrozen--
				}
			}
			f.weight[r] = 0
			f.left[r] = 0
		}
	}
	return f.changed
}

// freeze fixes a flow's rate at level and takes it out of the filling.
func (f *fluid) freeze(id int32, level float64) {
	fl := &f.flows[id]
	fl.frozen = true
	if fl.rate != level {
		f.changed = append(f.changed, change{id, fl.rate})
	}
	fl.rate = level
	for k := range int(fl.n) {
		f.weight[fl.res[k]] -= fl.coef[k]
		f.count[fl.res[k]]--
	}
}
