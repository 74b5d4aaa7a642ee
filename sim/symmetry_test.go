package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
)

// symmetricDAG is a random schedule of replicas alike: a random template
// of local copies and transfers among a replica's ranks and from (or to)
// ranks every replica shares, instantiated per replica on GPUs of its
// own, op by op across the replicas. With perturb, one op of one replica
// moves a few bytes more, which breaks part of the symmetry. It returns
// the template's ops and whether the replicas are provably alike (not
// perturbed, and every rank in one NVLink domain).
func symmetricDAG(rng *rand.Rand, perturb bool) (*ir.Schedule, *topo.Topology, Options, int, bool) {
	tp, opt := randomMachine(rng, 4)
	nshared := rng.IntN(3)
	per := 1 + rng.IntN(3)
	reps := 2 + rng.IntN(4)
	for nshared+per*reps > tp.GPUs() {
		reps--
	}
	if reps < 2 {
		per, reps = 1, 2
		nshared = min(nshared, tp.GPUs()-2)
	}
	s := &ir.Schedule{Route: "random", ChunkBytes: 1 << 20}
	// Shared ranks first, then each replica's, on GPUs in order or, half
	// the time, each replica one per domain in turn.
	gpus := rng.Perm(tp.GPUs())
	if rng.IntN(2) == 0 {
		for i := range gpus {
			gpus[i] = i
		}
	}
	for r := range nshared + per*reps {
		g := gpus[r]
		s.World = append(s.World, ir.Rank{Rank: r, GPU: g, Domain: g / tp.GPUsPerDomain})
	}
	rank := func(rep, j int) int32 { return int32(nshared + rep*per + j) }
	sizes := []int64{1000, 1 << 20, 4 << 20, 32 << 20}
	ntmpl := 1 + rng.IntN(120)
	ids := make([][]int32, ntmpl) // per template op, per replica: its op (a send's)
	badRep, badOp := rng.IntN(reps), rng.IntN(ntmpl)
	for t := range ntmpl {
		bytes := sizes[rng.IntN(len(sizes))] + int64(rng.IntN(4096))
		kind := rng.IntN(4)
		a, b := rng.IntN(per), rng.IntN(per)
		sh := rng.IntN(max(nshared, 1))
		toShared := nshared > 0 && rng.IntN(2) == 0
		var deps []int
		for range rng.IntN(3) {
			if t > 0 {
				deps = append(deps, t-1-rng.IntN(min(t, 20)))
			}
		}
		ids[t] = make([]int32, reps)
		for rep := range reps {
			n := bytes
			if perturb && rep == badRep && t == badOp {
				n += 64
			}
			var ds []int32
			for _, d := range deps {
				ds = append(ds, ids[d][rep])
			}
			id := int32(len(s.Ops))
			ids[t][rep] = id
			src, dst := rank(rep, a), rank(rep, b)
			switch {
			case kind == 0 || kind == 1 && nshared == 0:
				s.AddOp(ir.Op{Kind: ir.Copy, Rank: src, Peer: -1, Match: -1, Src: ir.Region{Bytes: n}, Dst: ir.Region{Bytes: n}}, ds...)
				continue
			case kind == 1:
				src = int32(sh) // from a shared rank
			case kind == 2 && toShared:
				dst = int32(sh) // to a shared rank
			}
			s.AddOp(ir.Op{Kind: ir.Send, Rank: src, Peer: dst, Match: id + 1, Src: ir.Region{Bytes: n}}, ds...)
			s.AddOp(ir.Op{Kind: ir.Recv, Rank: dst, Peer: src, Match: id, Dst: ir.Region{Bytes: n}})
		}
	}
	alike := !perturb
	for _, r := range s.World {
		alike = alike && r.Domain == s.World[0].Domain
	}
	return s, tp, opt, ntmpl, alike
}

// sameSimulation reports the first difference between a simulation with
// symmetry and one without: everything the result holds.
func sameSimulation(got, want *Result) error {
	if got.Makespan != want.Makespan || got.Events != want.Events || got.Flows != want.Flows {
		return fmt.Errorf("makespan %d ps, %d events, %d flows; without symmetry %d ps, %d events, %d flows",
			got.Makespan, got.Events, got.Flows, want.Makespan, want.Events, want.Flows)
	}
	if len(got.Resources) != len(want.Resources) {
		return fmt.Errorf("%d resources, without symmetry %d", len(got.Resources), len(want.Resources))
	}
	for i := range want.Resources {
		if got.Resources[i] != want.Resources[i] {
			return fmt.Errorf("resource %+v, without symmetry %+v", got.Resources[i], want.Resources[i])
		}
	}
	if got.Bottleneck != want.Bottleneck {
		return fmt.Errorf("bottleneck %+v, without symmetry %+v", got.Bottleneck, want.Bottleneck)
	}
	return nil
}

// simulateBoth runs s with symmetry (looked for at any size) and without.
func simulateBoth(t *testing.T, s *ir.Schedule, tp *topo.Topology, opt Options) (with, without *Result) {
	t.Helper()
	defer func(n int) { symMinOps = n }(symMinOps)
	symMinOps = 0
	opt.NoSymmetry = false
	with, errW := Run(s, tp, opt)
	opt.NoSymmetry = true
	without, errN := Run(s, tp, opt)
	if (errW == nil) != (errN == nil) {
		t.Fatalf("error %v, without symmetry %v", errW, errN)
	}
	return with, without
}

// On random schedules of replicas alike, with their symmetry broken or
// not, the simulation with symmetry equals the one without, bit for bit;
// and where the replicas are alike it runs fewer flows.
func TestSymmetryExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	cases := 200
	if testing.Short() {
		cases = 50
	}
	used, reduced, alikes := 0, 0, 0
	for i := range cases {
		perturb := i%3 == 2
		s, tp, opt, ntmpl, alike := symmetricDAG(rng, perturb)
		with, without := simulateBoth(t, s, tp, opt)
		if with == nil {
			continue
		}
		if err := sameSimulation(with, without); err != nil {
			t.Fatalf("case %d (%d ops, perturbed %v, %+v): %v", i, len(s.Ops), perturb, opt, err)
		}
		if with.FlowClasses > 0 {
			used++
			if with.FlowClasses < with.Flows {
				reduced++
			}
		}
		if without.FlowClasses != 0 {
			t.Fatalf("case %d: symmetry used with NoSymmetry set", i)
		}
		// Replicas provably alike: at most one class per template op.
		if alike {
			alikes++
			if with.FlowClasses == 0 || with.FlowClasses > ntmpl {
				t.Fatalf("case %d: replicas alike, %d template ops, %d flows: the engine ran %d classes (0: none)", i, ntmpl, with.Flows, with.FlowClasses)
			}
		}
	}
	if alikes < cases/10 {
		t.Fatalf("only %d of %d cases with replicas alike", alikes, cases)
	}
	t.Logf("symmetry used in %d of %d cases (%d of them with replicas provably alike), %d with fewer flows than the schedule", used, cases, alikes, reduced)
}

// A hash that collides for every signature puts every unit in one class;
// the check that compares every member with its class's representative
// refuses it, and the simulation runs every flow.
func TestSymmetryCollisionsRefused(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	defer func(f func(h, x uint64) uint64) { symMix = f }(symMix)
	symMix = func(h, x uint64) uint64 { return 7 }
	refused := 0
	for i := range 30 {
		s, tp, opt, _, _ := symmetricDAG(rng, false)
		with, without := simulateBoth(t, s, tp, opt)
		if with == nil {
			continue
		}
		if err := sameSimulation(with, without); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if with.FlowClasses == 0 {
			refused++
		}
	}
	if refused < 20 {
		t.Fatalf("colliding hashes refused in only %d of 30 cases", refused)
	}
}

// On random DAGs (no replicas) the results are the same too.
func TestSymmetryRandomDAGs(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	for i := range 100 {
		s, tp, opt := randomDAG(rng)
		with, without := simulateBoth(t, s, tp, opt)
		if with == nil {
			continue
		}
		if err := sameSimulation(with, without); err != nil {
			t.Fatalf("case %d (%d ops, %+v): %v", i, len(s.Ops), opt, err)
		}
	}
}

// FuzzSymmetryExact compares the simulation with symmetry and without on
// schedules of replicas drawn from the fuzzer's seeds.
func FuzzSymmetryExact(f *testing.F) {
	f.Add(uint64(1), uint64(2), false)
	f.Add(uint64(3), uint64(4), true)
	f.Add(uint64(5), uint64(6), false)
	f.Fuzz(func(t *testing.T, a, b uint64, perturb bool) {
		s, tp, opt, _, _ := symmetricDAG(rand.New(rand.NewPCG(a, b)), perturb)
		with, without := simulateBoth(t, s, tp, opt)
		if with == nil {
			return
		}
		if err := sameSimulation(with, without); err != nil {
			t.Fatalf("%d ops, %+v: %v", len(s.Ops), opt, err)
		}
	})
}
