package sim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// reference computes max-min fair rates by slow, obviously correct water
// filling: repeatedly find the resource with the smallest fair share among
// the flows not yet fixed, fix those flows at that share, and subtract.
func reference(capacity []float64, flows [][]int32, coefs [][]float64) []float64 {
	rate := make([]float64, len(flows))
	fixed := make([]bool, len(flows))
	left := append([]float64(nil), capacity...)
	for {
		best, bestShare := -1, math.Inf(1)
		for r := range capacity {
			w := 0.0
			for f, rs := range flows {
				if fixed[f] {
					continue
				}
				for k, x := range rs {
					if int(x) == r {
						w += coefs[f][k]
					}
				}
			}
			if w > 0 && left[r]/w < bestShare {
				best, bestShare = r, left[r]/w
			}
		}
		if best < 0 {
			return rate
		}
		// Every unfixed flow gets the share; fix those on the bottleneck.
		for f, rs := range flows {
			if fixed[f] {
				continue
			}
			for k, x := range rs {
				left[x] -= bestShare * coefs[f][k]
			}
			rate[f] += bestShare
		}
		for f, rs := range flows {
			if fixed[f] {
				continue
			}
			for _, x := range rs {
				if int(x) == best {
					fixed[f] = true
				}
			}
		}
		// Other resources saturated at the same level fix their flows too.
		for r := range capacity {
			if left[r] <= 1e-9*capacity[r] {
				for f, rs := range flows {
					for _, x := range rs {
						if int(x) == r {
							fixed[f] = true
						}
					}
				}
			}
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func solveAll(capacity []float64, flows [][]int32, coefs [][]float64) []float64 {
	f := newFluid(capacity)
	ids := make([]int32, len(flows))
	for i := range flows {
		ids[i] = f.add(flows[i], coefs[i], 0)
	}
	f.solve()
	out := make([]float64, len(flows))
	for i, id := range ids {
		out[i] = f.flows[id].rate
	}
	return out
}

func ones(n int) []float64 {
	o := make([]float64, n)
	for i := range o {
		o[i] = 1
	}
	return o
}

func TestMaxMinHandCases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity []float64
		flows    [][]int32
		coefs    [][]float64
		want     []float64
	}{
		{"one flow", []float64{10}, [][]int32{{0}}, nil, []float64{10}},
		{"three flows, one link", []float64{9}, [][]int32{{0}, {0}, {0}}, nil, []float64{3, 3, 3}},
		// The parking lot: a long flow over links 0, 1, 2 and a short flow on
		// each link; every link is shared by two flows.
		{"parking lot", []float64{10, 10, 10}, [][]int32{{0, 1, 2}, {0}, {1}, {2}}, nil, []float64{5, 5, 5, 5}},
		// Different bottlenecks: flow 0 is held to 2 by link 1; flow 1 takes
		// the rest of link 0.
		{"different bottlenecks", []float64{10, 2}, [][]int32{{0, 1}, {0}}, nil, []float64{2, 8}},
		{"three on link, one also elsewhere", []float64{12, 3}, [][]int32{{0, 1}, {0}, {0}}, nil, []float64{3, 4.5, 4.5}},
		// A copy reads and writes: coefficient 2 on memory.
		{"memory coefficient", []float64{100}, [][]int32{{0}, {0}}, [][]float64{{2}, {1}}, []float64{100.0 / 3, 100.0 / 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coefs := tc.coefs
			if coefs == nil {
				for _, f := range tc.flows {
					coefs = append(coefs, ones(len(f)))
				}
			}
			got := solveAll(tc.capacity, tc.flows, coefs)
			for i := range got {
				if !near(got[i], tc.want[i]) {
					t.Errorf("flow %d: rate %v, want %v (all %v)", i, got[i], tc.want[i], got)
				}
			}
		})
	}
}

func randomInstance(rng *rand.Rand) ([]float64, [][]int32, [][]float64) {
	nr := 1 + rng.IntN(8)
	capacity := make([]float64, nr)
	for r := range capacity {
		capacity[r] = float64(1 + rng.IntN(20))
	}
	nf := 1 + rng.IntN(12)
	flows := make([][]int32, nf)
	coefs := make([][]float64, nf)
	for i := range flows {
		k := 1 + rng.IntN(min(3, nr))
		perm := rng.Perm(nr)[:k]
		for _, r := range perm {
			flows[i] = append(flows[i], int32(r))
			coefs[i] = append(coefs[i], float64(1+rng.IntN(2)))
		}
	}
	return capacity, flows, coefs
}

func TestMaxMinMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 2000 {
		capacity, flows, coefs := randomInstance(rng)
		got := solveAll(capacity, flows, coefs)
		want := reference(capacity, flows, coefs)
		for f := range got {
			if !near(got[f], want[f]) {
				t.Fatalf("case %d flow %d: rate %v, reference %v\ncap %v\nflows %v\ncoefs %v", i, f, got[f], want[f], capacity, flows, coefs)
			}
		}
		// No resource above capacity.
		load := make([]float64, len(capacity))
		for f, rs := range flows {
			for k, r := range rs {
				load[r] += coefs[f][k] * got[f]
			}
		}
		for r := range load {
			if load[r] > capacity[r]*(1+1e-9) {
				t.Fatalf("case %d: resource %d carries %v > capacity %v", i, r, load[r], capacity[r])
			}
		}
	}
}

// Incremental solving, after flows come and go, gives the same rates as
// solving from scratch.
func TestMaxMinIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for i := range 300 {
		capacity, flows, coefs := randomInstance(rng)
		f := newFluid(capacity)
		live := map[int32]int{}
		for step := range 30 {
			if len(live) > 0 && rng.IntN(3) == 0 {
				// Remove the flow with the smallest id, deterministically.
				var victim int32 = -1
				for id := range live {
					if victim < 0 || id < victim {
						victim = id
					}
				}
				f.remove(victim)
				delete(live, victim)
			} else {
				k := rng.IntN(len(flows))
				live[f.add(flows[k], coefs[k], 0)] = k
			}
			f.solve()
			var fs [][]int32
			var cs [][]float64
			var ids []int32
			for id, k := range live {
				ids = append(ids, id)
				fs = append(fs, flows[k])
				cs = append(cs, coefs[k])
			}
			want := reference(capacity, fs, cs)
			for n, id := range ids {
				if !near(f.flows[id].rate, want[n]) {
					t.Fatalf("case %d step %d: flow %d rate %v, from scratch %v", i, step, id, f.flows[id].rate, want[n])
				}
			}
		}
	}
}

func TestMaxMinRateCap(t *testing.T) {
	// Two flows on a 10 link, one capped at 2: the other takes 8.
	f := newFluid([]float64{10})
	a := f.add([]int32{0}, []float64{1}, 2)
	b := f.add([]int32{0}, []float64{1}, 0)
	f.solve()
	if !near(f.flows[a].rate, 2) || !near(f.flows[b].rate, 8) {
		t.Errorf("rates %v, %v; want 2, 8", f.flows[a].rate, f.flows[b].rate)
	}
}

// The local re-solve (forced on from the first flow) gives the rates of
// solving from scratch, as flows come and go on larger instances.
func TestMaxMinLocal(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	cases := 300
	if testing.Short() {
		cases = 60
	}
	var local, full int
	defer func() {
		t.Logf("%d local solves, %d full", local, full)
		if local < full {
			t.Errorf("only %d of %d solves were local: the test does not exercise the local path", local, local+full)
		}
	}()
	for i := range cases {
		nr := 2 + rng.IntN(24)
		capacity := make([]float64, nr)
		for r := range capacity {
			capacity[r] = float64(1 + rng.IntN(20))
		}
		f := newFluid(capacity)
		f.localMin = 0
		type spec struct {
			res  []int32
			coef []float64
			cap  float64
		}
		live := map[int32]spec{}
		var order []int32
		for step := range 60 {
			if len(order) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(order))
				id := order[k]
				order = append(order[:k], order[k+1:]...)
				f.remove(id)
				delete(live, id)
			} else {
				k := 1 + rng.IntN(min(3, nr))
				var sp spec
				for _, r := range rng.Perm(nr)[:k] {
					sp.res = append(sp.res, int32(r))
					sp.coef = append(sp.coef, float64(1+rng.IntN(2)))
				}
				if rng.IntN(8) == 0 {
					sp.cap = float64(1 + rng.IntN(5))
				}
				id := f.add(sp.res, sp.coef, sp.cap)
				live[id] = sp
				order = append(order, id)
			}
			f.solve()
			// The reference has no caps: model a cap as a private resource.
			caps := append([]float64(nil), capacity...)
			var fs [][]int32
			var cs [][]float64
			for _, id := range order {
				sp := live[id]
				res, coef := append([]int32(nil), sp.res...), append([]float64(nil), sp.coef...)
				if sp.cap > 0 {
					res = append(res, int32(len(caps)))
					coef = append(coef, 1)
					caps = append(caps, sp.cap)
				}
				fs, cs = append(fs, res), append(cs, coef)
			}
			want := reference(caps, fs, cs)
			for n, id := range order {
				if !near(f.flows[id].rate, want[n]) {
					t.Fatalf("case %d step %d: flow %d rate %v, from scratch %v", i, step, id, f.flows[id].rate, want[n])
				}
			}
		}
		local, full = local+f.local, full+f.full
	}
}
