package sim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// randomCapacities are n capacities of 1-40 GB/s-ish in load units, with
// repeats, so that levels tie.
func randomCapacities(rng *rand.Rand, n int) []u128 {
	c := make([]u128, n)
	for r := range c {
		c[r] = fixedFloor(float64(1+rng.IntN(20))*0.01*float64(1+rng.IntN(2)), rateBits+coefBits)
	}
	return c
}

// checkMaxMin checks a solution against the definition: every resource
// carries at most its capacity, and every flow runs at its cap or has a
// saturated resource on which no flow is faster (saturated in the
// fixed-point sense: the room left is less than one rate unit for each
// flow at that rate).
func checkMaxMin(f *fluid) error {
	load := make([]u128, f.nres)
	maxRate := make([]int64, f.nres)
	for r := range f.nres {
		for i, id := range f.users[r] {
			fl := &f.flows[id]
			load[r] = load[r].add(mul128(uint64(fl.coef[f.userPos[r][i]]), uint64(f.rateOf(fl))))
			maxRate[r] = max(maxRate[r], f.rateOf(fl))
		}
		if f.capacity[r].less(load[r]) {
			return fmt.Errorf("resource %d carries more than its capacity", r)
		}
	}
	for r := range f.nres {
		for _, id := range f.users[r] {
			fl := &f.flows[id]
			if f.rateOf(fl) != f.level[fl.group] {
				return fmt.Errorf("flow %d runs at %d, its group %d at %d", id, f.rateOf(fl), fl.group, f.level[fl.group])
			}
			if fl.capG >= 0 && f.rateOf(fl) == f.level[fl.capG] {
				continue
			}
			ok := false
			for k := range int(fl.n) {
				s := fl.res[k]
				if maxRate[s] != f.rateOf(fl) {
					continue
				}
				var w int64
				for i, o := range f.users[s] {
					if f.rateOf(&f.flows[o]) == f.rateOf(fl) {
						w += f.flows[o].coef[f.userPos[s][i]]
					}
				}
				if left := f.capacity[s].sub(load[s]); left.less(u128{0, uint64(w)}) {
					ok = true
				}
			}
			if !ok {
				return fmt.Errorf("flow %d at %d has no bottleneck", id, f.rateOf(fl))
			}
		}
	}
	return nil
}

// Flows come and go at random; after every solve the solver's levels,
// rates and groups equal the full fill's, the changes it reports are
// exactly the differences from the last solve, and the solution is
// max-min fair by the definition.
func TestFluidMatchesFullFill(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	cases := 400
	if testing.Short() {
		cases = 100
	}
	for i := range cases {
		nr := 1 + rng.IntN(12)
		capacity := randomCapacities(rng, nr)
		frac := []float64{defaultFullFrac, 0, 2}[i%3]
		cur := newFluid(capacity)
		cur.fullFrac = frac
		orc := newFullFill(capacity).(*fullFill)
		type pair struct{ cur, orc int32 }
		var live []pair
		level := make([]int64, nr)
		for r := range level {
			level[r] = noLevel
		}
		group := map[int32]int32{}
		for step := range 80 {
			// a burst of changes, then a solve
			for range 1 + rng.IntN(3) {
				if len(live) > 0 && rng.IntN(3) == 0 {
					k := rng.IntN(len(live))
					cur.remove(live[k].cur)
					orc.remove(live[k].orc)
					delete(group, live[k].cur)
					live = append(live[:k], live[k+1:]...)
					continue
				}
				n := 1 + rng.IntN(min(maxPath, nr))
				var res []int32
				var coef []int64
				for _, r := range rng.Perm(nr)[:n] {
					res = append(res, int32(r))
					c := coefOf(float64(1 + rng.IntN(2)))
					if i%2 == 0 && rng.IntN(2) == 0 {
						c = coefOf(0.5 + rng.Float64())
					}
					coef = append(coef, c)
				}
				var limit int64
				if rng.IntN(6) == 0 {
					limit = rateOf([]float64{0.002, 0.005, 0.01}[rng.IntN(3)])
				}
				p := pair{cur.add(res, coef, limit), orc.add(res, coef, limit)}
				live = append(live, p)
				group[p.cur] = -1
			}
			cur.solve()
			orc.solve()
			where := fmt.Sprintf("case %d (full fraction %g) step %d", i, frac, step)
			for r := range nr {
				if cur.level[r] != orc.level[r] {
					t.Fatalf("%s: resource %d at %d, full fill %d", where, r, cur.level[r], orc.level[r])
				}
			}
			for _, p := range live {
				if c, o := cur.flows[p.cur], orc.flows[p.orc]; cur.rateOf(&c) != o.rate || c.group != o.group {
					t.Fatalf("%s: flow %d at %d in group %d, full fill %d in %d", where, p.cur, cur.rateOf(&c), c.group, o.rate, o.group)
				}
			}
			// The changes reported are the differences.
			levels, moves := cur.changes()
			for _, c := range levels {
				if int(c.group) < nr {
					if level[c.group] != c.old || cur.level[c.group] != c.new || c.old == c.new {
						t.Fatalf("%s: change %+v, level was %d, is %d", where, c, level[c.group], cur.level[c.group])
					}
					level[c.group] = c.new
				}
			}
			for r := range nr {
				if level[r] != cur.level[r] {
					t.Fatalf("%s: resource %d's level moved to %d unreported", where, r, cur.level[r])
				}
			}
			for _, m := range moves {
				if group[m.id] != m.old || m.old == m.new {
					t.Fatalf("%s: move %+v, group was %d", where, m, group[m.id])
				}
				group[m.id] = m.new
			}
			for _, p := range live {
				if group[p.cur] != cur.flows[p.cur].group {
					t.Fatalf("%s: flow %d moved to %d unreported", where, p.cur, cur.flows[p.cur].group)
				}
			}
			if err := checkMaxMin(cur); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			// Every resource holds its level; the check without sorting
			// agrees with the sorted one wherever it decides, also for
			// levels moved off the solution's.
			e := cur.stamp()
			for r := range int32(nr) {
				saved := cur.level[r]
				for _, l := range []int64{saved, saved - 1, saved + 1, saved / 2, noLevel} {
					if l < 0 {
						continue
					}
					cur.level[r] = l
					slow := cur.holdsSorted(r, e)
					if l == saved && !slow {
						t.Fatalf("%s: resource %d does not hold its own level %d", where, r, l)
					}
					if ok, sure := cur.holdsFast(r, e); sure && ok != slow {
						t.Fatalf("%s: resource %d at level %d: fast check %v, sorted %v", where, r, l, ok, slow)
					}
				}
				cur.level[r] = saved
			}
		}
	}
}

// Hand cases: the rates progressive filling gives, in rate units.
func TestMaxMinHandCases(t *testing.T) {
	c := func(gbps float64) u128 { return fixedFloor(gbps*1e-3, rateBits+coefBits) }
	one, two := coefOf(1), coefOf(2)
	for _, tc := range []struct {
		name     string
		capacity []u128
		flows    [][]int32
		coef     [][]int64
		want     []float64 // GB/s
	}{
		{"one flow", []u128{c(10)}, [][]int32{{0}}, [][]int64{{one}}, []float64{10}},
		{"two share", []u128{c(10)}, [][]int32{{0}, {0}}, [][]int64{{one}, {one}}, []float64{5, 5}},
		{"a copy reads and writes", []u128{c(10)}, [][]int32{{0}, {0}}, [][]int64{{two}, {one}}, []float64{10.0 / 3, 10.0 / 3}},
		// The classic: a long flow over both links, a short one on each;
		// link 1 is tighter, so its two flows get 2 each and the short
		// flow on link 0 takes the rest.
		{"parking lot", []u128{c(10), c(4)}, [][]int32{{0, 1}, {0}, {1}}, [][]int64{{one, one}, {one}, {one}}, []float64{2, 8, 2}},
	} {
		f := newFluid(tc.capacity)
		var ids []int32
		for i, p := range tc.flows {
			ids = append(ids, f.add(p, tc.coef[i], 0))
		}
		f.solve()
		for i, id := range ids {
			got := float64(f.rateOf(&f.flows[id])) / (1 << rateBits) * 1e3
			if d := got - tc.want[i]; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: flow %d at %.12g GB/s, want %g", tc.name, i, got, tc.want[i])
			}
		}
		if err := checkMaxMin(f); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// A rate cap holds a flow below its share and leaves the rest to others.
func TestMaxMinRateCap(t *testing.T) {
	f := newFluid([]u128{fixedFloor(0.01, rateBits+coefBits)})
	a := f.add([]int32{0}, []int64{coefOf(1)}, rateOf(0.002))
	b := f.add([]int32{0}, []int64{coefOf(1)}, 0)
	f.solve()
	if ra, rb := f.rateOf(&f.flows[a]), f.rateOf(&f.flows[b]); ra != rateOf(0.002) || rb != rateOf(0.008)+0 && rb != rateOf(0.008)+1 && rb != rateOf(0.008)-1 {
		t.Errorf("capped flow at %d, the other at %d; want %d and about %d", ra, rb, rateOf(0.002), rateOf(0.008))
	}
	if f.flows[a].group != f.capGroup[rateOf(0.002)] || f.flows[b].group != 0 {
		t.Errorf("groups %d and %d", f.flows[a].group, f.flows[b].group)
	}
}

// sortBounds sorts by bound and keeps every flow, on random inputs with few
// and with many distinct bounds.
func TestSortBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	for range 500 {
		n, distinct := rng.IntN(400), 1+rng.IntN(50)
		if rng.IntN(4) == 0 {
			distinct = 1 << 30
		}
		a := make([]bounded, n)
		for i := range a {
			a[i] = bounded{bound: rng.Int64N(int64(distinct)), id: int32(i)}
		}
		want := slices.Clone(a)
		slices.SortFunc(want, func(x, y bounded) int { return cmp.Or(cmp.Compare(x.bound, y.bound), cmp.Compare(x.id, y.id)) })
		sortBounds(a)
		if !slices.IsSortedFunc(a, func(x, y bounded) int { return cmp.Compare(x.bound, y.bound) }) {
			t.Fatalf("%d flows: not sorted by bound", n)
		}
		slices.SortStableFunc(a, func(x, y bounded) int { return cmp.Or(cmp.Compare(x.bound, y.bound), cmp.Compare(x.id, y.id)) })
		if !slices.Equal(a, want) {
			t.Fatalf("%d flows: the sorted flows are not the input's", n)
		}
	}
}

// checkAggregates checks what a local refill reads against the flows:
// each resource that keeps buckets holds in them exactly its solved users,
// each at its rate, with their coefficients summed, no bucket empty and no
// rate twice, and its group's members exactly the flows in that group
// (the others keep neither).
func checkAggregates(f *fluid) error {
	for r := range int32(f.nres) {
		if n := len(f.users[r]); f.bucketed[r] && n <= f.bktOff || !f.bucketed[r] && (n > 0 && n >= f.bktOn || len(f.bkt[r].b) > 0) {
			return fmt.Errorf("resource %d with %d users: buckets %v (%d)", r, n, f.bucketed[r], len(f.bkt[r].b))
		}
		if !f.bucketed[r] {
			if len(f.gmem[r]) > 0 {
				return fmt.Errorf("resource %d keeps members without buckets", r)
			}
			continue
		}
		want := map[int64]int64{}  // rate -> coefficients
		slots := map[int64]int32{} // rate -> path slots
		for i, id := range f.users[r] {
			if fl := &f.flows[id]; fl.group >= 0 {
				want[f.rateOf(fl)] += f.ucoef[r][i]
				slots[f.rateOf(fl)]++
			}
		}
		seen := map[int64]bool{}
		for _, b := range f.bkt[r].b {
			if b.c <= 0 || seen[b.rate] {
				return fmt.Errorf("resource %d: bucket at %d empty or repeated", r, b.rate)
			}
			seen[b.rate] = true
			if b.w != want[b.rate] || b.c != slots[b.rate] {
				return fmt.Errorf("resource %d: bucket at %d sums %d over %d slots, the users %d over %d", r, b.rate, b.w, b.c, want[b.rate], slots[b.rate])
			}
		}
		if len(seen) != len(want) {
			return fmt.Errorf("resource %d: the buckets miss users", r)
		}
		if err := checkIndex(f, r); err != nil {
			return err
		}
		members := 0
		for p, id := range f.gmem[r] {
			if f.flows[id].group != r || f.gpos[id] != int32(p) {
				return fmt.Errorf("resource %d: member %d is in group %d", r, id, f.flows[id].group)
			}
			members++
		}
		for id := range f.flows {
			if f.flows[id].group == r {
				members--
			}
		}
		if members != 0 {
			return fmt.Errorf("resource %d: its group's members are not its flows", r)
		}
	}
	return nil
}

// checkIndex checks resource r's index of its buckets: kept exactly when
// it has more than bixOn buckets (and until fewer than bixOff), twice their
// number at least, and finding each bucket where it is and no other rate.
func checkIndex(f *fluid, r int32) error {
	bs, t := f.bkt[r].b, f.bkt[r].ix
	if t == nil && len(bs) > f.bixOn || t != nil && len(bs) < f.bixOff {
		return fmt.Errorf("resource %d with %d buckets: indexed %v", r, len(bs), t != nil)
	}
	if t == nil {
		return nil
	}
	if len(t)&(len(t)-1) != 0 || len(t) < 2*len(bs) {
		return fmt.Errorf("resource %d: index of %d slots for %d buckets", r, len(t), len(bs))
	}
	used := 0
	for _, v := range t {
		if v != 0 {
			used++
		}
	}
	if used != len(bs) {
		return fmt.Errorf("resource %d: index holds %d entries for %d buckets", r, used, len(bs))
	}
	for i, b := range bs {
		if got := f.bucket(r, b.rate); got != i {
			return fmt.Errorf("resource %d: bucket at %d found at %d, not %d", r, b.rate, got, i)
		}
		if got := f.bucket(r, b.rate+1); got >= 0 && bs[got].rate != b.rate+1 {
			return fmt.Errorf("resource %d: rate %d found at bucket %d of rate %d", r, b.rate+1, got, bs[got].rate)
		}
	}
	return nil
}

// The aggregates stay exact as flows come and go (random flows, shared
// levels, caps, paths that repeat a resource; resources that keep buckets
// always, from a few users on, or by default, and index them by rate from
// the first, the third or by default), and the solver keeps matching the
// full fill with them.
func TestFluidAggregates(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 23))
	local, rounds := 0, 0
	defer func() {
		// Local refills ran, and widened.
		if local == 0 || rounds <= local {
			t.Errorf("%d local solves, %d refills", local, rounds)
		}
	}()
	for i := range 200 {
		nr := 1 + rng.IntN(8)
		capacity := randomCapacities(rng, nr)
		cur := newFluid(capacity)
		cur.fullFrac = []float64{defaultFullFrac, 0.1, 2}[i%3]
		th := [][2]int{{0, -1}, {4, 2}, {defaultBktOn, defaultBktOff}}[i/3%3]
		cur.bktOn, cur.bktOff = th[0], th[1]
		ix := [][2]int{{0, -1}, {2, 1}, {defaultBixOn, defaultBixOff}}[i/9%3]
		cur.bixOn, cur.bixOff = ix[0], ix[1]
		orc := newFullFill(capacity).(*fullFill)
		type pair struct{ cur, orc int32 }
		var live []pair
		for step := range 60 {
			for range 1 + rng.IntN(4) {
				if len(live) > 0 && rng.IntN(3) == 0 {
					k := rng.IntN(len(live))
					cur.remove(live[k].cur)
					orc.remove(live[k].orc)
					live = append(live[:k], live[k+1:]...)
					continue
				}
				n := 1 + rng.IntN(min(maxPath, 3))
				var res []int32
				var coef []int64
				for range n {
					res = append(res, int32(rng.IntN(nr))) // may repeat
					coef = append(coef, coefOf(float64(1+rng.IntN(2))))
				}
				var limit int64
				if rng.IntN(5) == 0 {
					limit = rateOf([]float64{0.002, 0.005}[rng.IntN(2)])
				}
				live = append(live, pair{cur.add(res, coef, limit), orc.add(res, coef, limit)})
			}
			cur.solve()
			orc.solve()
			where := fmt.Sprintf("case %d step %d", i, step)
			if err := checkAggregates(cur); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			for _, p := range live {
				if c, o := cur.flows[p.cur], orc.flows[p.orc]; cur.rateOf(&c) != o.rate || c.group != o.group {
					t.Fatalf("%s: flow %d at %d in group %d, full fill %d in %d", where, p.cur, cur.rateOf(&c), c.group, o.rate, o.group)
				}
			}
		}
		local += cur.local
		rounds += cur.rounds
	}
}

// holdsRates on a resource's flows as buckets and changes agrees with
// holds on the flows one by one, at the solution's levels and
// others: random flows, rates moved as a refill moves them.
func TestHoldsRates(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	held, swept := 0, 0
	for i := range 300 {
		nr := 1 + rng.IntN(4)
		f := newFluid(randomCapacities(rng, nr))
		f.bktOn, f.bktOff = 0, -1 // every resource keeps buckets
		for range 1 + rng.IntN(30) {
			res := []int32{int32(rng.IntN(nr))}
			if r := int32(rng.IntN(nr)); r != res[0] && rng.IntN(2) == 0 {
				res = append(res, r)
			}
			coef := []int64{coefOf(float64(1 + rng.IntN(2))), coefOf(1)}[:len(res)]
			f.add(res, coef, 0)
		}
		f.solve()
		// Move some flows' rates (a refill's new rates), and give
		// holdsAgg the same as the rates changed on each resource. Every
		// flow is marked, so that the levels tried below leave the rates
		// holds reads as they are (a flow's rate is its group's level).
		e := f.stamp()
		was := make([]int64, len(f.flows))
		for id := range f.flows {
			was[id] = f.rateOf(&f.flows[id])
			f.flows[id].mark = e
			f.flows[id].nrate = was[id]
			if rng.IntN(3) == 0 {
				f.flows[id].nrate = max(1, was[id]+int64(rng.IntN(5))-2)
				if rng.IntN(4) == 0 {
					f.flows[id].nrate = was[id] / 2
				}
			}
		}
		for r := range int32(nr) {
			f.dl[r] = f.dl[r][:0]
			for p, id := range f.users[r] {
				if f.flows[id].nrate != was[id] {
					f.dl[r] = append(f.dl[r], rateDelta{old: was[id], new: f.flows[id].nrate, coef: f.ucoef[r][p]})
				}
			}
			saved := f.level[r]
			for _, l := range []int64{saved, saved - 1, saved + 1, saved / 2, noLevel} {
				if l < 0 {
					continue
				}
				f.level[r] = l
				want := f.holds(r, e)
				if got := f.holdsAgg(r); got != want {
					t.Fatalf("case %d resource %d level %d: holdsAgg %v, holds %v", i, r, l, got, want)
				}
				if want {
					held++
				}
				if _, sure := f.holdsFast(r, e); !sure {
					swept++
				}
			}
			f.level[r] = saved
		}
	}
	if held == 0 || swept == 0 {
		t.Errorf("%d checks held, %d needed the sweep", held, swept)
	}
}

// On random DAGs the solver equals the full fill bit for bit with every
// resource keeping buckets and with resources keeping them from a few
// users on (the default thresholds leave small schedules without).
func TestSolverBucketsMatchFullFill(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	cases := 100
	if testing.Short() {
		cases = 20
	}
	for i := range cases {
		s, tp, opt := randomDAG(rng)
		opt.Timeline = true
		want, errW := run(s, tp, opt, engineWith(newFullFill))
		for _, th := range [][2]int{{0, -1}, {3, 1}} {
			got, errG := run(s, tp, opt, engineWith(func(c []u128) solver {
				f := newFluid(c)
				f.bktOn, f.bktOff = th[0], th[1]
				return f
			}))
			if (errW == nil) != (errG == nil) {
				t.Fatalf("case %d, buckets from %d users: error %v, oracle's %v", i, th[0], errG, errW)
			}
			if errW != nil {
				break
			}
			if err := sameResult(got, want); err != nil {
				t.Fatalf("case %d, buckets from %d users: %v", i, th[0], err)
			}
		}
	}
}

// A flow's solver state is two cache lines, everything but the
// coefficients in the first (flowState's comment).
func TestFlowStateLayout(t *testing.T) {
	var fl flowState
	if n := unsafe.Sizeof(fl); n != 128 {
		t.Errorf("flowState is %d bytes, want 128", n)
	}
	if o := unsafe.Offsetof(fl.coef); o != 64 || unsafe.Offsetof(fl.res)+unsafe.Sizeof(fl.res) > 64 {
		t.Errorf("coefficients at %d, paths end at %d: the first line should hold all but the coefficients", o, unsafe.Offsetof(fl.res)+unsafe.Sizeof(fl.res))
	}
}
