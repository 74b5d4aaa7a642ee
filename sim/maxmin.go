package sim

import (
	"cmp"
	"slices"
)

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
// again; when A's users, counted once per resource of A they cross, pass
// 1.6 times the active flows (about 80% of them, a flow crossing two) the
// solve fills the whole connected component. Where A has resources with
// buckets, it first takes in the held resources that would fail (widen).
// A refill reads aggregates (fillAgg):
// it handles one by one only the flows whose group is in A and the new
// ones; every other flow on A runs at its group's level, held, and enters
// as part of its resource's bucket of flows at that rate. The result
// equals a fill of every flow from
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

	// The aggregates a local refill reads instead of every flow: each
	// resource's solved flows by rate (a flow's rate is its group's
	// level, and many groups share a level), each resource's group
	// members, and the flows added since the last solve.
	bkt []buckets // per resource: its solved flows, by rate (if bucketed)
	// bucketed: per resource, whether it keeps buckets. One with few
	// users keeps none (they would cost more than they save): a refill
	// takes its users one by one. It starts keeping them at bktOn users
	// and stops at bktOff (the tests vary both).
	bucketed      []bool
	bktOn, bktOff int
	// A resource's buckets are indexed by rate (buckets.ix) from more
	// than bixOn buckets until fewer than bixOff.
	bixOn, bixOff int
	gmem          [][]int32 // per resource: the flows whose group it is
	gpos          []int32   // per flow slot: its index in gmem[group]
	fresh         []int32   // flows added since the last solve (removed or repeated slots included)

	// What the last solve changed: the groups whose level moved and the
	// flows whose group did (a new flow from group -1).
	levelCh []levelChange
	moves   []move

	// fullFrac: a solve whose flows pass about this fraction of the
	// active flows (A's users summed past twice it) fills the whole
	// component (0: always; the tests vary it).
	fullFrac float64
	// local counts the local solves and rounds their refills, for the
	// tests.
	local, rounds int
	nS            int  // the users of A, summed: a refill's size
	aBkt          bool // a resource of A keeps buckets

	// scratch, stamped per solve
	epoch   uint32
	resMark []uint32 // per resource: in A at this epoch
	chkMark []uint32 // per resource: queued for verification in round chk
	chk     uint32
	A       []int32
	X       []int32 // the flows the last fill touched: marked, their new rates in nrate
	check   []int32
	// the refill's state, per resource of A and per flow of S
	load   []u128        // per resource: load of the frozen flows
	wt     []int64       // per resource: coefficients of the unfrozen flows
	count  []int32       // per resource: unfrozen flows
	cand   []int64       // per resource: its candidate level
	nlevel []int64       // per resource: its new level
	pend   []shift       // per resource, in commit: the slot moves it holds back to make at once
	pendR  []int32       // the resources with moves held back in this commit
	bounds []bounded     // flows of S with a finite bound, sorted by it
	stale  []bool        // per resource: its candidate needs recomputing
	dl     [][]rateDelta // per held resource checked: the rates changed on it
	sorted []rateCoef
	xl     [][]int32  // per resource of A: the explicit flows on it
	ents   []aggEntry // per resource of A, its buckets less its explicit flows
	entLo  []int32    // per resource of A: its entries, ents[entLo:entHi], one per bucket in the buckets' order
	entHi  []int32
}

// rbucket is a resource's solved flows at one rate: their coefficients
// there summed and their path slots on it counted. It lists no flows: a
// refill that needs a bucket's flows (expand) finds them among the
// resource's users by rate, which is rarer than moving flows between
// buckets (on dsv3-256 hierarchical, 0.45M users scanned against 8.8M
// flow slots moved).
type rbucket struct {
	rate int64
	w    int64
	c    int32
}

// buckets are a resource's solved flows by rate, and their index where
// it keeps many: a table with open addressing of bucket indices + 1 (0:
// empty), its length a power of two at least twice the buckets; nil: a
// lookup scans the buckets. (On scaling-qwen3-235b at 256 GPUs a lookup
// met 44 buckets on average, over 1.0e9 lookups.) The buckets' order is
// the same with or without the index.
type buckets struct {
	b  []rbucket
	ix []int32
}

// aggEntry is a bucket of a resource of A in a local refill, less the
// flows the refill handles one by one: w and c are what is left unfrozen
// of it, all bounded at rate.
type aggEntry struct {
	r    int32
	c    int32
	rate int64
	w    int64
}

// flowState is what the solves read of a flow, and its state in the
// solve under way: 128 bytes, two cache lines (slices of it are 128-byte
// aligned, as Go's size classes from 128 bytes on are multiples of it),
// everything but the coefficients in the first. A refill reads and
// writes both lines of every flow it touches; the scratch state in a
// separate array cost a third line.
type flowState struct {
	mark   uint32 // the epoch of the solve whose S holds it
	group  int32  // its group; -1 before its first solve (its rate is its group's level: rateOf)
	_      int64  // unused: keeps the coefficients on the second line
	nrate  int64  // its new rate in this solve
	capG   int32  // its cap's group, or -1
	n      int8
	bkt    uint8   // its path slots on resources that keep buckets, a bit each
	frozen bool    // frozen in this refill
	_      [8]byte // the coefficients start the second line
	res    [maxPath]int32
	coef   [maxPath]int64
	_      [16]byte
}

// shift is path slots on a resource that move from its bucket at rate old
// to the one at rate new: c of them, their coefficients there summed.
type shift struct {
	old, new, w int64
	c           int32
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
// 80% of the active flows (A's users summed past fullFrac x 2 x the
// active flows), the component costs little more. (Half before widen:
// with it, flat dsv3-256's simulator took 18.0-18.6 s at 0.5, 15.9-16.1 s
// at 0.8, 16.0 s at 1.2; the other routes the same within noise.)
const defaultFullFrac = 0.8

// defaultBktOn and defaultBktOff are the users at which a resource starts
// and stops keeping buckets.
const (
	defaultBktOn  = 16
	defaultBktOff = 8
)

// defaultBixOn and defaultBixOff are the buckets at which a resource's
// buckets are indexed by rate, and no longer.
const (
	defaultBixOn  = 12
	defaultBixOff = 6
)

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
		pend:     make([]shift, n),
		stale:    make([]bool, n),
		bkt:      make([]buckets, n),
		bucketed: make([]bool, n),
		bktOn:    defaultBktOn,
		bktOff:   defaultBktOff,
		bixOn:    defaultBixOn,
		bixOff:   defaultBixOff,
		gmem:     make([][]int32, n),
		xl:       make([][]int32, n),
		dl:       make([][]rateDelta, n),
		entLo:    make([]int32, n),
		entHi:    make([]int32, n),
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
		f.gpos = append(f.gpos, 0)
	}
	f.fresh = append(f.fresh, id)
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
	f.flows[id].mark = 0
	for k, r := range res {
		fl.res[k], fl.coef[k] = r, coef[k]
		f.wsum[r] += coef[k]
		f.pos[id][k] = int32(len(f.users[r]))
		f.users[r] = append(f.users[r], id)
		f.userPos[r] = append(f.userPos[r], int32(k))
		f.ucoef[r] = append(f.ucoef[r], coef[k])
		f.dirty = append(f.dirty, r)
		if f.bucketed[r] {
			fl.bkt |= 1 << k
		} else if len(f.users[r]) >= f.bktOn {
			f.bucketOn(r)
		}
	}
	return id
}

// bucketOn makes resource r keep buckets: its solved users in them.
func (f *fluid) bucketOn(r int32) {
	f.bucketed[r] = true
	for i, id := range f.users[r] {
		fl := &f.flows[id]
		k := f.userPos[r][i]
		fl.bkt |= 1 << k
		if fl.group < 0 {
			continue
		}
		f.bucketAdd(r, f.rateOf(fl), fl.coef[k])
		if fl.group == r && slices.Index(fl.res[:fl.n], r) == int(k) {
			f.gmemAdd(id, r) // once, at its first slot on r
		}
	}
}

// bucketOff makes resource r keep no buckets.
func (f *fluid) bucketOff(r int32) {
	f.bucketed[r] = false
	f.bkt[r], f.gmem[r] = buckets{b: f.bkt[r].b[:0]}, f.gmem[r][:0]
	for i, id := range f.users[r] {
		f.flows[id].bkt &^= 1 << f.userPos[r][i]
	}
}

// remove ends a flow.
func (f *fluid) remove(id int32) {
	fl := &f.flows[id]
	f.nactive--
	if fl.group >= 0 && fl.bkt != 0 {
		rate := f.rateOf(fl)
		for k := range int(fl.n) {
			if fl.bkt&(1<<k) != 0 {
				f.bucketRemove(fl.res[k], rate, fl.coef[k])
			}
		}
		f.gmemRemove(id, fl.group)
	}
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
		if fl.bkt&(1<<k) != 0 && len(f.users[r]) <= f.bktOff {
			f.bucketOff(r)
		}
		// A resource that does not saturate keeps not saturating when
		// a flow leaves it, and bottlenecks no flow: only a change of
		// its other flows' rates can move it, and those are checked.
		if f.level[r] != noLevel {
			f.dirty = append(f.dirty, r)
		}
	}
	fl.group = -2 // gone: a stale entry of fresh skips it
	f.free = append(f.free, id)
}

// bucket is the index of resource r's bucket at rate, or -1.
func (f *fluid) bucket(r int32, rate int64) int {
	if i := f.scan(r, rate); i != indexed {
		return i
	}
	return f.bkt[r].find(rate)
}

// indexed is what scan returns for a resource whose buckets are indexed.
const indexed = -2

// scan is bucket where r's buckets are not indexed (else indexed): short
// enough to inline where lookups are many, and the buckets few.
func (f *fluid) scan(r int32, rate int64) int {
	bs := &f.bkt[r]
	if bs.ix != nil {
		return indexed
	}
	for i := range bs.b {
		if bs.b[i].rate == rate {
			return i
		}
	}
	return -1
}

// find is the index of the bucket at rate, or -1, by the index.
func (bs *buckets) find(rate int64) int {
	t := bs.ix
	m := len(t) - 1
	for i := bixHome(rate, m); ; i = (i + 1) & m {
		v := t[i]
		if v == 0 {
			return -1
		}
		if bs.b[v-1].rate == rate {
			return int(v - 1)
		}
	}
}

// bucketAdd puts a flow's path slot on resource r, of coefficient coef
// there, in r's bucket at rate.
func (f *fluid) bucketAdd(r int32, rate, coef int64) {
	i := f.bucket(r, rate)
	if i < 0 {
		i = f.newBucket(r, rate)
	}
	bs := f.bkt[r].b
	bs[i].w += coef
	bs[i].c++
}

// bucketRemove takes a flow's path slot on resource r, of coefficient
// coef there, out of r's bucket at rate.
func (f *fluid) bucketRemove(r int32, rate, coef int64) {
	i := f.bucket(r, rate)
	bs := f.bkt[r].b
	bs[i].w -= coef
	if bs[i].c--; bs[i].c == 0 {
		f.dropBucket(r, i)
	}
}

// bucketShift makes the move s on resource r's buckets.
func (f *fluid) bucketShift(r int32, s shift) {
	old, new, w, c := s.old, s.new, s.w, s.c
	i, j := f.scan(r, old), f.scan(r, new)
	if i == indexed {
		i, j = f.bkt[r].find(old), f.bkt[r].find(new)
	}
	if f.bkt[r].b[i].c == c && j < 0 { // all of it: relabel
		f.bkt[r].relabel(i, new)
		return
	}
	if j < 0 {
		j = f.newBucket(r, new)
	}
	bs := f.bkt[r].b
	bs[j].w += w
	bs[j].c += c
	bs[i].w -= w
	if bs[i].c -= c; bs[i].c == 0 {
		f.dropBucket(r, i)
	}
}

// newBucket appends an empty bucket at rate to resource r's and returns
// its index.
func (f *fluid) newBucket(r int32, rate int64) int {
	f.bkt[r].b = append(f.bkt[r].b, rbucket{rate: rate})
	n := len(f.bkt[r].b)
	switch t := f.bkt[r].ix; {
	case t == nil && n > f.bixOn, t != nil && 2*n > len(t):
		f.bkt[r].index()
	case t != nil:
		bixPut(t, rate, n-1)
	}
	return n - 1
}

// dropBucket takes resource r's bucket i out (emptied): the last bucket
// takes its place.
func (f *fluid) dropBucket(r int32, i int) {
	bs := f.bkt[r].b
	n := len(bs) - 1
	if f.bkt[r].ix == nil {
		bs[i] = bs[n]
		f.bkt[r].b = bs[:n]
		return
	}
	f.bkt[r].unindex(bs[i].rate)
	if i != n {
		f.bkt[r].ix[f.bkt[r].slot(bs[n].rate)] = int32(i + 1) // before bs[i] holds the same rate
		bs[i] = bs[n]
	}
	f.bkt[r].b = bs[:n]
	if n < f.bixOff {
		f.bkt[r].ix = nil
	}
}

// bixHome is where a rate's search starts in an index of length m+1.
func bixHome(rate int64, m int) int {
	return int(uint64(rate)*0x9e3779b97f4a7c15>>32) & m
}

// index indexes the buckets afresh, in a table four times their number
// (at least 8).
func (bs *buckets) index() {
	size := 8
	for size < 4*len(bs.b) {
		size *= 2
	}
	bs.ix = make([]int32, size)
	for i := range bs.b {
		bixPut(bs.ix, bs.b[i].rate, i)
	}
}

// relabel moves bucket i to rate new (none there), in the index too.
func (bs *buckets) relabel(i int, new int64) {
	if bs.ix == nil {
		bs.b[i].rate = new
		return
	}
	bs.unindex(bs.b[i].rate)
	bs.b[i].rate = new
	bixPut(bs.ix, new, i)
}

// bixPut enters bucket i at rate in index t.
func bixPut(t []int32, rate int64, i int) {
	m := len(t) - 1
	for s := bixHome(rate, m); ; s = (s + 1) & m {
		if t[s] == 0 {
			t[s] = int32(i + 1)
			return
		}
	}
}

// slot is the slot of the index that holds the bucket at rate (which it
// must hold).
func (bs *buckets) slot(rate int64) int {
	t, b := bs.ix, bs.b
	m := len(t) - 1
	s := bixHome(rate, m)
	for t[s] == 0 || b[t[s]-1].rate != rate {
		s = (s + 1) & m
	}
	return s
}

// unindex takes the bucket at rate out of the index, moving back the
// entries after it that its slot let pass (no tombstones).
func (bs *buckets) unindex(rate int64) {
	t := bs.ix
	m := len(t) - 1
	i := bs.slot(rate)
	for j := (i + 1) & m; t[j] != 0; j = (j + 1) & m {
		// The entry at j may fill the hole at i when i lies on its
		// path from its home.
		if h := bixHome(bs.b[t[j]-1].rate, m); (j-h)&m >= (j-i)&m {
			t[i] = t[j]
			i = j
		}
	}
	t[i] = 0
}

// gmemAdd and gmemRemove keep the members of a resource group that keeps
// buckets (a refill reads them only there).
func (f *fluid) gmemAdd(id, g int32) {
	if int(g) < f.nres && f.bucketed[g] {
		f.gpos[id] = int32(len(f.gmem[g]))
		f.gmem[g] = append(f.gmem[g], id)
	}
}

func (f *fluid) gmemRemove(id, g int32) {
	if int(g) < f.nres && f.bucketed[g] {
		ms := f.gmem[g]
		p, last := f.gpos[id], int32(len(ms)-1)
		if p != last {
			ms[p] = ms[last]
			f.gpos[ms[p]] = p
		}
		f.gmem[g] = ms[:last]
	}
}

// stamp starts a new marking epoch.
func (f *fluid) stamp() uint32 {
	f.epoch++
	if f.epoch == 0 { // wrapped: reset stamps
		clear(f.resMark)
		for i := range f.flows {
			f.flows[i].mark = 0
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
	f.A, f.nS, f.aBkt = f.A[:0], 0, false
	for _, r := range f.dirty {
		f.addRes(r, e)
	}
	f.dirty = f.dirty[:0]
	if f.aBkt {
		f.widen(0, e)
	}
	// Flows carry marks of epoch e once a fill has run; inX: the
	// resources of A whose users are all in X (fillUsers' S, which grows
	// from round to round; once A keeps buckets it keeps them, so
	// fillUsers runs only in the rounds before any other fill).
	used, inX := false, 0
	f.X = f.X[:0]
	fresh := func() { // a new epoch for the next fill
		if used {
			e = f.stamp()
			for _, r := range f.A {
				f.resMark[r] = e
			}
			used = false
		}
	}
	for {
		if float64(f.nS) > 2*f.fullFrac*float64(f.nactive) {
			fresh()
			f.fillComponent(e)
			break
		}
		f.rounds++
		if f.aBkt {
			fresh()
			f.fillAgg(e)
		} else {
			inX = f.fillUsers(e, inX)
		}
		used = true
		from := len(f.A)
		if f.verifyHeld(e) {
			f.local++
			break
		}
		if f.aBkt {
			f.widen(from, e)
		}
	}
	f.commit()
	f.fresh = f.fresh[:0]
}

// addRes puts a resource in A.
func (f *fluid) addRes(r int32, e uint32) {
	if f.resMark[r] == e {
		return
	}
	f.resMark[r] = e
	f.A = append(f.A, r)
	f.nS += len(f.users[r])
	f.aBkt = f.aBkt || f.bucketed[r]
}

// widen adds to A, ahead of the refill, the held resources whose checks
// would most likely fail, and theirs in turn: a saturated resource that a
// flow of a group in A[from:] crosses below its level (that flow's rate
// follows its group's level, and the resource's level follows it). A
// refill of more resources is as exact; this saves the refills that
// would find them failing one ring at a time (on dsv3-256 hierarchical,
// a refill over resources with buckets took 2.15 rounds, each with about
// as many resources failing as it refilled).
func (f *fluid) widen(from int, e uint32) {
	for i := from; i < len(f.A); i++ {
		r := f.A[i]
		us := f.users[r]
		if f.bucketed[r] {
			us = f.gmem[r]
		}
		for _, id := range us {
			fl := &f.flows[id]
			if fl.group != r {
				continue
			}
			rate := f.rateOf(fl)
			for k := range int(fl.n) {
				if r2 := fl.res[k]; f.resMark[r2] != e && f.level[r2] != noLevel && rate < f.level[r2] {
					f.addRes(r2, e)
				}
			}
		}
	}
}

// fillUsers fills A with every flow on it one by one, as fill does: where
// no resource of A keeps buckets, fillAgg would take them all one by one
// too, at more cost. The users of A[:from] are in X already; it returns
// len(A).
func (f *fluid) fillUsers(e uint32, from int) int {
	S := f.X
	for _, r := range f.A[from:] {
		for _, id := range f.users[r] {
			if f.flows[id].mark != e {
				f.flows[id].mark = e
				S = append(S, id)
			}
		}
	}
	f.X = S
	f.fill(e)
	return len(f.A)
}

// fillComponent makes A the connected component of A (through shared
// flows) and fills it, every flow of it one by one.
func (f *fluid) fillComponent(e uint32) {
	S := f.X[:0]
	for i := 0; i < len(f.A); i++ {
		for _, id := range f.users[f.A[i]] {
			if f.flows[id].mark == e {
				continue
			}
			f.flows[id].mark = e
			S = append(S, id)
			fl := &f.flows[id]
			for k := range int(fl.n) {
				f.addRes(fl.res[k], e)
			}
		}
	}
	f.X = S
	f.fill(e)
}

// startRefill sets the refill's state of every resource of A: nothing
// frozen, every flow on it unfrozen, its candidate level.
func (f *fluid) startRefill() {
	for _, r := range f.A {
		f.load[r] = u128{}
		f.wt[r] = f.wsum[r]
		f.count[r] = int32(len(f.users[r]))
		f.nlevel[r] = noLevel
		f.cand[r] = f.candidate(r)
		f.stale[r] = false
	}
}

// fill runs progressive filling over the flows X on the resources A (X:
// every flow on A), each flow bounded by its cap and the levels of its
// resources outside A. It sets nlevel for A's resources and the new rates
// of X's flows.
func (f *fluid) fill(e uint32) {
	f.startRefill()
	bh := f.bounds[:0]
	for _, id := range f.X {
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
		f.flows[id].frozen, f.flows[id].nrate = false, 0
		if b != noLevel {
			bh = append(bh, bounded{b, id})
		}
	}
	// Sorted by bound, consumed from the front: the flows frozen at one
	// level by their bounds are a run (many flows share a held level), each
	// O(1) where a heap paid a sift-down.
	sortBounds(bh)
	bi := 0
	unfrozen := len(f.X)
	act := append(f.check[:0], f.A...) // resources with unfrozen flows
	for unfrozen > 0 {
		var level int64
		act, level = f.activeLevel(act)
		// The least bound of a flow still unfrozen.
		for bi < len(bh) && f.flows[bh[bi].id].frozen {
			bi++
		}
		if bi < len(bh) {
			level = min(level, bh[bi].bound)
		}
		if level == noLevel {
			// Every unfrozen flow's resources have room beyond any
			// level the units hold; the engine's ranges rule it out.
			f.freezeUnbounded(f.X)
			break
		}
		// Freeze at this level: first every saturated resource's flows,
		// then the flows bounded here; freezing marks the candidates of
		// the resources it crosses stale.
		// (The resources saturating here are those whose candidate at
		// the step's start is the level: nlevel marks them first.)
		f.markSaturating(act, level)
		for _, r := range act {
			if f.nlevel[r] != level || f.cand[r] != level {
				continue
			}
			for _, id := range f.users[r] {
				if !f.flows[id].frozen {
					f.freeze(id, level, e)
					unfrozen--
				}
			}
		}
		for ; bi < len(bh) && bh[bi].bound == level; bi++ {
			if id := bh[bi].id; !f.flows[id].frozen {
				f.freeze(id, level, e)
				unfrozen--
			}
		}
	}
	f.bounds = bh[:0]
	f.check = act[:0]
}

// activeLevel keeps of act the resources with unfrozen flows, their
// stale candidates recomputed, and returns them and the least candidate
// (noLevel if none): the next level of a fill.
func (f *fluid) activeLevel(act []int32) ([]int32, int64) {
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
	return keep, level
}

// markSaturating marks (nlevel) the resources of act whose candidate is
// level, before freezing at it changes any candidate: those saturate at
// this level.
func (f *fluid) markSaturating(act []int32, level int64) {
	for _, r := range act {
		if f.cand[r] == level {
			f.nlevel[r] = level
		}
	}
}

// fillAgg is fill for a local refill, reading aggregates where fill reads
// every flow on A. The flows it handles one by one (explicit) are those
// whose group is in A and the new ones; every other flow on A is bounded
// by its group's level, which is its rate, so each resource's other flows
// enter as its buckets (less the explicit flows in them), one bound each:
// frozen at that rate, their coefficients summed, exactly the load and
// weight fill's flows give one at a time. A bucket's flows are expanded
// one by one only when a resource of theirs saturates at or below their
// rate (their rate or group changes there). It leaves in X every flow it
// touched, each marked with its new rate; the others keep theirs.
func (f *fluid) fillAgg(e uint32) {
	f.startRefill()
	for _, r := range f.A {
		f.xl[r] = f.xl[r][:0]
	}
	X := f.X[:0]
	for _, r := range f.A {
		// A resource without buckets: all its users; with them, the
		// flows it bottlenecks.
		us := f.users[r]
		if f.bucketed[r] {
			us = f.gmem[r]
		}
		for _, id := range us {
			if f.flows[id].mark != e {
				f.flows[id].mark = e
				X = append(X, id)
			}
		}
	}
	for _, id := range f.fresh {
		if f.flows[id].group == -1 && f.flows[id].mark != e {
			f.flows[id].mark = e
			X = append(X, id)
		}
	}
	ents := f.ents[:0]
	for _, r := range f.A {
		f.entLo[r] = int32(len(ents))
		for bi := range f.bkt[r].b {
			b := &f.bkt[r].b[bi]
			if b.rate >= noLevel-1 {
				// Unbounded flows (outside the engine's ranges):
				// explicit.
				for _, id := range f.users[r] {
					if fl := &f.flows[id]; fl.group >= 0 && f.rateOf(fl) == b.rate && fl.mark != e {
						fl.mark = e
						X = append(X, id)
					}
				}
				ents = append(ents, aggEntry{r: r, rate: b.rate}) // none left
				continue
			}
			ents = append(ents, aggEntry{r: r, c: b.c, rate: b.rate, w: b.w})
		}
		f.entHi[r] = int32(len(ents))
	}
	bh := f.bounds[:0]
	// Flows of one group come in a run (X is A's group members first),
	// and share their rate and, slot by slot, mostly their resources:
	// per path slot, the entry the last flow's slot was taken from.
	var memo [maxPath]struct {
		r    int32
		rate int64
		j    int32
	}
	for k := range memo {
		memo[k].r = -1
	}
	for _, id := range X {
		fl := &f.flows[id]
		b := int64(noLevel)
		if fl.capG >= 0 {
			b = f.level[fl.capG]
		}
		var rate int64
		if fl.group >= 0 {
			rate = f.rateOf(fl)
		}
		inBucket := fl.group >= 0 && rate < noLevel-1
		for k := range int(fl.n) {
			r := fl.res[k]
			if f.resMark[r] != e {
				b = min(b, f.level[r])
				continue
			}
			if !f.bucketed[r] {
				continue
			}
			f.xl[r] = append(f.xl[r], id)
			if inBucket {
				m := &memo[k]
				if m.r != r || m.rate != rate {
					m.r, m.rate, m.j = r, rate, f.entryOf(ents, r, rate)
				}
				if m.j >= 0 {
					ents[m.j].w -= fl.coef[k]
					ents[m.j].c--
				}
			}
		}
		f.flows[id].frozen, f.flows[id].nrate = false, 0
		if b != noLevel {
			bh = append(bh, bounded{b, id})
		}
	}
	for j := range ents {
		if ents[j].c > 0 {
			bh = append(bh, bounded{ents[j].rate, ^int32(j)})
		}
	}
	sortBounds(bh)
	bi := 0
	act := append(f.check[:0], f.A...) // resources with unfrozen flows
	for {
		var level int64
		act, level = f.activeLevel(act)
		if len(act) == 0 {
			break
		}
		// The least bound still unfrozen.
		for bi < len(bh) {
			if id := bh[bi].id; id >= 0 && !f.flows[id].frozen || id < 0 && ents[^id].c > 0 {
				break
			}
			bi++
		}
		if bi < len(bh) {
			level = min(level, bh[bi].bound)
		}
		if level == noLevel {
			// Only explicit flows are unbounded (fill's case).
			f.freezeUnbounded(X)
			break
		}
		f.markSaturating(act, level)
		for _, r := range act {
			if f.nlevel[r] != level || f.cand[r] != level {
				continue
			}
			us := f.users[r] // all in X
			if f.bucketed[r] {
				us = f.xl[r]
			}
			for _, id := range us {
				if !f.flows[id].frozen {
					f.freeze(id, level, e)
				}
			}
			for j := f.entLo[r]; j < f.entHi[r]; j++ {
				if ents[j].c > 0 {
					X = f.expand(ents, j, level, e, X)
				}
			}
		}
		for ; bi < len(bh) && bh[bi].bound == level; bi++ {
			if id := bh[bi].id; id >= 0 {
				if !f.flows[id].frozen {
					f.freeze(id, level, e)
				}
			} else if x := &ents[^id]; x.c > 0 {
				r := x.r
				f.load[r] = f.load[r].add(mul128(uint64(x.w), uint64(level)))
				f.wt[r] -= x.w
				f.count[r] -= x.c
				f.stale[r] = true
				x.c, x.w = 0, 0
			}
		}
	}
	f.X = X
	f.ents = ents[:0]
	f.bounds = bh[:0]
	f.check = act[:0]
}

// entryOf is the index in ents of resource r's entry at rate, or -1.
func (f *fluid) entryOf(ents []aggEntry, r int32, rate int64) int32 {
	if f.bkt[r].ix == nil {
		for i := f.entLo[r]; i < f.entHi[r]; i++ {
			if ents[i].rate == rate {
				return i
			}
		}
		return -1
	}
	if b := f.bkt[r].find(rate); b >= 0 {
		return f.entLo[r] + int32(b)
	}
	return -1
}

// take takes a flow's slot on resource r of A, of coefficient coef, out
// of r's entry at rate.
func (f *fluid) take(ents []aggEntry, r int32, rate, coef int64) {
	if j := f.entryOf(ents, r, rate); j >= 0 {
		ents[j].w -= coef
		ents[j].c--
	}
}

// expand freezes at level, one by one, the flows left unfrozen in entry j
// (its resource saturates there), takes them out of their other resources'
// entries, and adds them to X.
func (f *fluid) expand(ents []aggEntry, j int32, level int64, e uint32, X []int32) []int32 {
	x := &ents[j]
	for _, id := range f.users[x.r] {
		if fl := &f.flows[id]; fl.mark == e || fl.group < 0 || f.rateOf(fl) != x.rate {
			continue // explicit, expanded already, or in another bucket
		}
		f.flows[id].mark = e
		X = append(X, id)
		f.freeze(id, level, e)
		fl := &f.flows[id]
		for k := range int(fl.n) {
			if r := fl.res[k]; r != x.r && f.resMark[r] == e {
				f.take(ents, r, x.rate, fl.coef[k])
			}
		}
	}
	x.c, x.w = 0, 0
	return X
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
	f.flows[id].frozen, f.flows[id].nrate = true, level
	for k := range int(fl.n) {
		if r := fl.res[k]; f.resMark[r] == e {
			f.load[r] = f.load[r].add(mul128(uint64(fl.coef[k]), uint64(level)))
			f.wt[r] -= fl.coef[k]
			f.count[r]--
			f.stale[r] = true
		}
	}
}

// verifyHeld checks the held resources that flows of X whose rate changed
// cross, and puts those that fail in A; it reports whether all passed.
func (f *fluid) verifyHeld(e uint32) bool {
	f.check = f.check[:0]
	f.chk++
	if f.chk == 0 { // wrapped: reset stamps
		clear(f.chkMark)
		f.chk = 1
	}
	c := f.chk
	for _, id := range f.X {
		fl := &f.flows[id]
		if fl.group >= 0 && f.flows[id].nrate == f.rateOf(fl) {
			continue
		}
		for k := range int(fl.n) {
			r := fl.res[k]
			if f.resMark[r] == e {
				continue
			}
			if f.chkMark[r] != c {
				f.chkMark[r] = c
				f.check = append(f.check, r)
				if f.bucketed[r] {
					f.dl[r] = f.dl[r][:0]
				}
			}
			if fl.bkt&(1<<k) != 0 {
				old := int64(-1) // in no bucket yet
				if fl.group >= 0 {
					old = f.rateOf(fl)
				}
				f.dl[r] = append(f.dl[r], rateDelta{old, f.flows[id].nrate, fl.coef[k]})
			}
		}
	}
	ok := true
	for _, r := range f.check {
		if f.bucketed[r] && !f.holdsAgg(r) || !f.bucketed[r] && !f.holds(r, e) {
			ok = false
			f.addRes(r, e)
		}
	}
	return ok
}

// rateDelta is a flow whose rate a refill changed, on a held resource:
// its coefficient there, its old rate (-1: new) and its new one.
type rateDelta struct{ old, new, coef int64 }

// holdsAgg is holds read from the resource's buckets and the rates the
// refill changed on it (dl[r]) instead of from every flow on it.
func (f *fluid) holdsAgg(r int32) bool {
	xs := f.sorted[:0]
	for i := range f.bkt[r].b {
		xs = append(xs, rateCoef{f.bkt[r].b[i].rate, f.bkt[r].b[i].w})
	}
	for _, d := range f.dl[r] {
		if d.old >= 0 {
			i := f.scan(r, d.old)
			if i == indexed {
				i = f.bkt[r].find(d.old)
			}
			if i >= 0 { // xs[:len(f.bkt[r].b)] is f.bkt[r].b
				xs[i].coef -= d.coef
			}
		}
		xs = append(xs, rateCoef{d.new, d.coef})
	}
	f.sorted = xs
	return f.holdsRates(r, xs)
}

// holdsRates is holds for a resource whose flows' rates and coefficients
// are xs (a rate may repeat; a zero coefficient is no flow): holdsFast's
// test, then, where it cannot decide, holdsSorted's sweep. It reorders xs.
func (f *fluid) holdsRates(r int32, xs []rateCoef) bool {
	lvl := f.level[r]
	var below, at u128
	var wBelow, wAt uint64
	var top int64
	for _, x := range xs {
		c := uint64(x.coef)
		switch {
		case c == 0:
		case x.rate < lvl:
			below = below.add(mul128(c, uint64(x.rate)))
			wBelow += c
			top = max(top, x.rate)
		case x.rate == lvl:
			at = at.add(mul128(c, uint64(x.rate)))
			wAt += c
		default:
			return false
		}
	}
	if ok, sure := settleHolds(f.capacity[r], lvl, below, at, wBelow, wAt, top); sure {
		return ok
	}
	n := 0
	for _, x := range xs {
		if x.coef != 0 {
			xs[n] = x
			n++
		}
	}
	return sweepHolds(xs[:n], f.capacity[r], f.wsum[r], lvl)
}

// freezeUnbounded freezes the flows of ids not yet frozen at the highest
// rate (no resource bounds them).
func (f *fluid) freezeUnbounded(ids []int32) {
	for _, id := range ids {
		if !f.flows[id].frozen {
			f.flows[id].frozen, f.flows[id].nrate = true, noLevel-1
		}
	}
}

// sortRates sorts by rate.
func sortRates(xs []rateCoef) {
	slices.SortFunc(xs, func(a, b rateCoef) int { return cmp.Compare(a.rate, b.rate) })
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
		x := f.rateNow(&f.flows[id], e)
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
	return settleHolds(f.capacity[r], lvl, below, at, wBelow, wAt, top)
}

// settleHolds is holdsFast's test on a resource of capacity capa at level
// lvl whose flows below lvl load it with below (coefficients wBelow, the
// fastest at top) and at lvl with at (coefficients wAt).
func settleHolds(capa u128, lvl int64, below, at u128, wBelow, wAt uint64, top int64) (ok, sure bool) {
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
		x := f.rateNow(&f.flows[id], e)
		xs = append(xs, rateCoef{x, f.ucoef[r][i]})
	}
	f.sorted = xs
	return sweepHolds(xs, f.capacity[r], f.wsum[r], f.level[r])
}

// sweepHolds is holds by sweeping rates in order: xs, the flows' rates and
// coefficients (summing to w, none zero), on a resource of capacity capa
// at level lvl; it sorts xs. At every distinct rate mu below lvl the
// candidate with the flows below mu frozen must be above mu; at lvl, equal.
func sweepHolds(xs []rateCoef, capa u128, w, lvl int64) bool {
	sortRates(xs)
	var load u128
	for i := 0; i < len(xs); {
		mu := xs[i].rate
		// The candidate while the flows slower than mu are frozen.
		var k int64
		if load.less(capa) {
			k = capa.sub(load).floorDiv(uint64(w))
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
//
// Slots move between buckets in runs: a resource of A whose level moves
// moves its group with it, and flows of identical replicas move from
// one shared rate to another on the resources they share. Each resource
// holds back its last move and adds to it the slots that make the same
// one, and makes it at once when another comes or at the end (on
// dsv3-256 the slots on a resource of A moving from its level to its
// new one alone are 7.8M of hierarchical's 16.7M slot moves, 81M of
// flat's 188M).
func (f *fluid) commit() {
	// The slot moves first, while level holds the old levels (a flow's
	// old rate is its group's level).
	for _, id := range f.X {
		fl := &f.flows[id]
		if fl.bkt == 0 {
			continue
		}
		nr := fl.nrate
		if fl.group < 0 {
			for k := range int32(fl.n) {
				if fl.bkt&(1<<k) != 0 {
					f.bucketAdd(fl.res[k], nr, fl.coef[k])
				}
			}
			continue
		}
		old := f.rateOf(fl)
		if nr == old {
			continue
		}
		for k := range int32(fl.n) {
			r := fl.res[k]
			if fl.bkt&(1<<k) == 0 {
				continue
			}
			p := &f.pend[r]
			if p.c > 0 && p.old == old && p.new == nr {
				p.w += fl.coef[k]
				p.c++
				continue
			}
			if p.c > 0 {
				f.bucketShift(r, *p)
			} else {
				f.pendR = append(f.pendR, r)
			}
			*p = shift{old, nr, fl.coef[k], 1}
		}
	}
	for _, r := range f.pendR {
		f.bucketShift(r, f.pend[r])
		f.pend[r].c = 0
	}
	f.pendR = f.pendR[:0]
	for _, r := range f.A {
		if nl := f.nlevel[r]; nl != f.level[r] {
			f.levelCh = append(f.levelCh, levelChange{r, f.level[r], nl})
			f.level[r] = nl
		}
	}
	for _, id := range f.X {
		fl := &f.flows[id]
		if g := f.groupOf(fl); g != fl.group {
			f.moves = append(f.moves, move{id, fl.group, g})
			if fl.group >= 0 {
				f.gmemRemove(id, fl.group)
			}
			f.gmemAdd(id, g)
			fl.group = g
		}
	}
}

// rateOf is a flow's rate (rate units): its group's level, or the
// highest rate where no resource bounds it (fill's freezeUnbounded). Its
// group must be set.
func (f *fluid) rateOf(fl *flowState) int64 {
	if l := f.level[fl.group]; l != noLevel {
		return l
	}
	return noLevel - 1
}

// rateNow is a flow's rate in the solve of epoch e: its new rate where
// the solve's fill took it, else its rate.
func (f *fluid) rateNow(fl *flowState, e uint32) int64 {
	if fl.mark == e {
		return fl.nrate
	}
	return f.rateOf(fl)
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
