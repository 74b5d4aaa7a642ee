package sim

import (
	"math"
	"slices"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/program"
)

// The executor model's costs, each pinned by the time of a one-op
// schedule against its formula (docs/calibration.md, "The executor
// model"): a change to how the model applies a constant (a rate scaled, a
// cap dropped, a latency counted twice) fails here, where the fit's
// recovery test, which simulates and fits through the same model, would
// not see it.

// machine is a measured two-GPU machine whose caps all bind: NCCL's pair
// rate below the links, the links below memory.
func machine() *topo.Topology {
	t, _ := topo.Preset("hgx-h200")
	t.GPUsPerDomain, t.Domains = 1, 2
	t.Memory, t.NVLink, t.NIC, t.NICLine = units.GBps(4000), units.GBps(400), units.GBps(400), units.GBps(450)
	t.LatencyLocal, t.LatencyNVLink, t.LatencyNet = 1100*units.Nanosecond, 3*units.Microsecond, 3*units.Microsecond
	t.Executor = topo.Executor{PackLong: 0.9, PackShort: 0.7, PackStage: 0.6, Quantize: 0.8}
	t.Executor.Costs[topo.OneProcess] = topo.ExecCosts{PairRate: units.GBps(300), DuplexRate: units.GBps(1000),
		XferLatency: 5 * units.Microsecond, GroupLatency: 7 * units.Microsecond, StartLatency: 11 * units.Microsecond,
		BoxLatency: 2 * units.Microsecond, Ramp: []topo.RampPoint{{Bytes: 8 << 20}, {Bytes: 32 << 20, Extra: 8 * units.Microsecond}}}
	return t
}

// perGPUMachine is machine with the same costs per GPU and a copy rate
// between processes (CUDA IPC) below the link's.
func perGPUMachine() *topo.Topology {
	t := machine()
	t.Executor.Costs[topo.PerGPU] = t.Executor.Costs[topo.OneProcess]
	t.Executor.Costs[topo.PerGPU].CopyRate = units.GBps(350)
	return t
}

func seconds(bytes int64, rate units.Bandwidth) units.Time {
	return units.Time(math.Round(float64(bytes) / float64(rate) * 1e12))
}

// within fails unless got is want to 1 ps a term (the engine rounds each
// event to integer picoseconds).
func within(t *testing.T, what string, got, want units.Time) {
	t.Helper()
	if d := got - want; d < -3 || d > 3 {
		t.Errorf("%s: modeled %v (%d ps), the formula gives %v (%d ps)", what, got, int64(got), want, int64(want))
	}
}

// packOne is one pack of a [rows, cols] bf16 box at column col0 of a
// [rows, full] array on one rank, into contiguous staging.
func packOne(rows, cols, full, col0 int64) *ir.Schedule {
	shape := []int64{rows, full}
	l := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{1}, Ranks: []int{0}}, Placements: []layout.Placement{layout.R}}
	s := &ir.Schedule{World: []ir.Rank{{Rank: 0, GPU: 0, Domain: 0}}, Tensors: []ir.Tensor{{Name: "w", Src: l, Dst: l}}}
	box := layout.Box{Start: []int64{0, 0}, Size: shape}
	n := rows * cols * 2
	s.Buffers = []ir.Buffer{
		{ID: 0, Rank: 0, Kind: ir.Input, Tensor: 0, Box: box, Bytes: rows * full * 2},
		{ID: 1, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: n},
	}
	ref := s.AddBox(layout.Box{Start: []int64{0, col0}, Size: []int64{rows, cols}})
	s.AddOp(ir.Op{Kind: ir.Pack, Rank: 0, Peer: -1, Match: -1, Src: ir.Region{Buf: 0, BoxRef: ref, Bytes: n}, Dst: ir.Region{Buf: 1, Bytes: n}})
	return s
}

// A pack: the copy latency, the box kernel's, and read plus write at its
// class's share of memory.
func TestModelPackFormula(t *testing.T) {
	tp := machine()
	for _, c := range []struct {
		name             string
		rows, cols, full int64
		col0             int64
		eff              float64
	}{
		{"long runs", 64, 4096, 8192, 0, tp.Executor.PackLong},   // 8 KiB rows
		{"short runs", 4096, 64, 8192, 0, tp.Executor.PackShort}, // 128-byte rows
		{"staged", 512, 1001, 4096, 3, tp.Executor.PackStage},    // rows off 16-byte alignment
	} {
		s := packOne(c.rows, c.cols, c.full, c.col0)
		r, err := Run(s, tp, Options{Loopback: true, Exec: Exec{Transport: "copy", Graph: true}})
		if err != nil {
			t.Fatal(err)
		}
		n := 2 * c.rows * c.cols
		want := tp.LatencyLocal + tp.Executor.Costs[topo.OneProcess].BoxLatency + seconds(2*n, units.Bandwidth(c.eff*float64(tp.Memory)))
		within(t, c.name, r.Makespan, want)
	}
}

// Contiguous local copies (byte ranges of staging on one rank): alone,
// each is a copy engine's or the contiguous kernel's and moves read plus
// write at the memory's rate; two of them in one batch are the batch
// kernel's long runs, at pack_long of it together.
func TestModelContiguousCopyFormula(t *testing.T) {
	tp := machine()
	const n = 64 << 20
	s := &ir.Schedule{World: []ir.Rank{{Rank: 0, GPU: 0, Domain: 0}}}
	for i := range 4 {
		s.Buffers = append(s.Buffers, ir.Buffer{ID: i, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: n})
	}
	one := func(src, dst int32) {
		s.AddOp(ir.Op{Kind: ir.Copy, Rank: 0, Peer: -1, Match: -1, Src: ir.Region{Buf: src, Bytes: n}, Dst: ir.Region{Buf: dst, Bytes: n}})
	}
	one(0, 1)
	one(2, 3)
	for _, c := range []struct {
		name    string
		noBatch bool
		want    units.Time
	}{
		// One after the other on their stream, each at the memory's rate.
		{"alone", true, 2 * (tp.LatencyLocal + seconds(2*n, tp.Memory))},
		// One kernel: both at once, sharing pack_long of the memory.
		{"in a batch", false, tp.LatencyLocal + seconds(4*n, units.Bandwidth(tp.Executor.PackLong*float64(tp.Memory)))},
	} {
		r, err := Run(s, tp, Options{Loopback: true, Exec: Exec{Transport: "copy", Graph: true, Lanes: 1, NoBatch: c.noBatch}})
		if err != nil {
			t.Fatal(err)
		}
		within(t, c.name, r.Makespan, c.want)
	}
}

// xfer is one transfer of n bytes from rank 0 (GPU 0) to rank 1 (GPU 1).
func xfer(n int64) *ir.Schedule {
	shape := []int64{n / 2}
	one := func(r int) layout.Layout {
		return layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{1}, Ranks: []int{r}}, Placements: []layout.Placement{layout.R}}
	}
	s := &ir.Schedule{World: []ir.Rank{{Rank: 0, GPU: 0, Domain: 0}, {Rank: 1, GPU: 1, Domain: 1}},
		Tensors: []ir.Tensor{{Name: "w", Src: one(0), Dst: one(1)}}}
	box := layout.Box{Start: []int64{0}, Size: shape}
	s.Buffers = []ir.Buffer{{ID: 0, Rank: 0, Kind: ir.Input, Tensor: 0, Box: box, Bytes: n}, {ID: 1, Rank: 1, Kind: ir.Output, Tensor: 0, Box: box, Bytes: n}}
	snd := s.AddOp(ir.Op{Kind: ir.Send, Rank: 0, Peer: 1, Src: ir.Region{Buf: 0, Bytes: n}})
	rcv := s.AddOp(ir.Op{Kind: ir.Recv, Rank: 1, Peer: 0, Dst: ir.Region{Buf: 1, Bytes: n}})
	s.Ops[snd].Match, s.Ops[rcv].Match = rcv, snd
	return s
}

// One NCCL send/recv: its latency, its size's ramp (in log size between
// the points), the stream's start, the bytes at the pair rate (below the
// link), then the group's barrier.
func TestModelSendRecvFormula(t *testing.T) {
	tp := machine()
	c := tp.Executor.Costs[topo.OneProcess]
	for _, n := range []int64{4 << 20, 16 << 20, 64 << 20} {
		r, err := Run(xfer(n), tp, Options{Exec: Exec{Transport: "nccl"}})
		if err != nil {
			t.Fatal(err)
		}
		want := c.XferLatency + c.RampAt(n) + c.StartLatency + seconds(n, c.PairRate) + c.GroupLatency
		within(t, units.Bytes(n).Human(), r.Makespan, want)
	}
	// 16 MiB lies halfway between 8 and 32 MiB in log size: half the
	// ramp's rise (linear in bytes would give a third).
	if got := c.RampAt(16 << 20); got != 4*units.Microsecond {
		t.Errorf("ramp at 16 MiB: %v, want 4 us", got)
	}
}

// One device copy between GPUs: the NVLink path's latency, then the bytes
// at the link's copy rate: NCCL's pair rate is no cap on a copy.
func TestModelPeerCopyFormula(t *testing.T) {
	tp := machine()
	n := int64(64 << 20)
	r, err := Run(xfer(n), tp, Options{Exec: Exec{Transport: "copy", Graph: true}})
	if err != nil {
		t.Fatal(err)
	}
	within(t, "peer copy", r.Makespan, tp.LatencyNet+seconds(n, tp.NVLink))
}

// The same copy where the launch mode has a copy rate of its own (CUDA
// IPC between processes, below the links): the bytes at that rate; the
// other launch mode, without one, keeps the link's.
func TestModelPeerCopyRateFormula(t *testing.T) {
	tp := perGPUMachine()
	n := int64(64 << 20)
	for _, c := range []struct {
		launch topo.Launch
		rate   units.Bandwidth
	}{{topo.PerGPU, units.GBps(350)}, {topo.OneProcess, tp.NVLink}} {
		r, err := Run(xfer(n), tp, Options{Exec: Exec{Transport: "copy", Graph: true, Launch: c.launch}})
		if err != nil {
			t.Fatal(err)
		}
		within(t, "peer copy, "+c.launch.String(), r.Makespan, tp.LatencyNet+seconds(n, c.rate))
	}
}

// Two packs of one rank on one stream in waves mode are one batch kernel:
// together, the latencies once and their bytes at the class's share of
// memory, and at batch_shared of that where the preset measured it (the
// grid NCCL leaves a batch); a stream of copies (copy transport) is not
// slowed.
func TestModelBatchSharedFormula(t *testing.T) {
	rows, cols, full := int64(64), int64(2048), int64(8192)
	s := packOne(rows, cols, full, 0)
	n := 2 * rows * cols
	s.Buffers = append(s.Buffers, ir.Buffer{ID: 2, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: n})
	ref := s.AddBox(layout.Box{Start: []int64{0, 4096}, Size: []int64{rows, cols}})
	s.AddOp(ir.Op{Kind: ir.Pack, Rank: 0, Peer: -1, Match: -1, Src: ir.Region{Buf: 0, BoxRef: ref, Bytes: n}, Dst: ir.Region{Buf: 2, Bytes: n}})
	for _, c := range []struct {
		name      string
		transport string
		shared    float64
		share     float64
	}{{"waves, not measured", "nccl", 0, 1}, {"waves", "nccl", 0.25, 0.25}, {"copies", "copy", 0.25, 1}} {
		tp := machine()
		tp.Executor.BatchShared = c.shared
		r, err := Run(s, tp, Options{Loopback: true, Exec: Exec{Transport: c.transport, Graph: c.transport == "copy"}})
		if err != nil {
			t.Fatal(err)
		}
		want := tp.LatencyLocal + tp.Executor.Costs[topo.OneProcess].BoxLatency + seconds(2*2*n, units.Bandwidth(c.share*tp.Executor.PackLong*float64(tp.Memory)))
		within(t, c.name, r.Makespan, want)
	}
}

// A copy between processes that its receiver cannot pull (the sender's
// staging, written by a pack) is pushed by the sender (CUDA IPC per GPU):
// the pack, the copy at the launch mode's copy rate, and the receiver's
// flag wait, a kernel; pulled in one process, no flag wait.
func TestModelPushedCopyFormula(t *testing.T) {
	n := int64(64 << 20)
	s := xfer(n)
	s.Ops, s.DepPool = nil, nil
	s.Buffers = append(s.Buffers, ir.Buffer{ID: 2, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: n})
	pk := s.AddOp(ir.Op{Kind: ir.Copy, Rank: 0, Peer: -1, Match: -1, Src: ir.Region{Buf: 0, Bytes: n}, Dst: ir.Region{Buf: 2, Bytes: n}})
	snd := s.AddOp(ir.Op{Kind: ir.Send, Rank: 0, Peer: 1, Src: ir.Region{Buf: 2, Bytes: n}}, pk)
	rcv := s.AddOp(ir.Op{Kind: ir.Recv, Rank: 1, Peer: 0, Dst: ir.Region{Buf: 1, Bytes: n}})
	s.Ops[snd].Match, s.Ops[rcv].Match = rcv, snd
	tp := perGPUMachine()
	local := tp.LatencyLocal + seconds(2*n, tp.Memory)
	for _, c := range []struct {
		launch topo.Launch
		rate   units.Bandwidth
		flag   units.Time
	}{{topo.PerGPU, units.GBps(350), tp.LatencyLocal + tp.Executor.Costs[topo.PerGPU].BoxLatency}, {topo.OneProcess, tp.NVLink, 0}} {
		r, err := Run(s, tp, Options{Exec: Exec{Transport: "copy", Graph: true, Launch: c.launch}})
		if err != nil {
			t.Fatal(err)
		}
		within(t, "pushed copy, "+c.launch.String(), r.Makespan, local+tp.LatencyNet+seconds(n, c.rate)+c.flag)
	}
}

// A pushed copy whose receive waits for work of its receiver (staging it
// frees, here a local copy): the receiver's flag stream sets a ready flag
// after that work, a kernel on the sender's stream waits for it, then the
// copy and the receiving end; in one process the receiver's copy simply
// waits for both sides.
func TestModelPushedCopyWaitsForReceiver(t *testing.T) {
	n := int64(64 << 20)
	s := xfer(n)
	s.Ops, s.DepPool = nil, nil
	s.Buffers = append(s.Buffers,
		ir.Buffer{ID: 2, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: n},
		ir.Buffer{ID: 3, Rank: 1, Kind: ir.Staging, Tensor: -1, Bytes: n},
		ir.Buffer{ID: 4, Rank: 1, Kind: ir.Staging, Tensor: -1, Bytes: n})
	pk := s.AddOp(ir.Op{Kind: ir.Copy, Rank: 0, Peer: -1, Match: -1, Src: ir.Region{Buf: 0, Bytes: n}, Dst: ir.Region{Buf: 2, Bytes: n}})
	free := s.AddOp(ir.Op{Kind: ir.Copy, Rank: 1, Peer: -1, Match: -1, Src: ir.Region{Buf: 3, Bytes: n}, Dst: ir.Region{Buf: 4, Bytes: n}})
	snd := s.AddOp(ir.Op{Kind: ir.Send, Rank: 0, Peer: 1, Src: ir.Region{Buf: 2, Bytes: n}}, pk)
	rcv := s.AddOp(ir.Op{Kind: ir.Recv, Rank: 1, Peer: 0, Dst: ir.Region{Buf: 1, Bytes: n}}, free)
	s.Ops[snd].Match, s.Ops[rcv].Match = rcv, snd
	tp := perGPUMachine()
	local := tp.LatencyLocal + seconds(2*n, tp.Memory)
	kernel := tp.LatencyLocal + tp.Executor.Costs[topo.PerGPU].BoxLatency
	for _, c := range []struct {
		launch topo.Launch
		want   units.Time
	}{
		{topo.PerGPU, local + kernel + tp.LatencyNet + seconds(n, units.GBps(350)) + kernel},
		{topo.OneProcess, local + tp.LatencyNet + seconds(n, tp.NVLink)},
	} {
		r, err := Run(s, tp, Options{Exec: Exec{Transport: "copy", Graph: true, Launch: c.launch}})
		if err != nil {
			t.Fatal(err)
		}
		within(t, "pushed copy waiting for its receiver, "+c.launch.String(), r.Makespan, c.want)
	}
}

// A quantize runs at the rate of the kernel the executor picks for it
// (program.QuantKernelOf): whole-width 128 x 128 blocks of bf16 at
// quantize of memory, per-channel scales (the generic kernel) at
// quantize_generic, and at quantize where the preset has no generic rate;
// per-channel scales (the row kernels) at quantize_rows, or at quantize;
// per tensor (the split kernels) at quantize, reading the source twice,
// with a second kernel's start. Its bytes: the source read, fp8 and
// scales written.
func TestModelQuantizeKernelFormula(t *testing.T) {
	mesh := layout.Mesh{Shape: []int{1}, Ranks: []int{0}}
	for _, c := range []struct {
		name    string
		q       layout.Quant
		generic float64
		rate    float64
		split   bool
	}{
		{"128 x 128", layout.Quant{Scheme: layout.QuantBlock, Block: [2]int64{128, 128}}, 0.2, 0.8, false},
		{"per channel (the row kernels), no rows rate", layout.Quant{Scheme: layout.QuantChannel}, 0.2, 0.8, false},
		{"per channel (the row kernels)", layout.Quant{Scheme: layout.QuantChannel}, 0.2, 0.5, false},
		{"1 x 20 blocks (the generic kernel, off 16-byte vectors)", layout.Quant{Scheme: layout.QuantBlock, Block: [2]int64{1, 20}}, 0.2, 0.2, false},
		{"8 x 8 blocks (the generic kernel)", layout.Quant{Scheme: layout.QuantBlock, Block: [2]int64{8, 8}}, 0.2, 0.2, false},
		{"8 x 8 blocks, no generic rate", layout.Quant{Scheme: layout.QuantBlock, Block: [2]int64{8, 8}}, 0, 0.8, false},
		{"per tensor", layout.Quant{Scheme: layout.QuantTensor}, 0.2, 0.8, true},
		{"per tensor at quantize_split", layout.Quant{Scheme: layout.QuantTensor}, 0.2, 0.35, true},
	} {
		shape := []int64{1024, 4096}
		src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: mesh, Placements: []layout.Placement{layout.R}}
		dst := src
		dst.DType = layout.FP8E4M3
		tp := machine()
		tp.Executor.QuantizeGeneric = c.generic
		if c.name == "per channel (the row kernels)" {
			tp.Executor.QuantizeRows = 0.5
		}
		if c.name == "per tensor at quantize_split" {
			tp.Executor.QuantizeSplit = 0.35
		}
		s, err := plan.Build([]ir.Tensor{{Name: "w", Src: src, Dst: dst, Quant: c.q}}, tp, plan.Options{Route: plan.Flat, ChunkBytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Ops) != 1 || s.Ops[0].Kind != ir.Quantize {
			t.Fatalf("%s: want one quantize, got %d ops", c.name, len(s.Ops))
		}
		br, bc := c.q.Blocks(shape)
		n := shape[0] * shape[1]
		bytes := 2*n + n + 4*((shape[0]+br-1)/br)*((shape[1]+bc-1)/bc)
		r, err := Run(s, tp, Options{Loopback: true, Exec: Exec{Transport: "copy", Graph: true}})
		if err != nil {
			t.Fatal(err)
		}
		want := tp.LatencyLocal + seconds(bytes, units.Bandwidth(c.rate*float64(tp.Memory)))
		if c.split {
			read := 2 * n // the second read of the source, where unmeasured
			if tp.Executor.QuantizeSplit > 0 {
				read = 0 // counted in quantize_split
			}
			want = 2*tp.LatencyLocal + tp.Executor.Costs[topo.OneProcess].BoxLatency + seconds(bytes+read, units.Bandwidth(c.rate*float64(tp.Memory)))
		}
		within(t, c.name, r.Makespan, want)
	}
}

// NCCL beside a kernel: one send/recv while a long contiguous copy runs on
// the sender's GPU on its few blocks (waves mode). The copy moves at
// copy_shared of memory; while it runs, the GPU's NCCL channels and ports
// are at nccl_beside of their capacity, so the send/recv runs at that
// share of the NIC port (below its pair cap), and its group ends that
// much later. Without the constants neither is slowed.
func TestModelNCCLBesideFormula(t *testing.T) {
	const n, m = int64(64 << 20), int64(256 << 20)
	s := xfer(n)
	s.Buffers = append(s.Buffers, ir.Buffer{ID: 2, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: m}, ir.Buffer{ID: 3, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: m})
	s.AddOp(ir.Op{Kind: ir.Copy, Rank: 0, Peer: -1, Match: -1, Src: ir.Region{Buf: 2, Bytes: m}, Dst: ir.Region{Buf: 3, Bytes: m}})
	for _, c := range []struct {
		name          string
		shared, share float64
		rate          func(tp *topo.Topology) units.Bandwidth // the send/recv's
	}{
		{"not measured", 0, 0, func(tp *topo.Topology) units.Bandwidth { return tp.Executor.Costs[topo.OneProcess].PairRate }},
		{"measured", 0.25, 0.5, func(tp *topo.Topology) units.Bandwidth { return tp.NIC / 2 }},
	} {
		tp := machine()
		tp.Executor.CopyShared, tp.Executor.NCCLBeside = c.shared, c.share
		r, err := Run(s, tp, Options{Exec: Exec{Transport: "nccl"}, GroupEnds: true})
		if err != nil {
			t.Fatal(err)
		}
		x := tp.Executor.Costs[topo.OneProcess]
		group := x.XferLatency + x.RampAt(n) + x.StartLatency + seconds(n, c.rate(tp)) + x.GroupLatency
		within(t, c.name+": the group's end", r.GroupEnds[0], group)
		copyRate := tp.Memory / 2
		if c.shared > 0 {
			copyRate = units.Bandwidth(c.shared * float64(tp.Memory) / 2)
		}
		within(t, c.name+": the makespan", r.Makespan, max(group, tp.LatencyLocal+seconds(m, copyRate)))
	}
}

// When the copy ends before the send/recv, NCCL gets its capacity back:
// the bytes moved beside the copy at the shared rate, the rest at the
// pair's own.
func TestModelNCCLBesideEnds(t *testing.T) {
	const n, m = int64(64 << 20), int64(16 << 20)
	s := xfer(n)
	s.Buffers = append(s.Buffers, ir.Buffer{ID: 2, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: m}, ir.Buffer{ID: 3, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: m})
	s.AddOp(ir.Op{Kind: ir.Copy, Rank: 0, Peer: -1, Match: -1, Src: ir.Region{Buf: 2, Bytes: m}, Dst: ir.Region{Buf: 3, Bytes: m}})
	tp := machine()
	tp.Executor.CopyShared, tp.Executor.NCCLBeside = 0.25, 0.5
	r, err := Run(s, tp, Options{Exec: Exec{Transport: "nccl"}, GroupEnds: true})
	if err != nil {
		t.Fatal(err)
	}
	x := tp.Executor.Costs[topo.OneProcess]
	start := x.XferLatency + x.RampAt(n) + x.StartLatency
	copyEnd := tp.LatencyLocal + seconds(m, units.Bandwidth(0.25*float64(tp.Memory)/2))
	if copyEnd <= start {
		t.Fatalf("the copy ends at %v, before the send/recv starts (%v)", copyEnd, start)
	}
	shared := tp.NIC / 2
	moved := int64(math.Round(float64(copyEnd-start) * 1e-12 * float64(shared)))
	group := copyEnd + seconds(n-moved, x.PairRate) + x.GroupLatency
	if d := r.GroupEnds[0] - group; d < -1000 || d > 1000 {
		t.Errorf("the group ends at %v, the formula gives %v (within 1 ns)", r.GroupEnds[0], group)
	}
}

// A group that carries both directions on a GPU costs its start more
// there: duplex_start_small at 16 MiB each way, duplex_start at 256 MiB,
// linearly in log size between (64 MiB: halfway); one direction alone
// costs nothing more.
func TestModelDuplexStart(t *testing.T) {
	for _, c := range []struct {
		n    int64
		back bool
		more units.Time
	}{
		{16 << 20, false, 0}, {16 << 20, true, 10 * units.Microsecond}, {64 << 20, true, 30 * units.Microsecond},
		{256 << 20, true, 50 * units.Microsecond}, {1 << 30, true, 50 * units.Microsecond}, {256 << 20, false, 0},
	} {
		s := xfer(c.n)
		if c.back {
			s.Buffers = append(s.Buffers, ir.Buffer{ID: 2, Rank: 1, Kind: ir.Staging, Tensor: -1, Bytes: c.n}, ir.Buffer{ID: 3, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: c.n})
			snd := s.AddOp(ir.Op{Kind: ir.Send, Rank: 1, Peer: 0, Src: ir.Region{Buf: 2, Bytes: c.n}})
			rcv := s.AddOp(ir.Op{Kind: ir.Recv, Rank: 0, Peer: 1, Dst: ir.Region{Buf: 3, Bytes: c.n}})
			s.Ops[snd].Match, s.Ops[rcv].Match = rcv, snd
		}
		var span [2]units.Time
		for i, on := range []bool{false, true} {
			tp := machine()
			x := tp.Executor.Costs[topo.OneProcess]
			if on {
				x.DuplexStart, x.DuplexStartSmall = 50*units.Microsecond, 10*units.Microsecond
			}
			tp.Executor.Costs[topo.OneProcess] = x
			r, err := Run(s, tp, Options{Exec: Exec{Transport: "nccl"}})
			if err != nil {
				t.Fatal(err)
			}
			span[i] = r.Makespan
		}
		if got := span[1] - span[0]; got != c.more {
			t.Errorf("%s, both ways %v: the group's start costs %v more, want %v", units.Bytes(c.n).Human(), c.back, got, c.more)
		}
	}
}

// A send/recv after the first to its peer in a group that goes both ways
// on its GPU starts duplex_op_latency plus its bytes at duplex_op_rate
// later; in a group one way it does not.
func TestModelDuplexOps(t *testing.T) {
	const n = int64(8 << 20)
	build := func(back bool) *ir.Schedule {
		s := xfer(n)
		s.Buffers = append(s.Buffers, ir.Buffer{ID: 2, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: n}, ir.Buffer{ID: 3, Rank: 1, Kind: ir.Staging, Tensor: -1, Bytes: n})
		snd := s.AddOp(ir.Op{Kind: ir.Send, Rank: 0, Peer: 1, Src: ir.Region{Buf: 2, Bytes: n}})
		rcv := s.AddOp(ir.Op{Kind: ir.Recv, Rank: 1, Peer: 0, Dst: ir.Region{Buf: 3, Bytes: n}})
		s.Ops[snd].Match, s.Ops[rcv].Match = rcv, snd
		if back { // one byte the other way: the group goes both ways
			s.Buffers = append(s.Buffers, ir.Buffer{ID: 4, Rank: 1, Kind: ir.Staging, Tensor: -1, Bytes: 1}, ir.Buffer{ID: 5, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: 1})
			snd := s.AddOp(ir.Op{Kind: ir.Send, Rank: 1, Peer: 0, Src: ir.Region{Buf: 4, Bytes: 1}})
			rcv := s.AddOp(ir.Op{Kind: ir.Recv, Rank: 0, Peer: 1, Dst: ir.Region{Buf: 5, Bytes: 1}})
			s.Ops[snd].Match, s.Ops[rcv].Match = rcv, snd
		}
		return s
	}
	for _, c := range []struct {
		name string
		back bool
	}{{"one way", false}, {"both ways", true}} {
		var span [2]units.Time
		tp := machine()
		for i, on := range []bool{false, true} {
			x := tp.Executor.Costs[topo.OneProcess]
			x.DuplexOpLatency, x.DuplexOpRate = 0, 0
			if on {
				x.DuplexOpLatency, x.DuplexOpRate = 13*units.Microsecond, units.GBps(2000)
			}
			tp.Executor.Costs[topo.OneProcess] = x
			r, err := Run(build(c.back), tp, Options{Exec: Exec{Transport: "nccl"}})
			if err != nil {
				t.Fatal(err)
			}
			span[i] = r.Makespan
		}
		want := units.Time(0)
		if c.back {
			want = 13*units.Microsecond + seconds(n, units.GBps(2000))
		}
		if got := span[1] - span[0]; got != want {
			t.Errorf("%s: the second send/recv costs %v more, want %v", c.name, got, want)
		}
	}
}

// A batch of box copies (two packs) beside a send/recv on its GPU holds
// NCCL there at nccl_beside_batch while it runs: the send/recv, which it
// outlasts, moves at that share of the NIC port.
func TestModelNCCLBesideBatch(t *testing.T) {
	const n = int64(16 << 20)
	rows, cols, full := int64(8192), int64(2048), int64(8192) // 32 MiB a pack, 4 KiB rows
	s := xfer(n)
	l := layout.Layout{Shape: []int64{rows, full}, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{1}, Ranks: []int{0}}, Placements: []layout.Placement{layout.R}}
	s.Tensors = append(s.Tensors, ir.Tensor{Name: "p", Src: l, Dst: l})
	pb := rows * cols * 2
	s.Buffers = append(s.Buffers,
		ir.Buffer{ID: 2, Rank: 0, Kind: ir.Input, Tensor: 1, Box: layout.Box{Start: []int64{0, 0}, Size: []int64{rows, full}}, Bytes: rows * full * 2},
		ir.Buffer{ID: 3, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: pb}, ir.Buffer{ID: 4, Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: pb})
	for k, col := range []int64{0, 4096} {
		ref := s.AddBox(layout.Box{Start: []int64{0, col}, Size: []int64{rows, cols}})
		s.AddOp(ir.Op{Kind: ir.Pack, Rank: 0, Peer: -1, Match: -1, Src: ir.Region{Buf: 2, BoxRef: ref, Bytes: pb}, Dst: ir.Region{Buf: int32(3 + k), Bytes: pb}})
	}
	var ends [2]units.Time
	for i, share := range []float64{0, 0.5} {
		tp := machine()
		tp.Executor.BatchShared, tp.Executor.NCCLBesideBatch = 0.05, share // a slow batch: it outlasts the send/recv
		r, err := Run(s, tp, Options{Exec: Exec{Transport: "nccl"}, GroupEnds: true})
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = r.GroupEnds[0]
	}
	x := machine().Executor.Costs[topo.OneProcess]
	rest := x.XferLatency + x.RampAt(n) + x.StartLatency + x.GroupLatency
	within(t, "alone", ends[0], rest+seconds(n, x.PairRate))
	within(t, "beside the batch", ends[1], rest+seconds(n, machine().NIC/2))
}

// A batch of contiguous copies beside the send/recv does not slow it:
// nccl_beside_batch counts box copies only.
func TestModelNCCLBesideContiguousBatch(t *testing.T) {
	const n, m = int64(16 << 20), int64(32 << 20)
	s := xfer(n)
	for k := range 2 {
		src, dst := int32(2+2*k), int32(3+2*k)
		s.Buffers = append(s.Buffers, ir.Buffer{ID: int(src), Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: m}, ir.Buffer{ID: int(dst), Rank: 0, Kind: ir.Staging, Tensor: -1, Bytes: m})
		s.AddOp(ir.Op{Kind: ir.Copy, Rank: 0, Peer: -1, Match: -1, Src: ir.Region{Buf: src, Bytes: m}, Dst: ir.Region{Buf: dst, Bytes: m}})
	}
	p, err := program.Compile(s, program.Options{Dev: func(r int32) int { return int(r) }, Lanes: 1, Mode: program.Waves, Comms: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(p.Steps, func(st program.Step) bool { return st.Kind == program.Local && len(st.Batch) == 2 }) {
		t.Fatal("the two copies are not one batch: the test does not test a batch")
	}
	var ends [2]units.Time
	for i, share := range []float64{0, 0.5} {
		tp := machine()
		tp.Executor.BatchShared, tp.Executor.NCCLBesideBatch = 0.05, share
		r, err := Run(s, tp, Options{Exec: Exec{Transport: "nccl"}, GroupEnds: true})
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = r.GroupEnds[0]
	}
	if ends[1] != ends[0] {
		t.Errorf("a batch of contiguous copies moved the group's end from %v to %v", ends[0], ends[1])
	}
}
