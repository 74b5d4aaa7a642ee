package sim

import "slices"

// fluid is a set of resources shared by active flows at max-min fair rates,
// in exact fixed-point arithmetic (fixed.go).
//
// The solution is the one progressive filling gives: every unfrozen flow's
// rate rises together; at each step the level is the least candidate
// floor((capacity - frozen load) / unfrozen coefficients) over the
// resources and the least rate cap over the flows; the resources whose
// candidate is the level saturate there and freeze their flows, as do the
// flows capped there. Levels rise strictly from step to step, so each
// resource has one saturation level (noLevel if it never saturates) and a
// flow's rate is min(its cap, the least level on its path). Groups name
// that: a flow's group is its bottleneck, the resource of least level on
// its path (the least index among equals), or its cap's group when the cap
// is no higher; a group's flows all run at the group's level.
//
// A solve is local. It refills the resources whose flow set changed (the
// set A) with every flow on them, each flow bounded by the levels of its
// resources outside A (held), then checks every held resource that a flow
// whose rate changed crosses: its level must be what its own flows' rates
// give (verify). A held resource that fails joins A and the refill runs
// again; when A's flows pass half the active flows the solve fills the
// whole connected component. The result equals a fill of every flow from
// scratch bit for bit: progressive filling visits levels in order, and a
// held resource whose candidate at every level below its own is higher
// and at its own equal to it saturates there in the full fill too
// (docs/sim.md; the tests hold it to a full fill on random flows, random
// schedules and every shipped scenario).
type fluid struct {
	nres     int
	capacity []u128    // per resource, load units
	users    [][]int32 // per resource, its active flows
	userPos  [][]int32 // per resource, per user: index of the resource in the flow's list
	ucoef    [][]int64 // per resource, per user: its coefficient there (read in order by holds)
	wsum     []int64   // per resource: the sum of its flows' coefficients

	flows   []flowState
	pos     [][maxPath]int32 // per flow slot: its index in users[res[k]]
	free    []int32          // recycled flow slots
	nactive int              // active flows

	// level is per group: the resources' saturation levels (noLevel: not
	// saturated), then the cap groups' caps.
	level    []int64
	capGroup map[int64]int32 // a cap -> its group

	dirty []int32 // resources whose flow set changed since the last solve

	// What the last solve changed: the groups whose level moved and the
	// flows whose group did (a new flow from group -1).
	levelCh []levelChange
	moves   []move

	// fullFrac: a solve whose flows pass this fraction of the active
	// flows fills the whole component (0: always; the tests vary it).
	fullFrac float64
	// local and full count the solves of each kind, rounds the refills of
	// local solves, for tests and tuning.
	local, full, rounds int
	sumS, sumA          int

	// scratch, stamped per solve
	epoch   uint32
	resMark []uint32 // per resource: in A at this epoch
	chkMark []uint32 // per resource: queued for verification in round chk
	chk     uint32
	A, S    []int32
	check   []int32
	// the refill's state, per resource of A and per flow of S
	load   []u128        // per resource: load of the frozen flows
	wt     []int64       // per resource: coefficients of the unfrozen flows
	count  []int32       // per resource: unfrozen flows
	cand   []int64       // per resource: its candidate level
	nlevel []int64       // per resource: its new level
	sc     []flowScratch // per flow slot
	bounds []bounded     // flows of S with a finite bound, sorted by it
	stale  []bool        // per resource: its candidate needs recomputing
	sorted []rateCoef
}

// flowState is what the solves read of a flow.
type flowState struct {
	res   [maxPath]int32
	coef  [maxPath]int64
	rate  int64 // rate units
	group int32 // its group; -1 before its first solve
	capG  int32 // its cap's group, or -1
	n     int8
}

// flowScratch is a flow's state in one solve, kept together: a refill
// reads and writes all of it for every flow it touches.
type flowScratch struct {
	rate   int64  // its new rate
	bound  int64  // its cap and held levels
	mark   uint32 // the epoch of the solve whose S holds it
	frozen bool   // frozen in this refill
}

// levelChange is a group whose level a solve changed.
type levelChange struct {
	group    int32
	old, new int64
}

// move is a flow whose group a solve changed (old -1: a new flow).
type move struct{ id, old, new int32 }

type rateCoef struct{ rate, coef int64 }

// defaultFullFrac is where a local solve gives way to a full one: past
// half the active flows, the component costs little more.
const defaultFullFrac = 0.5

// maxPath is the most resources one flow holds at once: egress and ingress
// ports, two fabric links and a GPU's NCCL channels at each end.
const maxPath = 6

func newFluid(capacity []u128) *fluid {
	n := len(capacity)
	f := &fluid{
		nres:     n,
		capacity: capacity,
		users:    make([][]int32, n),
		userPos:  make([][]int32, n),
		ucoef:    make([][]int64, n),
		wsum:     make([]int64, n),
		level:    make([]int64, n),
		capGroup: map[int64]int32{},
		resMark:  make([]uint32, n),
		chkMark:  make([]uint32, n),
		load:     make([]u128, n),
		wt:       make([]int64, n),
		count:    make([]int32, n),
		cand:     make([]int64, n),
		nlevel:   make([]int64, n),
		stale:    make([]bool, n),
		fullFrac: defaultFullFrac,
	}
	for r := range f.level {
		f.level[r] = noLevel
	}
	return f
}

// groups is the number of groups: every resource, then the cap groups.
func (f *fluid) groups() int { return len(f.level) }

// add starts a flow over resources res with coefficients coef (fixed
// point) and a rate cap (rate units, 0 for none), and returns its id. Its
// rate and group are set by the next solve.
func (f *fluid) add(res []int32, coef []int64, limit int64) int32 {
	var id int32
	if k := len(f.free); k > 0 {
		id = f.free[k-1]
		f.free = f.free[:k-1]
	} else {
		id = int32(len(f.flows))
		f.flows = append(f.flows, flowState{})
		f.pos = append(f.pos, [maxPath]int32{})
		f.sc = append(f.sc, flowScratch{})
	}
	f.nactive++
	fl := &f.flows[id]
	*fl = flowState{n: int8(len(res)), group: -1, capG: -1}
	if limit > 0 {
		g, ok := f.capGroup[limit]
		if !ok {
			g = int32(len(f.level))
			f.capGroup[limit] = g
			f.level = append(f.level, limit)
		}
		fl.capG = g
	}
	f.sc[id].mark = 0
	for k, r := range res {
		fl.res[k], fl.coef[k] = r, coef[k]
		f.wsum[r] += coef[k]
		f.pos[id][k] = int32(len(f.users[r]))
		f.users[r] = append(f.users[r], id)
		f.userPos[r] = append(f.userPos[r], int32(k))
		f.ucoef[r] = append(f.ucoef[r], coef[k])
		f.dirty = append(f.dirty, r)
	}
	return id
}

// remove ends a flow.
func (f *fluid) remove(id int32) {
	fl := &f.flows[id]
	f.nactive--
	for k := range int(fl.n) {
		r := fl.res[k]
		f.wsum[r] -= fl.coef[k]
		p := f.pos[id][k]
		us, ps, cs := f.users[r], f.userPos[r], f.ucoef[r]
		last := int32(len(us) - 1)
		if p != last {
			moved := us[last]
			us[p], ps[p], cs[p] = moved, ps[last], cs[last]
			f.pos[moved][ps[p]] = p
		}
		f.users[r], f.userPos[r], f.ucoef[r] = us[:last], ps[:last], cs[:last]
		// A resource that does not saturate keeps not saturating when
		// a flow leaves it, and bottlenecks no flow: only a change of
		// its other flows' rates can move it, and those are checked.
		if f.level[r] != noLevel {
			f.dirty = append(f.dirty, r)
		}
	}
	f.free = append(f.free, id)
}

// stamp starts a new marking epoch.
func (f *fluid) stamp() uint32 {
	f.epoch++
	if f.epoch == 0 { // wrapped: reset stamps
		clear(f.resMark)
		for i := range f.sc {
			f.sc[i].mark = 0
		}
		f.epoch = 1
	}
	return f.epoch
}

// solve recomputes the rates after flows came and went; levelCh and
// moves then hold what changed.
func (f *fluid) solve() {
	f.levelCh, f.moves = f.levelCh[:0], f.moves[:0]
	if len(f.dirty) == 0 {
		return
	}
	e := f.stamp()
	f.A, f.S = f.A[:0], f.S[:0]
	for _, r := range f.dirty {
		f.addRes(r, e)
	}
	f.dirty = f.dirty[:0]
	for {
		if float64(len(f.S)) > f.fullFrac*float64(f.nactive) {
			f.fillComponent(e)
			f.full++
			break
		}
		f.rounds++
		f.sumS += len(f.S)
		f.sumA += len(f.A)
		f.fill(e)
		if f.verifyHeld(e) {
			f.local++
			break
		}
	}
	f.commit()
}

// addRes puts a resource and its flows in A and S.
func (f *fluid) addRes(r int32, e uint32) {
	if f.resMark[r] == e {
		return
	}
	f.resMark[r] = e
	f.A = append(f.A, r)
	for _, id := range f.users[r] {
		if f.sc[id].mark != e {
			f.sc[id].mark = e
			f.S = append(f.S, id)
		}
	}
}

// fillComponent makes A the connected component of A (through shared
// flows) and fills it.
func (f *fluid) fillComponent(e uint32) {
	for i := 0; i < len(f.S); i++ {
		fl := &f.flows[f.S[i]]
		for k := range int(fl.n) {
			f.addRes(fl.res[k], e)
		}
	}
	f.fill(e)
}

// fill runs progressive filling over the flows S on the resources A, each
// flow bounded by its cap and the levels of its resources outside A. It
// sets nlevel for A's resources and the new rates of S's flows.
func (f *fluid) fill(e uint32) {
	for _, r := range f.A {
		f.load[r] = u128{}
		f.wt[r] = f.wsum[r]
		f.count[r] = int32(len(f.users[r]))
		f.nlevel[r] = noLevel
		f.cand[r] = f.candidate(r)
		f.stale[r] = false
	}
	bh := f.bounds[:0]
	for _, id := range f.S {
		fl := &f.flows[id]
		b := int64(noLevel)
		if fl.capG >= 0 {
			b = f.level[fl.capG]
		}
		for k := range int(fl.n) {
			if r := fl.res[k]; f.resMark[r] != e {
				b = min(b, f.level[r])
			}
		}
		f.sc[id].bound, f.sc[id].frozen, f.sc[id].rate = b, false, 0
		if b != noLevel {
			bh = append(bh, bounded{b, id})
		}
	}
	// Sorted by bound, consumed from the front: the flows frozen at one
	// level by their bounds are a run (many flows share a held level), each
	// O(1) where a heap paid a sift-down.
	sortBounds(bh)
	bi := 0
	unfrozen := len(f.S)
	act := append(f.check[:0], f.A...) // resources with unfrozen flows
	for unfrozen > 0 {
		level := int64(noLevel)
		keep := act[:0]
		for _, r := range act {
			if f.count[r] > 0 {
				if f.stale[r] {
					f.cand[r], f.stale[r] = f.candidate(r), false
				}
				keep = append(keep, r)
				level = min(level, f.cand[r])
			}
		}
		act = keep
		// The least bound of a flow still unfrozen.
		for bi < len(bh) && f.sc[bh[bi].id].frozen {
			bi++
		}
		if bi < len(bh) {
			level = min(level, bh[bi].bound)
		}
		if level == noLevel {
			// Every unfrozen flow's resources have room beyond any
			// level the units hold; the engine's ranges rule it out.
			for _, id := range f.S {
				if !f.sc[id].frozen {
					f.sc[id].frozen, f.sc[id].rate = true, noLevel-1
				}
			}
			break
		}
		// Freeze at this level: first every saturated resource's flows,
		// then the flows bounded here; freezing marks the candidates of
		// the resources it crosses stale.
		// (The resources saturating here are those whose candidate at
		// the step's start is the level: nlevel marks them first.)
		for _, r := range act {
			if f.cand[r] == level {
				f.nlevel[r] = level
			}
		}
		for _, r := range act {
			if f.nlevel[r] != level || f.cand[r] != level {
				continue
			}
			for _, id := range f.users[r] {
				if !f.sc[id].frozen {
					f.freeze(id, level, e)
					unfrozen--
				}
			}
		}
		for ; bi < len(bh) && bh[bi].bound == level; bi++ {
			if id := bh[bi].id; !f.sc[id].frozen {
				f.freeze(id, level, e)
				unfrozen--
			}
		}
	}
	f.bounds = bh[:0]
	f.check = act[:0]
}

// bounded is a flow of a refill with a finite bound.
type bounded struct {
	bound int64
	id    int32
}

// sortBounds sorts flows by bound: a three-way quicksort (many flows share
// a bound) with insertion sort for short runs, its comparisons inline
// (slices.SortFunc's comparator calls were a tenth of the simulation).
// Equal bounds end in any order: freezing them is order-free.
func sortBounds(a []bounded) {
	for len(a) > 16 {
		// Median of three as the pivot.
		m := len(a) / 2
		x, y, z := a[0].bound, a[m].bound, a[len(a)-1].bound
		p := y
		if (x <= y) == (y <= z) {
			p = y
		} else if (y <= x) == (x <= z) {
			p = x
		} else {
			p = z
		}
		// a[:lt] < p, a[lt:i] == p, a[gt:] > p.
		lt, i, gt := 0, 0, len(a)
		for i < gt {
			switch b := a[i].bound; {
			case b < p:
				a[lt], a[i] = a[i], a[lt]
				lt++
				i++
			case b > p:
				gt--
				a[gt], a[i] = a[i], a[gt]
			default:
				i++
			}
		}
		// Recurse into the smaller side, loop on the larger.
		if lt < len(a)-gt {
			sortBounds(a[:lt])
			a = a[gt:]
		} else {
			sortBounds(a[gt:])
			a = a[:lt]
		}
	}
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j].bound < a[j-1].bound; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// candidate is a resource's level if it saturated next.
func (f *fluid) candidate(r int32) int64 {
	if f.wt[r] <= 0 {
		return noLevel
	}
	left := f.capacity[r]
	if !f.load[r].less(left) {
		return 0
	}
	return left.sub(f.load[r]).floorDiv(uint64(f.wt[r]))
}

// freeze fixes a flow of S at level and takes it out of the filling.
func (f *fluid) freeze(id int32, level int64, e uint32) {
	fl := &f.flows[id]
	f.sc[id].frozen, f.sc[id].rate = true, level
	for k := range int(fl.n) {
		if r := fl.res[k]; f.resMark[r] == e {
			f.load[r] = f.load[r].add(mul128(uint64(fl.coef[k]), uint64(level)))
			f.wt[r] -= fl.coef[k]
			f.count[r]--
			f.stale[r] = true
		}
	}
}

// verifyHeld checks the held resources that flows of S whose rate changed
// cross, and puts those that fail in A; it reports whether all passed.
func (f *fluid) verifyHeld(e uint32) bool {
	f.check = f.check[:0]
	f.chk++
	if f.chk == 0 { // wrapped: reset stamps
		clear(f.chkMark)
		f.chk = 1
	}
	c := f.chk
	for _, id := range f.S {
		fl := &f.flows[id]
		if f.sc[id].rate == fl.rate && fl.group >= 0 {
			continue
		}
		for k := range int(fl.n) {
			if r := fl.res[k]; f.resMark[r] != e && f.chkMark[r] != c {
				f.chkMark[r] = c
				f.check = append(f.check, r)
			}
		}
	}
	ok := true
	for _, r := range f.check {
		if !f.holds(r, e) {
			ok = false
			f.addRes(r, e)
		}
	}
	return ok
}

// holds reports whether a held resource's level is what progressive
// filling gives it with its flows at their new rates: at every level
// below its own, its candidate is higher; at its own, equal.
func (f *fluid) holds(r int32, e uint32) bool {
	if ok, sure := f.holdsFast(r, e); sure {
		return ok
	}
	return f.holdsSorted(r, e)
}

// holdsFast decides holds without sorting where the room left settles
// it: sure reports whether it did. With the flows' loads summed:
//   - unsaturated, it holds if the capacity covers the load plus one rate
//     unit per flow (at every level its candidate is then above);
//   - saturated at level l, it holds if the flows at l give it level l
//     and the room left, with the gap from l to the fastest flow below it,
//     covers every coefficient below (each level below l then has a
//     candidate above it); it fails if any flow is faster than l, or if
//     its flows at l do not give l.
func (f *fluid) holdsFast(r int32, e uint32) (ok, sure bool) {
	lvl := f.level[r]
	var below, at u128     // loads of the flows below l, at l
	var wBelow, wAt uint64 // their coefficients
	var top int64          // the fastest flow below l
	for i, id := range f.users[r] {
		x := f.flows[id].rate
		if f.sc[id].mark == e {
			x = f.sc[id].rate
		}
		c := uint64(f.ucoef[r][i])
		switch {
		case x < lvl:
			below = below.add(mul128(c, uint64(x)))
			wBelow += c
			top = max(top, x)
		case x == lvl:
			at = at.add(mul128(c, uint64(x)))
			wAt += c
		default:
			return false, true
		}
	}
	capa := f.capacity[r]
	if lvl == noLevel {
		need := below.add(u128{0, wBelow})
		if !capa.less(need) {
			return true, true
		}
		return false, false
	}
	if wAt == 0 || capa.less(below) || capa.sub(below).floorDiv(wAt) != lvl {
		return false, true
	}
	room := capa.sub(below).sub(at) // the remainder: less than wAt
	slack := room.add(mul128(uint64(lvl-top-1), wAt))
	if wBelow == 0 || !slack.less(u128{0, wBelow}) {
		return true, true
	}
	return false, false
}

// holdsSorted is holds by sweeping the flows' rates in order.
func (f *fluid) holdsSorted(r int32, e uint32) bool {
	xs := f.sorted[:0]
	for i, id := range f.users[r] {
		x := f.flows[id].rate
		if f.sc[id].mark == e {
			x = f.sc[id].rate
		}
		xs = append(xs, rateCoef{x, f.ucoef[r][i]})
	}
	slices.SortFunc(xs, func(a, b rateCoef) int {
		switch {
		case a.rate < b.rate:
			return -1
		case a.rate > b.rate:
			return 1
		}
		return 0
	})
	f.sorted = xs
	lvl := f.level[r]
	var load u128
	w := f.wsum[r]
	for i := 0; i < len(xs); {
		mu := xs[i].rate
		// The candidate while the flows slower than mu are frozen.
		var k int64
		if !load.less(f.capacity[r]) {
			k = 0
		} else {
			k = f.capacity[r].sub(load).floorDiv(uint64(w))
		}
		if lvl <= mu {
			return lvl == mu && k == lvl
		}
		if k <= mu {
			return false
		}
		for ; i < len(xs) && xs[i].rate == mu; i++ {
			load = load.add(mul128(uint64(xs[i].coef), uint64(mu)))
			w -= xs[i].coef
		}
	}
	return lvl == noLevel
}

// commit adopts the refill's levels and rates and records what changed.
func (f *fluid) commit() {
	for _, r := range f.A {
		if nl := f.nlevel[r]; nl != f.level[r] {
			f.levelCh = append(f.levelCh, levelChange{r, f.level[r], nl})
			f.level[r] = nl
		}
	}
	for _, id := range f.S {
		fl := &f.flows[id]
		fl.rate = f.sc[id].rate
		if g := f.groupOf(fl); g != fl.group {
			f.moves = append(f.moves, move{id, fl.group, g})
			fl.group = g
		}
	}
}

// groupOf is a flow's group under the current levels.
func (f *fluid) groupOf(fl *flowState) int32 {
	g, best := int32(-1), int64(noLevel)
	for k := range int(fl.n) {
		if r := fl.res[k]; f.level[r] < best || f.level[r] == best && (g < 0 || r < g) {
			g, best = r, f.level[r]
		}
	}
	if fl.capG >= 0 && f.level[fl.capG] <= best {
		g = fl.capG
	}
	return g
}
