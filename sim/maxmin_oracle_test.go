package sim

// The max-min solver as it was before the incremental one (commit b1e2072),
// kept unchanged as the test oracle: the engine run with it must give every
// op the same times as with the solver of maxmin.go (oracle_test.go).

import "math"

// oracleFluid is a set of resources shared by active flows. Rates are max-min
// fair: progressive filling raises every unfrozen flow's rate together
// until some resource saturates, freezes the flows crossing it, and repeats.
// A flow may use a resource with a coefficient (2 for memory: a copy reads
// and writes each byte). Rates are in bytes per picosecond.
//
// Solving is incremental: only the connected component (flows linked by
// shared resources) around resources whose flow set changed is re-solved.
// When many flows are active, a local re-solve comes first (solveLocal): it
// re-solves only the flows on the changed resources, holding the others at
// their rates, and checks the result against the max-min conditions; it
// widens the set until they hold, and falls back to the component.
type oracleFluid struct {
	capacity []float64 // per resource, bytes/ps
	users    [][]int32 // per resource, its active flows
	userPos  [][]int32 // per resource, per user: index of the resource in the flow's list

	flows   []oracleFlowState
	free    []int32 // recycled flow slots
	nactive int     // active flows

	// The state of the last solution, per resource: the level at which it
	// saturated (+Inf if it did not), the number of flows it bottlenecks,
	// and its load (sum of coefficient x rate).
	level []float64
	nb    []int32
	load  []float64
	// localMin is the number of active flows from which solve tries a local
	// re-solve first. Below it, every solve fills the whole component.
	localMin int
	// local and full count the solves of each kind, for tests and tuning.
	local, full int
	// scratch of the local re-solve, per flow slot and per resource
	nrate  []float64
	nbott  []int32
	nfrz   []bool
	lv     []float64
	sb     []int32
	frozAt []bool
	actv   []int32

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

type oracleFlowState struct {
	limit  float64 // rate cap in bytes/ps; 0 for none
	res    [oracleMaxPath]int32
	coef   [oracleMaxPath]float64
	pos    [oracleMaxPath]int32 // index of this flow in users[res[k]]
	n      int8
	active bool
	frozen bool
	rate   float64 // bytes/ps
	bott   int32   // the resource that froze it in the last solve; -1: its cap, or none
}

// oracleMaxPath is the most resources one flow holds at once: egress and ingress
// ports, two fabric links and a rate cap.
const oracleMaxPath = 6

// oracleLocalMin is where local re-solving starts to pay: below it, a
// component is small enough to fill whole.
const oracleLocalMin = 2048

func newOracleFluid(capacity []float64) *oracleFluid {
	n := len(capacity)
	f := &oracleFluid{
		capacity: capacity,
		users:    make([][]int32, n),
		userPos:  make([][]int32, n),
		resMark:  make([]uint32, n),
		left:     make([]float64, n),
		weight:   make([]float64, n),
		count:    make([]int32, n),
		level:    make([]float64, n),
		nb:       make([]int32, n),
		load:     make([]float64, n),
		lv:       make([]float64, n),
		sb:       make([]int32, n),
		frozAt:   make([]bool, n),
		localMin: oracleLocalMin,
	}
	for r := range f.level {
		f.level[r] = math.Inf(1)
	}
	return f
}

// add starts a flow over resources res with coefficients coef and returns
// its id. Its rate is set by the next solve.
func (f *oracleFluid) add(res []int32, coef []float64, limit float64) int32 {
	var id int32
	if k := len(f.free); k > 0 {
		id = f.free[k-1]
		f.free = f.free[:k-1]
	} else {
		id = int32(len(f.flows))
		f.flows = append(f.flows, oracleFlowState{})
		f.flowMark = append(f.flowMark, 0)
		f.nrate = append(f.nrate, 0)
		f.nbott = append(f.nbott, -1)
		f.nfrz = append(f.nfrz, false)
	}
	f.nactive++
	fl := &f.flows[id]
	*fl = oracleFlowState{n: int8(len(res)), active: true, limit: limit, bott: -1}
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
func (f *oracleFluid) remove(id int32) {
	fl := &f.flows[id]
	f.nactive--
	if fl.bott >= 0 {
		f.nb[fl.bott]--
	}
	for k := range int(fl.n) {
		r := fl.res[k]
		f.load[r] -= fl.coef[k] * fl.rate
		if f.load[r] < 0 {
			f.load[r] = 0
		}
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
func (f *oracleFluid) solve() []change {
	f.changed = f.changed[:0]
	if len(f.dirty) == 0 {
		return f.changed
	}
	if f.nactive >= f.localMin && f.solveLocal() {
		f.local++
		return f.changed
	}
	f.full++
	e := f.stamp()
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
		f.level[r] = math.Inf(1)
		f.nb[r] = 0
		f.load[r] = 0
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
		var next float64
		active, next = f.nextSaturation(active, level)
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
				f.freeze(id, level, -1)
				unfrozen--
			}
		}
		// Freeze the flows of every resource saturated at this level.
		for _, r := range active {
			if f.count[r] == 0 || f.left[r] > 1e-12*f.capacity[r] {
				continue
			}
			f.level[r] = level
			for _, id := range f.users[r] {
				if !f.flows[id].frozen {
					f.freeze(id, level, r)
					unfrozen--
				}
			}
			f.weight[r] = 0
			f.left[r] = 0
		}
	}
	// Record the solution's bottlenecks and loads for local re-solves.
	for _, id := range f.compFlow {
		fl := &f.flows[id]
		if fl.bott >= 0 {
			f.nb[fl.bott]++
		}
		for k := range int(fl.n) {
			f.load[fl.res[k]] += fl.coef[k] * fl.rate
		}
	}
	return f.changed
}

// nextSaturation drops from active the resources with no unfrozen flow
// left and returns the rest with the level at which the first of them
// saturates (+Inf when none is left).
func (f *oracleFluid) nextSaturation(active []int32, level float64) ([]int32, float64) {
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
	return keep, next
}

// stamp starts a new marking epoch and returns it.
func (f *oracleFluid) stamp() uint32 {
	f.epoch++
	if f.epoch == 0 { // wrapped: reset stamps
		clear(f.resMark)
		clear(f.flowMark)
		f.epoch = 1
	}
	return f.epoch
}

// freeze fixes a flow's rate at level and takes it out of the filling; at
// is the resource that froze it (-1: its cap).
func (f *oracleFluid) freeze(id int32, level float64, at int32) {
	fl := &f.flows[id]
	fl.frozen = true
	fl.bott = at
	if fl.rate != level {
		f.changed = append(f.changed, change{id, fl.rate, level})
	}
	fl.rate = level
	for k := range int(fl.n) {
		f.weight[fl.res[k]] -= fl.coef[k]
		f.count[fl.res[k]]--
	}
}

// oracleLocalRounds bounds how often a local re-solve widens its set before it
// gives the component to the full solve.
const oracleLocalRounds = 8

// solveLocal re-solves the flows on the changed resources (the set S),
// holding every other flow at its rate, and accepts the result when the
// max-min conditions hold on every resource S touches; otherwise it adds
// the flows of the resources where they fail to S and tries again. It
// reports false, changing nothing, when S grows past half the active flows
// or the rounds run out: the caller then fills the whole component.
//
// The conditions: a feasible allocation is max-min fair if and only if
// every flow has a bottleneck, a saturated resource on which no flow is
// faster. The flows outside S keep their rates and bottlenecks, so only a
// resource r that S touches can break them:
//   - if flows outside S are bottlenecked at r, r must saturate at their
//     rate (its level must not change);
//   - if a flow of S is bottlenecked at r at a level below r's old one, no
//     flow outside S on r may be faster.
//
// Levels are compared with a relative tolerance of 1e-9.
func (f *oracleFluid) solveLocal() bool {
	e := f.stamp()
	S, R := f.compFlow[:0], f.compRes[:0]
	addRes := func(r int32) {
		if f.resMark[r] != e {
			f.resMark[r] = e
			R = append(R, r)
		}
	}
	addFlow := func(id int32) {
		if f.flowMark[id] == e {
			return
		}
		f.flowMark[id] = e
		S = append(S, id)
		fl := &f.flows[id]
		for k := range int(fl.n) {
			addRes(fl.res[k])
		}
	}
	for _, r := range f.dirty {
		addRes(r)
		for _, id := range f.users[r] {
			addFlow(id)
		}
	}
	limit := f.nactive / 2
	for round := 0; ; round++ {
		if len(S) > limit || round == oracleLocalRounds {
			f.compFlow, f.compRes = S, R
			return false
		}
		f.fillLocal(S, R)
		bad := false
		for _, r := range R[:len(R):len(R)] {
			if f.violated(r, e) {
				bad = true
				for _, id := range f.users[r] {
					addFlow(id)
				}
			}
		}
		if !bad {
			break
		}
	}
	for _, id := range S {
		fl := &f.flows[id]
		nr := f.nrate[id]
		if nr != fl.rate {
			f.changed = append(f.changed, change{id, fl.rate, nr})
			for k := range int(fl.n) {
				f.load[fl.res[k]] += fl.coef[k] * (nr - fl.rate)
			}
		}
		if fl.bott >= 0 {
			f.nb[fl.bott]--
		}
		if b := f.nbott[id]; b >= 0 {
			f.nb[b]++
		}
		fl.rate, fl.bott = nr, f.nbott[id]
	}
	for _, r := range R {
		f.level[r] = f.lv[r]
	}
	f.compFlow, f.compRes = S, R
	f.dirty = f.dirty[:0]
	return true
}

// fillLocal runs progressive filling over the flows S on the resources R,
// each resource's capacity reduced by the load of the flows outside S. It
// writes the new rates and bottlenecks to nrate and nbott, each resource's
// saturation level to lv, the number of S flows its old solution
// bottlenecked there to sb, and whether an S flow froze there to frozAt.
func (f *oracleFluid) fillLocal(S, R []int32) {
	for _, r := range R {
		f.left[r] = f.capacity[r] - f.load[r]
		f.weight[r], f.count[r], f.sb[r] = 0, 0, 0
		f.lv[r], f.frozAt[r] = math.Inf(1), false
	}
	f.capped = f.capped[:0]
	for _, id := range S {
		fl := &f.flows[id]
		f.nfrz[id], f.nbott[id], f.nrate[id] = false, -1, 0
		if fl.limit > 0 {
			f.capped = append(f.capped, id)
		}
		if fl.bott >= 0 {
			f.sb[fl.bott]++
		}
		for k := range int(fl.n) {
			r := fl.res[k]
			f.left[r] += fl.coef[k] * fl.rate
			f.weight[r] += fl.coef[k]
			f.count[r]++
		}
	}
	for _, r := range R {
		f.left[r] = max(f.left[r], 0)
	}
	e := f.epoch
	freeze := func(id int32, level float64, at int32) {
		f.nfrz[id], f.nrate[id], f.nbott[id] = true, level, at
		fl := &f.flows[id]
		for k := range int(fl.n) {
			f.weight[fl.res[k]] -= fl.coef[k]
			f.count[fl.res[k]]--
		}
	}
	active := append(f.actv[:0], R...)
	unfrozen := len(S)
	level := 0.0
	for unfrozen > 0 {
		var next float64
		active, next = f.nextSaturation(active, level)
		for _, id := range f.capped {
			if fl := &f.flows[id]; !f.nfrz[id] && fl.limit < next {
				next = fl.limit
			}
		}
		if math.IsInf(next, 1) {
			break
		}
		inc := next - level
		for _, r := range active {
			f.left[r] -= inc * f.weight[r]
		}
		level = next
		for _, id := range f.capped {
			if fl := &f.flows[id]; !f.nfrz[id] && fl.limit <= level*(1+1e-12) {
				freeze(id, level, -1)
				unfrozen--
			}
		}
		for _, r := range active {
			if f.count[r] == 0 || f.left[r] > 1e-12*f.capacity[r] {
				continue
			}
			f.lv[r] = level
			for _, id := range f.users[r] {
				if f.flowMark[id] == e && !f.nfrz[id] {
					freeze(id, level, r)
					f.frozAt[r] = true
					unfrozen--
				}
			}
			f.weight[r] = 0
			f.left[r] = 0
		}
	}
	f.actv = active
}

// violated reports whether the local solution breaks the max-min
// conditions at resource r (see solveLocal); e marks the flows of S.
func (f *oracleFluid) violated(r int32, e uint32) bool {
	if f.nb[r]-f.sb[r] > 0 {
		return !oracleSameLevel(f.lv[r], f.level[r])
	}
	if !f.frozAt[r] || f.lv[r] >= f.level[r] || oracleSameLevel(f.lv[r], f.level[r]) {
		return false
	}
	for _, id := range f.users[r] {
		if f.flowMark[id] != e && f.flows[id].rate > f.lv[r]*(1+1e-9) {
			return true
		}
	}
	return false
}

// oracleSameLevel compares two levels (+Inf for none) with a relative tolerance.
func oracleSameLevel(a, b float64) bool {
	if math.IsInf(a, 1) || math.IsInf(b, 1) {
		return a == b
	}
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}
