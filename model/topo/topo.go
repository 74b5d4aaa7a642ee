// Package topo models the machines a schedule runs on: NVLink domains of
// GPUs, each GPU with NVLink egress and ingress, NICs, and local memory
// bandwidth; domains joined by a network fabric; and where each global rank
// runs.
//
// Every rate is per direction unless named otherwise. A topology carries two
// sets of rates: line rates (the hardware's signalling rate, what the
// speed-of-light bound uses) and achievable rates (what software reaches,
// what the simulator uses by default). Presets fill both, with sources in
// docs/topology.md; a scenario may override any constant.
package topo

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/m2n-project/m2n/model/units"
)

// Topology is a cluster of identical GPUs in NVLink domains.
type Topology struct {
	Preset        string // preset name it started from, or "" for none
	Domains       int    // number of NVLink domains
	GPUsPerDomain int    // GPUs in each domain

	NVLinkLine units.Bandwidth // NVLink line rate per GPU per direction
	NVLink     units.Bandwidth // achievable NVLink rate per GPU per direction
	NICsPerGPU int             // network interfaces per GPU
	NICLine    units.Bandwidth // NIC line rate per direction
	NIC        units.Bandwidth // achievable NIC rate per direction
	// Memory is the achievable local memory bandwidth per GPU, counting bytes
	// read plus bytes written (a copy of n bytes moves 2n).
	Memory units.Bandwidth
	// GPUMemoryBytes is each GPU's memory capacity (HBM) in bytes; 0:
	// unknown. The planner's memory per GPU is checked against it.
	GPUMemoryBytes int64
	// Oversubscription is the network fabric's ratio of injection to
	// bisection bandwidth; 1 (or 0) is non-blocking. Above 1, each domain's
	// uplink to the fabric carries at most (its NICs' rate) / Oversubscription.
	Oversubscription float64

	// Per-operation start latencies by path class.
	LatencyNVLink units.Time // a transfer between GPUs of one domain
	LatencyNet    units.Time // a transfer between domains
	LatencyLocal  units.Time // a copy, pack or unpack on one GPU (a kernel or copy launch)

	// Executor holds the GPU executor's costs, measured; zero for a
	// topology from the literature (the network model alone).
	Executor Executor

	// RankGPU maps a global rank to its GPU index; ranks absent from it run
	// on the GPU of the same number. GPU g is in domain g / GPUsPerDomain.
	RankGPU map[int]int
}

// GPUs is the number of GPUs in the cluster.
func (t *Topology) GPUs() int { return t.Domains * t.GPUsPerDomain }

// GPU returns the GPU index of a global rank.
func (t *Topology) GPU(rank int) int {
	if g, ok := t.RankGPU[rank]; ok {
		return g
	}
	return rank
}

// Domain returns the NVLink domain of a global rank.
func (t *Topology) Domain(rank int) int { return t.GPU(rank) / t.GPUsPerDomain }

// SameDomain reports whether two ranks share an NVLink domain.
func (t *Topology) SameDomain(a, b int) bool { return t.Domain(a) == t.Domain(b) }

// Validate checks every constant and reports all problems.
func (t *Topology) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s = %d: must be positive", name, v))
		}
	}
	bw := func(name string, v units.Bandwidth) {
		if !(v > 0) || math.IsInf(float64(v), 0) {
			errs = append(errs, fmt.Errorf("%s = %v: must be positive and finite", name, v))
		}
	}
	lat := func(name string, v units.Time) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s = %v: must not be negative", name, v))
		}
	}
	pos("domains", t.Domains)
	pos("gpus_per_domain", t.GPUsPerDomain)
	pos("nics_per_gpu", t.NICsPerGPU)
	bw("nvlink", t.NVLink)
	bw("nvlink_line", t.NVLinkLine)
	bw("nic", t.NIC)
	bw("nic_line", t.NICLine)
	bw("memory", t.Memory)
	lat("latency_nvlink", t.LatencyNVLink)
	lat("latency_net", t.LatencyNet)
	lat("latency_local", t.LatencyLocal)
	errs = append(errs, t.Executor.validate()...)
	if t.Oversubscription < 0 {
		errs = append(errs, fmt.Errorf("oversubscription = %v: must be at least 1 (or 0 for non-blocking)", t.Oversubscription))
	} else if t.Oversubscription > 0 && t.Oversubscription < 1 {
		errs = append(errs, fmt.Errorf("oversubscription = %v: must be at least 1 (or 0 for non-blocking)", t.Oversubscription))
	}
	if len(errs) == 0 {
		gpuRank := map[int]int{}
		for _, r := range sortedKeys(t.RankGPU) {
			g := t.RankGPU[r]
			if g < 0 || g >= t.GPUs() {
				errs = append(errs, fmt.Errorf("rank %d placed on GPU %d, outside the %d GPUs of %d domains x %d", r, g, t.GPUs(), t.Domains, t.GPUsPerDomain))
			}
			if o, dup := gpuRank[g]; dup {
				errs = append(errs, fmt.Errorf("ranks %d and %d are both placed on GPU %d", o, r, g))
			}
			gpuRank[g] = r
		}
	}
	return errors.Join(errs...)
}

// CheckRanks verifies that every rank runs on a GPU of the topology and that
// no two distinct ranks share a GPU.
func (t *Topology) CheckRanks(ranks []int) error {
	// GPU numbers are below GPUs(), checked first: a table of them finds a
	// shared GPU in linear time.
	sorted := append([]int(nil), ranks...)
	sort.Ints(sorted)
	sorted = slices.Compact(sorted)
	for _, r := range sorted {
		if g := t.GPU(r); g < 0 || g >= t.GPUs() {
			return fmt.Errorf("rank %d runs on GPU %d, but the topology has %d GPUs (%d domains x %d); add domains or place the rank", r, g, t.GPUs(), t.Domains, t.GPUsPerDomain)
		}
	}
	if len(sorted) < t.GPUs()/8 {
		m := make(map[int]int, len(sorted))
		for _, r := range sorted {
			g := t.GPU(r)
			if o, dup := m[g]; dup {
				return fmt.Errorf("ranks %d and %d both run on GPU %d", o, r, g)
			}
			m[g] = r
		}
		return nil
	}
	seen := make([]int32, t.GPUs()) // rank+1 of the GPU's first rank
	for _, r := range sorted {
		g := t.GPU(r)
		if o := seen[g]; o != 0 {
			return fmt.Errorf("ranks %d and %d both run on GPU %d", o-1, r, g)
		}
		seen[g] = int32(r) + 1
	}
	return nil
}

// Clone returns a deep copy.
func (t *Topology) Clone() *Topology {
	c := *t
	if t.RankGPU != nil {
		c.RankGPU = make(map[int]int, len(t.RankGPU))
		for k, v := range t.RankGPU {
			c.RankGPU[k] = v
		}
	}
	return &c
}

// Ideal returns a copy that runs at line rates with zero latencies: the
// conditions of the speed-of-light bound.
func (t *Topology) Ideal() *Topology {
	c := t.Clone()
	c.NVLink, c.NIC = c.NVLinkLine, c.NICLine
	c.LatencyNVLink, c.LatencyNet, c.LatencyLocal = 0, 0, 0
	c.Executor = Executor{}
	return c
}

// Describe writes the constants, one per line, for reports.
func (t *Topology) Describe() string {
	var b strings.Builder
	name := t.Preset
	if name == "" {
		name = "custom"
	}
	fmt.Fprintf(&b, "preset %s: %d domains x %d GPUs\n", name, t.Domains, t.GPUsPerDomain)
	fmt.Fprintf(&b, "NVLink per GPU per direction: %v achievable, %v line\n", t.NVLink, t.NVLinkLine)
	fmt.Fprintf(&b, "NIC: %d per GPU, %v achievable, %v line, per direction\n", t.NICsPerGPU, t.NIC, t.NICLine)
	fmt.Fprintf(&b, "memory per GPU (read+write): %v\n", t.Memory)
	over := "non-blocking"
	if t.Oversubscription > 1 {
		over = fmt.Sprintf("%g:1 oversubscribed", t.Oversubscription)
	}
	fmt.Fprintf(&b, "fabric: %s\n", over)
	fmt.Fprintf(&b, "op start latency: NVLink %v, network %v, local %v\n", t.LatencyNVLink, t.LatencyNet, t.LatencyLocal)
	if e := &t.Executor; !e.IsZero() {
		gen := ""
		if e.QuantizeGeneric > 0 {
			gen = fmt.Sprintf(" (the generic kernel at %.2f)", e.QuantizeGeneric)
		}
		if e.QuantizeRows > 0 {
			gen += fmt.Sprintf(" (the row kernel at %.2f)", e.QuantizeRows)
		}
		if e.QuantizeSplit > 0 {
			gen += fmt.Sprintf(" (the split kernels at %.2f)", e.QuantizeSplit)
		}
		beside := ""
		if e.CopyShared > 0 || e.NCCLBeside > 0 || e.NCCLBesideBatch > 0 {
			beside = fmt.Sprintf(", a local copy beside NCCL at %.2f of memory; NCCL at %.2f of its rate beside it, %.2f beside a batch of box copies", e.CopyShared, e.NCCLBeside, e.NCCLBesideBatch)
		}
		fmt.Fprintf(&b, "executor: pack/unpack at %.2f/%.2f/%.2f of memory (long/short/staged rows), quantize at %.2f%s, a batch beside NCCL at %.2f of its rate%s\n", e.PackLong, e.PackShort, e.PackStage, e.Quantize, gen, e.BatchShared, beside)
		for l, c := range e.Costs {
			fmt.Fprintf(&b, "executor, %s: pair %v, duplex %v (+ start %v), copies %v, send/recv %v (+ ramp %v), group %v, start %v, box kernel %v; host: group %v, send/recv %v, launch %v, event %v\n",
				Launch(l), c.PairRate, c.DuplexRate, c.DuplexStart, c.CopyRate, c.XferLatency, c.Ramp, c.GroupLatency, c.StartLatency, c.BoxLatency, c.HostGroup, c.HostXfer, c.HostLaunch, c.HostEvent)
		}
	}
	return b.String()
}

func sortedKeys(m map[int]int) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

// Launch is how the GPU executor's processes are laid out: one process for
// every GPU of the host, or one process per GPU under a launcher (torchrun,
// srun, mpirun). The host costs differ between the two.
type Launch int

const (
	OneProcess Launch = iota
	PerGPU
)

// String is the launch mode's name in presets and records.
func (l Launch) String() string {
	if l == PerGPU {
		return "per-gpu"
	}
	return "one-process"
}

// Executor is what m2n's GPU executor pays beyond the bytes, as `m2n
// calibrate` measures it (docs/calibration.md). All zero — every preset
// from the literature — means the simulator models the network alone, as
// the paper does; set, it simulates the executor's program of the schedule
// (program): its streams, NCCL groups and merged transfers, and these
// costs.
type Executor struct {
	// Pack efficiencies: the rate of a pack, unpack or box copy as a
	// fraction of Memory, by the kernel's class: long 16-byte-aligned runs
	// (at least 4 KiB), short aligned runs, and rows off 16-byte alignment
	// (staged).
	PackLong, PackShort, PackStage float64
	// Quantize is the quantize kernel's rate (bytes read plus written:
	// source, fp8 and scales) as a fraction of Memory; 0 means 1.
	Quantize float64
	// QuantizeGeneric is the same for the generic quantize kernel (any
	// block shape but whole-width 128 x 128 blocks of 16-bit sources, such
	// as per-channel scales; program.QuantKernelOf); 0 means Quantize's.
	QuantizeGeneric float64
	// QuantizeRows is the same for the row kernels (blocks of one row of
	// 16-bit sources in vectors: per-channel scales; program.QuantRows); 0
	// means Quantize's.
	QuantizeRows float64
	// QuantizeSplit is the same for the split kernels' pair (blocks of
	// 32,768 elements or more of 16-bit sources: per-tensor scales;
	// program.QuantSplit), its bytes counted once though it reads its
	// source twice; 0 means Quantize's with the second read counted.
	QuantizeSplit float64
	// BatchShared is the rate of a batch kernel of box copies on the grid
	// it is left beside NCCL kernels (waves mode), as a fraction of the
	// same batch on the whole GPU; 0 means 1.
	BatchShared float64
	// CopyShared is the rate of a contiguous local copy on the few thread
	// blocks it is given beside NCCL kernels (waves mode: a colocated
	// rank's own shard, copied by the long-run copy kernel), as a fraction
	// of Memory; 0 means 1.
	CopyShared float64
	// NCCLBeside is the share of their own rate NCCL's transfers keep on
	// a GPU while such a copy runs there beside them (waves mode): the
	// model holds the GPU's NCCL channels and ports at that share of their
	// capacity while it runs. Batch kernels are not counted (not measured
	// beside NCCL). 0 means 1 (not slowed).
	NCCLBeside float64
	// NCCLBesideBatch is the same share beside a batch kernel of box
	// copies (packs, unpacks, strided copies) on its shared grid; batches
	// of contiguous copies are not counted (held out, moe-2gpu's left NCCL
	// at its rate). 0 means 1.
	NCCLBesideBatch float64
	// Costs by launch mode, indexed by Launch.
	Costs [2]ExecCosts
}

// ExecCosts are the executor's fixed costs in one launch mode.
type ExecCosts struct {
	// PairRate caps the rate of one NCCL send/recv (one pair, one
	// direction); 0 means no cap beyond the links.
	PairRate units.Bandwidth
	// DuplexRate is the most NCCL bytes one GPU sends plus receives per
	// second: its channels serve both directions; 0 means no limit.
	DuplexRate units.Bandwidth
	// DuplexStart is the device time an NCCL group's kernel costs on a GPU
	// that both sends and receives in it, beyond GroupLatency: where its
	// two directions' bytes start flowing at DuplexRate (the intercept of
	// the duplex rate's fit over two sizes).
	DuplexStart units.Time
	// DuplexStartSmall is the same start for a group of DuplexStartSmallBytes
	// each way on the GPU (DuplexStart is a group of DuplexStartBytes'); in
	// between the start goes linearly in log size, and it is held beyond
	// either.
	DuplexStartSmall units.Time
	// DuplexOpLatency and DuplexOpRate are what each NCCL send/recv after
	// the first from a GPU to one peer in a group costs beyond the rest of
	// the model, where that GPU both sends and receives in the group:
	// DuplexOpLatency plus its bytes (up to DuplexOpTop) at DuplexOpRate
	// (0: no bytes term).
	// NCCL moves several send/recvs to a peer each way more slowly than
	// one of their bytes.
	DuplexOpLatency units.Time
	DuplexOpRate    units.Bandwidth
	// CopyRate is the rate of one device copy between two GPUs, per
	// direction with both directions busy, as this launch mode's copies
	// run (peer copies in one process, CUDA IPC between processes); 0
	// means the links' own (NVLink).
	CopyRate units.Bandwidth
	// XferLatency is the device time of one NCCL send/recv before its
	// bytes flow (per merged transfer).
	XferLatency units.Time
	// BoxLatency is the start latency of a box-copy kernel (a pack,
	// unpack or box copy) beyond LatencyLocal, a copy's.
	BoxLatency units.Time
	// StartLatency is the device time the first NCCL transfer on a stream
	// pays once per iteration, before the steady state of a stream of
	// groups.
	StartLatency units.Time
	// Ramp is the extra device time of one NCCL send/recv by its size,
	// beyond XferLatency: points ascending in bytes, interpolated
	// linearly in log2(bytes) and held constant beyond the first and last
	// (NCCL's point-to-point efficiency by message size).
	Ramp []RampPoint
	// GroupLatency is the device time an NCCL group's kernel costs beyond
	// its transfers, per device: a later group on the same stream starts
	// that much after the group's last transfer ends.
	GroupLatency units.Time
	// Host time to issue: one NCCL group (per GPU it spans), one NCCL send
	// or recv call, one kernel or copy launch, and one event record or
	// stream wait (dependencies across streams).
	HostGroup, HostXfer, HostLaunch, HostEvent units.Time
}

// IsZero reports whether no executor constant is set.
func (e *Executor) IsZero() bool {
	for _, c := range e.Costs {
		if !c.IsZero() {
			return false
		}
	}
	return e.PackLong == 0 && e.PackShort == 0 && e.PackStage == 0 && e.Quantize == 0 && e.QuantizeGeneric == 0 && e.QuantizeRows == 0 && e.QuantizeSplit == 0 && e.BatchShared == 0 && e.CopyShared == 0 && e.NCCLBeside == 0 && e.NCCLBesideBatch == 0
}

// IsZero reports whether no cost of the launch mode is set.
func (c *ExecCosts) IsZero() bool {
	return len(c.Ramp) == 0 && c.PairRate == 0 && c.DuplexRate == 0 && c.CopyRate == 0 && c.XferLatency == 0 && c.StartLatency == 0 && c.BoxLatency == 0 && c.DuplexStart == 0 && c.DuplexStartSmall == 0 && c.DuplexOpLatency == 0 && c.DuplexOpRate == 0 &&
		c.GroupLatency == 0 && c.HostGroup == 0 && c.HostXfer == 0 && c.HostLaunch == 0 && c.HostEvent == 0
}

// The sizes each way of calibrate's duplex benches that DuplexStart and
// DuplexStartSmall are measured at.
const (
	DuplexStartBytes      = 256 << 20
	DuplexStartSmallBytes = 16 << 20
)

// DuplexStartAt is the start of a group that moves b bytes each way (the
// more of its sends and its receives) on a GPU that both sends and
// receives in it.
func (c *ExecCosts) DuplexStartAt(b int64) units.Time {
	switch {
	case b >= DuplexStartBytes:
		return c.DuplexStart
	case b <= DuplexStartSmallBytes:
		return c.DuplexStartSmall
	}
	return logLerp(b, RampPoint{DuplexStartSmallBytes, c.DuplexStartSmall}, RampPoint{DuplexStartBytes, c.DuplexStart})
}

// DuplexOpTop is the size from which a send/recv's extra time in a group
// both ways (DuplexOpAt) stops growing: the larger of calibrate's benches
// of it, beyond which nothing measured it (as the ramp is held beyond its
// last point).
const DuplexOpTop = 64 << 20

// DuplexOpAt is the extra time of a send/recv of n bytes after the first
// to its peer in a group that goes both ways on its GPU: DuplexOpLatency
// plus its bytes, up to DuplexOpTop, at DuplexOpRate.
func (c *ExecCosts) DuplexOpAt(n int64) units.Time {
	t := c.DuplexOpLatency
	if c.DuplexOpRate > 0 {
		t += units.Time(math.Round(float64(min(n, DuplexOpTop)) / float64(c.DuplexOpRate) * 1e12))
	}
	return t
}

// RampPoint is the extra time of a send/recv of Bytes.
type RampPoint struct {
	Bytes int64
	Extra units.Time
}

// RampAt is the ramp's extra time for a send/recv of n bytes.
func (c *ExecCosts) RampAt(n int64) units.Time {
	r := c.Ramp
	switch {
	case len(r) == 0:
		return 0
	case n <= r[0].Bytes:
		return r[0].Extra
	case n >= r[len(r)-1].Bytes:
		return r[len(r)-1].Extra
	}
	k := 1
	for r[k].Bytes < n {
		k++
	}
	return logLerp(n, r[k-1], r[k])
}

// logLerp is the time at n bytes on the line from a to b in log2 of the
// size (a.Bytes < n < b.Bytes).
func logLerp(n int64, a, b RampPoint) units.Time {
	f := (math.Log2(float64(n)) - math.Log2(float64(a.Bytes))) / (math.Log2(float64(b.Bytes)) - math.Log2(float64(a.Bytes)))
	return a.Extra + units.Time(math.Round(f*float64(b.Extra-a.Extra)))
}

// validate reports negative or out-of-range constants.
func (e *Executor) validate() []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"executor.pack_long", e.PackLong}, {"executor.pack_short", e.PackShort}, {"executor.pack_stage", e.PackStage}, {"executor.quantize", e.Quantize}, {"executor.quantize_generic", e.QuantizeGeneric}, {"executor.quantize_rows", e.QuantizeRows}, {"executor.quantize_split", e.QuantizeSplit}} {
		if !(f.v >= 0 && f.v <= 1) { // NaN too
			errs = append(errs, fmt.Errorf("%s = %g: must be a fraction of memory bandwidth, in [0, 1] (0: 1)", f.name, f.v))
		}
	}
	if !(e.BatchShared >= 0 && e.BatchShared <= 1) {
		errs = append(errs, fmt.Errorf("executor.batch_shared = %g: must be a fraction of a whole-GPU batch's rate, in [0, 1] (0: 1)", e.BatchShared))
	}
	if !(e.CopyShared >= 0 && e.CopyShared <= 1) {
		errs = append(errs, fmt.Errorf("executor.copy_shared = %g: must be a fraction of memory bandwidth, in [0, 1] (0: 1)", e.CopyShared))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"executor.nccl_beside", e.NCCLBeside}, {"executor.nccl_beside_batch", e.NCCLBesideBatch}} {
		if !(f.v >= 0 && f.v <= 1) {
			errs = append(errs, fmt.Errorf("%s = %g: must be the share of its rate NCCL keeps, in [0, 1] (0: 1)", f.name, f.v))
		}
	}
	for l, c := range e.Costs {
		name := "executor." + strings.ReplaceAll(Launch(l).String(), "-", "_") + "."
		if !(c.PairRate >= 0) || !(c.DuplexRate >= 0) || math.IsInf(float64(c.PairRate), 0) || math.IsInf(float64(c.DuplexRate), 0) {
			errs = append(errs, fmt.Errorf("%spair_rate = %v, duplex_rate = %v: must be finite and not negative", name, c.PairRate, c.DuplexRate))
		}
		if !(c.CopyRate >= 0) || math.IsInf(float64(c.CopyRate), 0) {
			errs = append(errs, fmt.Errorf("%scopy_rate = %v: must be finite and not negative", name, c.CopyRate))
		}
		if !(c.DuplexOpRate >= 0) || math.IsInf(float64(c.DuplexOpRate), 0) {
			errs = append(errs, fmt.Errorf("%sduplex_op_rate = %v: must be finite and not negative", name, c.DuplexOpRate))
		}
		for _, t := range []struct {
			name string
			v    units.Time
		}{{"xfer_latency", c.XferLatency}, {"group_latency", c.GroupLatency}, {"host_group", c.HostGroup}, {"host_xfer", c.HostXfer}, {"host_launch", c.HostLaunch}, {"host_event", c.HostEvent}, {"start_latency", c.StartLatency}, {"box_latency", c.BoxLatency}, {"duplex_start", c.DuplexStart}, {"duplex_start_small", c.DuplexStartSmall}, {"duplex_op_latency", c.DuplexOpLatency}} {
			if t.v < 0 {
				errs = append(errs, fmt.Errorf("%s%s = %v: must not be negative", name, t.name, t.v))
			}
		}
		for k, p := range c.Ramp {
			if p.Bytes <= 0 || k > 0 && p.Bytes <= c.Ramp[k-1].Bytes {
				errs = append(errs, fmt.Errorf("%sramp_bytes[%d] = %d: must be positive and ascending", name, k, p.Bytes))
			}
		}
	}
	return errs
}
