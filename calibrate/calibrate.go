// Package calibrate holds `m2n calibrate`'s microbenchmarks and the fit of
// the executor model's constants from their measurements
// (docs/calibration.md). It is pure: the command runs the benchmarks on
// GPUs and hands their times back here.
package calibrate

import (
	"fmt"
	"slices"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/program"
)

// A Bench is one microbenchmark: a schedule and how the executor runs it.
type Bench struct {
	Name      string
	Schedule  *ir.Schedule
	GPUs      int    // 1: loopback on one GPU; 2: NCCL between two GPUs
	Transport string // "copy" or "nccl"
	Graph     bool   // replay as a CUDA graph (copy transport)
	WaveBytes int64  // as --wave-bytes (0: the executor's choice)
	// NoBatch: the executor launches every local op on its own (no batch
	// steps), as the benches of a launch's and an event's cost need.
	NoBatch bool
	// Profile times each NCCL group's end too (Sample.GroupEnd).
	Profile bool
	What    string // what it measures, for the report
}

// Sample is what the executor measured of one bench.
type Sample struct {
	Times     []units.Time // timed iterations, sorted ascending
	HostIssue units.Time   // the host's time to issue one iteration (median)
	Groups    int          // NCCL groups an iteration issued
	// GroupEnd is, for a profiled bench, when its first NCCL group ended
	// on the first GPU (median), from the iteration's start; 0 otherwise.
	GroupEnd units.Time
}

// Median is the sample's median time.
func (s Sample) Median() units.Time { return s.Times[len(s.Times)/2] }

// BoxCase is a box copy timed for one class of the pack kernels.
type BoxCase struct {
	Class             program.BoxClass
	Full, Start, Size []int64
	Elem              int64
}

// BoxSample is what the GPU measured of a box case.
type BoxSample struct {
	Pack, Unpack, Copy []units.Time
	Kernel             string
}

// QuantShape is the box the quantize bench quantizes whole: 24 blocks of
// [2048, 5120] bf16 (480 MiB) in 128 x 128 blocks, a shape of no shipped
// scenario (the held-out runs must not share the benches' shapes).
var QuantShape = []int64{24, 2048, 5120}

// QuantGenShape is the box the generic quantize bench quantizes whole, in
// blocks of QuantGenBlock: the generic kernel's rate (as QuantShape, a
// generic shape, none of the held-out runs'). Per-channel scales, which it
// measured before the row kernels, run those now (program.QuantRows); the
// row bench quantizes it in per-channel scales. 320 MiB, so that a
// launch's fixed cost is a few percent of it (a [3072, 6144] box, 36 MiB,
// fitted the row kernel at 0.245 of memory, and 0.48 ran on a [7168, 8192]
// box).
var QuantGenShape = []int64{16384, 10240}

// QuantGenBlock is the generic quantize bench's block: rows x columns, a
// shape only the generic kernel takes.
var QuantGenBlock = [2]int64{64, 64}

// BoxCases are the pack classes' representative boxes (docs/native.md),
// each of 256-512 MiB so that a kernel's fixed cost is below 2% of it:
// rows of 12 KiB (a shape of no shipped scenario), rows of 128 bytes, and rows
// off 16-byte alignment.
func BoxCases() []BoxCase {
	return []BoxCase{
		{program.LongRuns, []int64{12, 8192, 6144}, []int64{0, 2048, 0}, []int64{12, 2048, 6144}, 2},
		{program.ShortRuns, []int64{2097152, 512}, []int64{0, 128}, []int64{2097152, 64}, 2},
		{program.Staged, []int64{64, 4100, 2049}, []int64{0, 1025, 0}, []int64{64, 2050, 2047}, 2},
	}
}

// BatchCase is the batch bench's box: the right half of a [32768, 8192]
// bf16 array's columns (8 KiB runs, 256 MiB) unpacked from staging as one
// batch kernel of 64 boxes of 4 MiB, the shape of a waves-mode batch of
// unpacks (many boxes of a few MiB).
var BatchCase = struct {
	Full, Start, Size []int64
	Elem              int64
	Pieces            int
}{[]int64{32768, 8192}, []int64{0, 4096}, []int64{32768, 4096}, 2, 64}

const (
	pairSmall   = 256 << 10
	copyBytes   = 1 << 30
	launchOps   = 256
	launchBytes = 64 << 10
	streamBytes = 256 << 20
	opsCount    = 64
	opsBytes    = 256 << 10
	allBytes    = 256 << 20
	// allBigBytes is the larger size of the duplex benches: with
	// allBytes, the duplex rate is a slope.
	allBigBytes = 1 << 30
	// besideBatchBoxes is beside-batch's box copies a GPU.
	besideBatchBoxes = 64
)

// ManyOps are the duplex benches of many send/recvs to one peer in a
// group: per direction, how many and of what size.
// The larger is topo.DuplexOpTop, beyond which the model holds the cost.
var ManyOps = []struct{ Count, Bytes int64 }{{64, 4 << 20}, {16, topo.DuplexOpTop}}

// PairSizes are the sizes of the one-pair sweep.
var PairSizes = []int64{pairSmall, 4 << 20, 64 << 20, 256 << 20, 512 << 20}

// StreamWaves are the per-group sizes of the group streams: the first
// host-bound (the host's cost of a group), the second the ramp's foot, the
// last its top (rampTop).
var StreamWaves = []int64{1 << 20, 8 << 20, 32 << 20, rampTop}

// rampTop is the size from which a send/recv's fixed cost no longer grows.
const rampTop = 64 << 20

// topology is what the benchmarks are planned on: two GPUs, each its own
// virtual domain, as the two-GPU scenarios do.
func topology() *topo.Topology {
	t, _ := topo.Preset("hgx-h200")
	t.GPUsPerDomain, t.Domains = 1, 2
	return t
}

// tensor is n bytes of bf16, whole on rank from and wanted whole on rank to.
func tensor(name string, n int64, from, to int) ir.Tensor {
	shape := []int64{n / 2 / 1024, 1024}
	if n < 2048 {
		shape = []int64{1, n / 2}
	}
	one := func(r int) layout.Layout {
		return layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{1}, Ranks: []int{r}}, Placements: []layout.Placement{layout.R}}
	}
	return ir.Tensor{Name: name, Src: one(from), Dst: one(to)}
}

func build(ts []ir.Tensor, chunk int64) (*ir.Schedule, error) {
	return plan.Build(ts, topology(), plan.Options{Route: plan.Flat, ChunkBytes: chunk})
}

// waitsSchedule is launchOps copies of launchBytes on four ranks in turn
// (four streams), each made to wait for the copy before it on each of the
// other three ranks: about four events (a record and three waits) a
// launch, where events has about one. With the launch bench's launches
// and few events, the two equations in a launch's and an event's host
// costs are far from parallel, so that host noise in either moves the
// event's cost little (the events bench's events are a tenth of its issue
// time, and three one-GPU calibrations in a row fitted 0.41, 1.76 and
// 0.56 us from it).
func waitsSchedule() (*ir.Schedule, error) {
	const ranks = 4
	tp := topology()
	tp.Domains = ranks
	var ts []ir.Tensor
	for i := range launchOps {
		ts = append(ts, tensor(fmt.Sprintf("w%d", i), launchBytes, i%ranks, i%ranks))
	}
	s, err := plan.Build(ts, tp, plan.Options{Route: plan.Flat, ChunkBytes: launchBytes})
	if err != nil {
		return nil, err
	}
	// The ops are the copies, one a tensor, in order: op i on rank i % 4.
	if len(s.Ops) != launchOps {
		return nil, fmt.Errorf("%d ops, want %d copies", len(s.Ops), launchOps)
	}
	w := *s
	w.Ops, w.DepPool = slices.Clone(s.Ops), nil
	for i := range w.Ops {
		deps := slices.Clone(s.Deps(int32(i)))
		for k := 1; k < ranks && i-k >= 0; k++ {
			deps = append(deps, int32(i-k))
		}
		slices.Sort(deps)
		deps = slices.Compact(deps)
		w.Ops[i].DepOff, w.Ops[i].DepLen = int32(len(w.DepPool)), int32(len(deps))
		w.DepPool = append(w.DepPool, deps...)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return &w, nil
}

// Benches returns the microbenchmarks for a machine of gpus GPUs (1 or
// more; with one, the NCCL ones are left out).
func Benches(gpus int) ([]Bench, error) {
	var out []Bench
	add := func(b Bench, ts []ir.Tensor, chunk int64) error {
		s, err := build(ts, chunk)
		if err != nil {
			return fmt.Errorf("bench %s: %w", b.Name, err)
		}
		b.Schedule = s
		out = append(out, b)
		return nil
	}
	if err := add(Bench{Name: "copy", GPUs: 1, Transport: "copy",
		What: "one device copy of 1 GiB: memory bandwidth"}, []ir.Tensor{tensor("w", copyBytes, 0, 0)}, copyBytes); err != nil {
		return nil, err
	}

	var small []ir.Tensor
	for i := range launchOps {
		small = append(small, tensor(fmt.Sprintf("w%d", i), launchBytes, 0, 0))
	}
	if err := add(Bench{Name: "launch-graph", GPUs: 1, Transport: "copy", Graph: true, NoBatch: true,
		What: "256 copies of 64 KiB on one stream, as a CUDA graph: a copy's device latency"}, small, launchBytes); err != nil {
		return nil, err
	}
	if err := add(Bench{Name: "launch", GPUs: 1, Transport: "copy", NoBatch: true,
		What: "the same, issued op by op: the host's cost of a launch"}, small, launchBytes); err != nil {
		return nil, err
	}
	// Dependencies across streams: packs, transfers and unpacks on their
	// own streams, each waiting for the one before.
	tp := topology()
	ev := ir.Tensor{Name: "w", Src: layout.Layout{Shape: []int64{512, 1024}, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{layout.S(1)}},
		Dst: layout.Layout{Shape: []int64{512, 1024}, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{2, 3}}, Placements: []layout.Placement{layout.S(0)}}}
	tp.Domains = 4
	s, err := plan.Build([]ir.Tensor{ev}, tp, plan.Options{Route: plan.Flat, ChunkBytes: 16 << 10})
	if err != nil {
		return nil, fmt.Errorf("bench events: %w", err)
	}
	out = append(out, Bench{Name: "events", Schedule: s, GPUs: 1, Transport: "copy", NoBatch: true,
		What: "packs, copies and unpacks on their streams, each waiting for the last: the host's cost of an event"})
	w, err := waitsSchedule()
	if err != nil {
		return nil, fmt.Errorf("bench waits: %w", err)
	}
	out = append(out, Bench{Name: "waits", Schedule: w, GPUs: 1, Transport: "copy", NoBatch: true,
		What: "256 copies of 64 KiB on four streams, each waiting for the last of the other three: the host's cost of an event, beside launch's"})
	out = append(out, Bench{Name: "events-graph", Schedule: s, GPUs: 1, Transport: "copy", Graph: true, NoBatch: true,
		What: "the same as a CUDA graph: a pack or unpack kernel's start"})
	if gpus < 2 {
		return out, nil
	}
	for _, n := range PairSizes {
		if err := add(Bench{Name: "pair-" + sizeName(n), GPUs: 2, Transport: "nccl", WaveBytes: -1,
			What: "one NCCL send/recv GPU 0 -> 1: the pair's rate and fixed cost"}, []ir.Tensor{tensor("w", n, 0, 1)}, n); err != nil {
			return nil, err
		}
	}
	if err := add(Bench{Name: "all-pairs", GPUs: 2, Transport: "nccl", WaveBytes: -1,
		What: "GPU 0 -> 1 and 1 -> 0 at once, 256 MiB each: NCCL's send plus receive rate per GPU"},
		[]ir.Tensor{tensor("a", allBytes, 0, 1), tensor("b", allBytes, 1, 0)}, allBytes); err != nil {
		return nil, err
	}
	if err := add(Bench{Name: "all-pairs-1GiB", GPUs: 2, Transport: "nccl", WaveBytes: -1,
		What: "the same, 1 GiB each way: with all-pairs, NCCL's duplex rate as a slope and its start"},
		[]ir.Tensor{tensor("a", allBigBytes, 0, 1), tensor("b", allBigBytes, 1, 0)}, allBigBytes); err != nil {
		return nil, err
	}
	if err := add(Bench{Name: "all-pairs-16MiB", GPUs: 2, Transport: "nccl", WaveBytes: -1,
		What: "the same, 16 MiB each way: the start of a small group both ways (duplex_start_small)"},
		[]ir.Tensor{tensor("a", topo.DuplexStartSmallBytes, 0, 1), tensor("b", topo.DuplexStartSmallBytes, 1, 0)}, topo.DuplexStartSmallBytes); err != nil {
		return nil, err
	}
	if err := add(Bench{Name: "beside", GPUs: 2, Transport: "nccl", WaveBytes: -1, Profile: true,
		What: "all-pairs beside a 1 GiB local copy on each GPU: NCCL's share of its rate beside a kernel, and the copy's rate on the blocks it is given"},
		[]ir.Tensor{tensor("a", allBytes, 0, 1), tensor("b", allBytes, 1, 0), tensor("c0", copyBytes, 0, 0), tensor("c1", copyBytes, 1, 1)}, copyBytes); err != nil {
		return nil, err
	}
	for _, m := range ManyOps {
		var ts []ir.Tensor
		for i := range m.Count {
			ts = append(ts, tensor(fmt.Sprintf("a%d", i), m.Bytes, 0, 1), tensor(fmt.Sprintf("b%d", i), m.Bytes, 1, 0))
		}
		if err := add(Bench{Name: manyName(m.Count, m.Bytes), GPUs: 2, Transport: "nccl", WaveBytes: -1,
			What: fmt.Sprintf("%d send/recvs of %s each way in one group: what a send/recv after the first to a peer costs both ways", m.Count, sizeName(m.Bytes))}, ts, m.Bytes); err != nil {
			return nil, err
		}
	}
	// A batch of box copies beside all-pairs on each GPU: 64 [2048, 8192]
	// bf16 tensors whole on both GPUs that each wants half the columns of
	// (64 box copies of 8 KiB rows, 1 GiB a GPU: batch kernels).
	ts := []ir.Tensor{tensor("a", allBytes, 0, 1), tensor("b", allBytes, 1, 0)}
	for i := range besideBatchBoxes {
		whole := layout.Layout{Shape: []int64{2048, 8192}, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{layout.R}}
		half := whole
		half.Placements = []layout.Placement{layout.S(1)}
		ts = append(ts, ir.Tensor{Name: fmt.Sprintf("w%d", i), Src: whole, Dst: half})
	}
	if err := add(Bench{Name: "beside-batch", GPUs: 2, Transport: "nccl", WaveBytes: -1, Profile: true,
		What: "all-pairs beside a batch of 64 box copies on each GPU (1 GiB of 8 KiB rows): NCCL's share of its rate beside a batch"},
		ts, allBytes); err != nil {
		return nil, err
	}
	if err := add(Bench{Name: "peer-all-pairs", GPUs: 2, Transport: "copy",
		What: "the same as device copies over NVLink: NVLink per direction, both busy"},
		[]ir.Tensor{tensor("a", allBytes, 0, 1), tensor("b", allBytes, 1, 0)}, allBytes); err != nil {
		return nil, err
	}
	for _, w := range StreamWaves {
		if err := add(Bench{Name: "groups-" + sizeName(w), GPUs: 2, Transport: "nccl", WaveBytes: w,
			What: "256 MiB GPU 0 -> 1 in one NCCL group per chunk: a group's cost"}, []ir.Tensor{tensor("w", streamBytes, 0, 1)}, w); err != nil {
			return nil, err
		}
	}
	var many []ir.Tensor
	for i := range opsCount {
		many = append(many, tensor(fmt.Sprintf("w%d", i), opsBytes, 0, 1))
	}
	if err := add(Bench{Name: "ops", GPUs: 2, Transport: "nccl", WaveBytes: -1,
		What: "64 send/recvs of 256 KiB GPU 0 -> 1 in one group: an op's cost"}, many, opsBytes); err != nil {
		return nil, err
	}
	return out, nil
}

// manyName is the name of a ManyOps bench.
func manyName(count, bytes int64) string { return fmt.Sprintf("many-%dx%s", count, sizeName(bytes)) }

// sizeName writes a power-of-two size compactly: "256KiB", "4MiB".
func sizeName(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// Counts is what the host issues for a bench in one launch mode: kernel or
// copy launches, and event records and stream waits (the iteration's own
// included), by the busiest process.
type Counts struct {
	Launches, Events int
	// Before is the events the iteration issues before its first op (its
	// start record, and each device's and stream's wait), within Events.
	Before int
}

// HostCounts counts what the executor's host issues for a bench (one
// iteration, as native issues it) in a launch mode.
func HostCounts(b *Bench, launch topo.Launch) (Counts, error) {
	mode := program.Waves
	if b.Transport == "copy" {
		mode = program.Streams
	}
	dev := func(r int32) int {
		if b.GPUs == 1 {
			return 0
		}
		return int(r)
	}
	p, err := program.Compile(b.Schedule, program.Options{Dev: dev, Lanes: program.DefaultLanes, Mode: mode, WaveBytes: b.WaveBytes, Comms: 1, NoBatch: b.NoBatch})
	if err != nil {
		return Counts{}, err
	}
	proc := func(d int) int {
		if launch == topo.PerGPU {
			return d
		}
		return 0
	}
	per := map[int]*Counts{}
	at := func(d int) *Counts {
		if per[proc(d)] == nil {
			per[proc(d)] = &Counts{}
		}
		return per[proc(d)]
	}
	devs := map[int]map[int]bool{}
	for _, k := range p.Streams {
		c := at(k.Dev)
		c.Events += 3 // the iteration's start wait, and its join record and wait
		c.Before++
		if devs[proc(k.Dev)] == nil {
			devs[proc(k.Dev)] = map[int]bool{}
		}
		devs[proc(k.Dev)][k.Dev] = true
	}
	for pr, ds := range devs {
		per[pr].Events += 1 + len(ds) // the start record, and each device's wait
		per[pr].Before += 1 + len(ds)
	}
	rec := func(r int32, more []int32) int {
		n := len(more)
		if r >= 0 {
			n++
		}
		return n
	}
	for _, st := range p.Steps {
		switch st.Kind {
		case program.Local:
			c := at(p.Streams[st.Stream].Dev)
			c.Launches++
			c.Events += len(st.Waits) + rec(st.Record, st.More)
		case program.Xfer:
			if mode == program.Streams {
				c := at(p.Streams[st.Stream].Dev)
				c.Launches++
				c.Events += len(st.Waits) + rec(st.Record, st.More)
				continue
			}
			s, r := at(p.Streams[st.Stream].Dev), at(p.Streams[st.RStream].Dev)
			s.Events += len(st.Waits) + rec(st.Record, st.More)
			r.Events += len(st.RWaits) + rec(st.RRecord, st.RMore)
		}
	}
	// The busiest process; the lowest-numbered among equals.
	procs := make([]int, 0, len(per))
	for pr := range per {
		procs = append(procs, pr)
	}
	slices.Sort(procs)
	var most Counts
	for _, pr := range procs {
		if c := per[pr]; c.Launches+c.Events > most.Launches+most.Events {
			most = *c
		}
	}
	return most, nil
}
