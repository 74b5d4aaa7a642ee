// Package calibrate holds `m2n calibrate`'s microbenchmarks and the fit of
// the executor model's constants from their measurements
// (docs/calibration.md). It is pure: the command runs the benchmarks on
// GPUs and hands their times back here.
package calibrate

import (
	"fmt"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/plan/ir"
	"github.com/m2n-project/m2n/plan/program"
)

// A Bench is one microbenchmark: a schedule and how the executor runs it.
type Bench struct {
	Name      string
	Schedule  *ir.Schedule
	GPUs      int    // 1: loopback on one GPU; 2: NCCL between two GPUs
	Transport string // "copy" or "nccl"
	Graph     bool   // replay as a CUDA graph (copy transport)
	WaveBytes int64  // as --wave-bytes (0: the executor's choice)
	Bytes     int64  // the payload the fit reads: per op, or per group
	Count     int    // ops or groups the fit divides by
	What      string // what it measures, for the report
}

// Sample is what the executor measured of one bench.
type Sample struct {
	Times     []units.Time // timed iterations, sorted ascending
	HostIssue units.Time   // the host's time to issue one iteration (median)
	Groups    int          // NCCL groups an iteration issued
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

// BoxCases are the pack classes' representative boxes (docs/native.md):
// the paper layer's pack box, rows of 128 bytes, and rows off 16-byte
// alignment.
func BoxCases() []BoxCase {
	return []BoxCase{
		{program.LongRuns, []int64{16, 2048, 7168}, []int64{0, 256, 0}, []int64{16, 256, 7168}, 2},
		{program.ShortRuns, []int64{65536, 4096}, []int64{0, 1024}, []int64{65536, 64}, 2},
		{program.Staged, []int64{32, 1036, 2049}, []int64{0, 259, 0}, []int64{32, 518, 2047}, 2},
	}
}

const (
	pairSmall   = 256 << 10
	copyBytes   = 1 << 30
	launchOps   = 256
	launchBytes = 64 << 10
	streamBytes = 256 << 20
	opsCount    = 64
	opsBytes    = 256 << 10
	allBytes    = 256 << 20
)

// PairSizes are the sizes of the one-pair sweep.
var PairSizes = []int64{pairSmall, 4 << 20, 64 << 20, 512 << 20}

// StreamWaves are the per-group sizes of the group streams.
var StreamWaves = []int64{1 << 20, 8 << 20}

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
	if err := add(Bench{Name: "copy", GPUs: 1, Transport: "copy", Bytes: copyBytes, Count: 1,
		What: "one device copy of 1 GiB: memory bandwidth"}, []ir.Tensor{tensor("w", copyBytes, 0, 0)}, copyBytes); err != nil {
		return nil, err
	}
	if err := add(Bench{Name: "copy-graph", GPUs: 1, Transport: "copy", Graph: true, Bytes: copyBytes, Count: 1,
		What: "the same in a CUDA graph"}, []ir.Tensor{tensor("w", copyBytes, 0, 0)}, copyBytes); err != nil {
		return nil, err
	}
	var small []ir.Tensor
	for i := range launchOps {
		small = append(small, tensor(fmt.Sprintf("w%d", i), launchBytes, 0, 0))
	}
	if err := add(Bench{Name: "launch-graph", GPUs: 1, Transport: "copy", Graph: true, Bytes: launchBytes, Count: launchOps,
		What: "256 copies of 64 KiB on one stream, as a CUDA graph: a copy's device latency"}, small, launchBytes); err != nil {
		return nil, err
	}
	if err := add(Bench{Name: "launch", GPUs: 1, Transport: "copy", Bytes: launchBytes, Count: launchOps,
		What: "the same, issued op by op: the host's cost of a launch"}, small, launchBytes); err != nil {
		return nil, err
	}
	if gpus < 2 {
		return out, nil
	}
	for _, n := range PairSizes {
		if err := add(Bench{Name: "pair-" + sizeName(n), GPUs: 2, Transport: "nccl", WaveBytes: -1, Bytes: n, Count: 1,
			What: "one NCCL send/recv GPU 0 -> 1: the pair's rate and fixed cost"}, []ir.Tensor{tensor("w", n, 0, 1)}, n); err != nil {
			return nil, err
		}
	}
	if err := add(Bench{Name: "all-pairs", GPUs: 2, Transport: "nccl", WaveBytes: -1, Bytes: allBytes, Count: 1,
		What: "GPU 0 -> 1 and 1 -> 0 at once, 256 MiB each: NCCL's send plus receive rate per GPU"},
		[]ir.Tensor{tensor("a", allBytes, 0, 1), tensor("b", allBytes, 1, 0)}, allBytes); err != nil {
		return nil, err
	}
	if err := add(Bench{Name: "peer-all-pairs", GPUs: 2, Transport: "copy", Bytes: allBytes, Count: 1,
		What: "the same as device copies over NVLink: NVLink per direction, both busy"},
		[]ir.Tensor{tensor("a", allBytes, 0, 1), tensor("b", allBytes, 1, 0)}, allBytes); err != nil {
		return nil, err
	}
	for _, w := range StreamWaves {
		if err := add(Bench{Name: "groups-" + sizeName(w), GPUs: 2, Transport: "nccl", WaveBytes: w, Bytes: w, Count: int(streamBytes / w),
			What: "256 MiB GPU 0 -> 1 in one NCCL group per chunk: a group's cost"}, []ir.Tensor{tensor("w", streamBytes, 0, 1)}, w); err != nil {
			return nil, err
		}
	}
	var many []ir.Tensor
	for i := range opsCount {
		many = append(many, tensor(fmt.Sprintf("w%d", i), opsBytes, 0, 1))
	}
	if err := add(Bench{Name: "ops", GPUs: 2, Transport: "nccl", WaveBytes: -1, Bytes: opsBytes, Count: opsCount,
		What: "64 send/recvs of 256 KiB GPU 0 -> 1 in one group: an op's cost"}, many, opsBytes); err != nil {
		return nil, err
	}
	return out, nil
}

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
