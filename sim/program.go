package sim

import (
	"fmt"
	"maps"
	"slices"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/program"
)

// Exec says how m2n's GPU executor runs the schedule, for the executor
// model: a topology with measured executor costs (topo.Executor) makes the
// simulator run the executor's program of the schedule (program) instead
// of the schedule's ops alone. It is the executor's own settings type,
// resolved as the executor resolves it; its Loopback is Options.Loopback,
// and TransportAuto, which only a machine resolves, is modeled as NCCL.
type Exec = program.Settings

// modeled is a schedule rewritten as the executor runs it: one op per
// step of its program (a merged transfer is one send/recv pair), with the
// order of each stream, the barrier between NCCL groups on a stream, when
// the host has issued each op (rel) and each op's start latency (lat) and
// memory coefficient (coef).
type modeled struct {
	s    *ir.Schedule
	rel  []units.Time
	lat  []units.Time
	coef []float64
	// beside is, per local op, the share of their rate NCCL transfers keep
	// on its GPU while it runs (0: not slowed; opCosts.beside).
	beside []float64
	// lane is, per op, the lane resource of a batch member beside NCCL
	// (-1: none), and lanes those resources.
	lane  []int32
	lanes []laneSpec
	// of maps each op of the original schedule to its op here.
	of []int32
	// groups is the NCCL groups the program issues (0 with copies).
	groups int
	copies bool // transfers are device copies (not NCCL)
	// hostIssue is the host's time to issue everything: the busiest
	// process's.
	hostIssue units.Time
	// groupEnd is, per NCCL group, the barrier that ends it on the stream
	// of the first GPU taking part in it.
	groupEnd []int32
	// streams is the program's streams, and onStream, per stream, the
	// ops here that run on it (barriers included): its end is theirs.
	streams  []program.Stream
	onStream [][]int32
}

// model compiles the executor's program of s and rewrites s as it runs.
func model(s *ir.Schedule, tp *topo.Topology, opt Options) (*modeled, error) {
	ex := opt.Exec
	ex.Loopback = opt.Loopback
	ex, err := ex.Resolve()
	if err == nil && ex.Transport == program.TransportAuto {
		ex.Transport = program.TransportNCCL
		ex, err = ex.Resolve()
	}
	if err != nil {
		return nil, err
	}
	x := &tp.Executor
	costs := x.Costs[ex.Launch]
	other := topo.OneProcess
	if ex.Launch == topo.OneProcess {
		other = topo.PerGPU
	}
	if oc := x.Costs[other]; costs.IsZero() && !oc.IsZero() {
		table := map[topo.Launch]string{topo.OneProcess: "executor.one_process", topo.PerGPU: "executor.per_gpu"}
		return nil, fmt.Errorf("the measured preset has %s costs but no %s costs ([%s] is missing): measure them (m2n calibrate in that launch mode), or model the %s launch mode (--launch %s)", other, ex.Launch, table[ex.Launch], other, other)
	}
	if ex.Graph {
		costs.HostGroup, costs.HostXfer, costs.HostLaunch, costs.HostEvent = 0, 0, 0, 0
	}
	copyT := ex.Transport == program.TransportCopy
	world := s.WorldMap()
	dev := func(r int32) int {
		if opt.Loopback {
			return 0
		}
		return world[int(r)].GPU
	}
	po := program.Options{Dev: dev, Lanes: ex.Lanes, Mode: program.Waves, WaveBytes: ex.WaveBytes, Comms: 1, NoBatch: ex.NoBatch}
	if copyT {
		po.Mode = program.Streams
		// One process a GPU copies over CUDA IPC: pulled by the receivers
		// where the schedule allows, else pushed by the senders, each
		// receiving end a flag wait of its own (native's Executor.push).
		po.Push = ex.Launch == topo.PerGPU && !opt.Loopback && program.Pullable(s) != nil
	} else if opt.Loopback {
		po.Comms = ex.Comms
	}
	p, err := program.Compile(s, po)
	if err != nil {
		return nil, fmt.Errorf("executor program: %w", err)
	}
	m := &modeled{s: &ir.Schedule{Route: s.Route, World: s.World, Tensors: s.Tensors, Buffers: s.Buffers}, of: make([]int32, len(s.Ops)), groups: p.Groups, copies: copyT,
		streams: p.Streams, onStream: make([][]int32, len(p.Streams))}
	// put says that op id runs on the program's stream k.
	put := func(k int, id int32) { m.onStream[k] = append(m.onStream[k], id) }
	for i := range m.of {
		m.of[i] = -1
	}
	// The host: one issuing thread per process, which issues without
	// waiting for the device.
	proc := func(d int) int {
		if ex.Launch == topo.PerGPU {
			return d
		}
		return 0
	}
	clock := map[int]units.Time{}
	// Each iteration begins with an event the process records and every
	// device and stream of it waits for; it ends with an event per stream
	// that the first one waits for (native's iteration).
	ev := costs.HostEvent
	streamsOf := map[int]int{}
	devsOf := map[int]map[int]bool{}
	for _, k := range p.Streams {
		streamsOf[proc(k.Dev)]++
		if devsOf[proc(k.Dev)] == nil {
			devsOf[proc(k.Dev)] = map[int]bool{}
		}
		devsOf[proc(k.Dev)][k.Dev] = true
	}
	for pr, n := range streamsOf {
		clock[pr] = units.Time(1+len(devsOf[pr])+n) * ev
	}
	records := func(rec int32, more []int32) units.Time {
		n := units.Time(len(more))
		if rec >= 0 {
			n++
		}
		return n * ev
	}
	last := map[int]int32{}    // stream -> its last op (local ops and copies)
	barrier := map[int]int32{} // NCCL stream -> the barrier after its last group
	var members []int32        // ops of the open group
	onStream := map[int][]int32{}
	lastOfPair := map[[2]int32]int32{} // in the open group: a pair's last send
	pending := map[int]units.Time{}    // in the open group: each process's events to record at its end
	started := map[int]bool{}          // NCCL streams that have run a transfer
	add := func(op ir.Op, rel, lat units.Time, coef float64, deps []int32) int32 {
		id := m.s.AddOp(op, slices.Compact(slices.Sorted(slices.Values(deps)))...)
		m.rel, m.lat, m.coef, m.beside, m.lane = append(m.rel, rel), append(m.lat, lat), append(m.coef, coef), append(m.beside, 0), append(m.lane, -1)
		return id
	}
	// deps maps the dependencies of original ops to ops here.
	deps := func(ops ...int32) []int32 {
		var out []int32
		for _, o := range ops {
			for _, d := range s.Deps(o) {
				if m.of[d] >= 0 {
					out = append(out, m.of[d])
				}
			}
		}
		return out
	}
	// A stream's batch kernels beside NCCL's run on its lane's share of
	// its GPU: one resource per stream that runs one, at batch_shared of
	// the memory rate (a batch alone there moves its bytes at that share
	// of its own rate; it takes memory from no one else beyond its
	// bytes).
	laneIdx := map[int]int32{}
	laneOf := func(stream int) int32 {
		if k, ok := laneIdx[stream]; ok {
			return k
		}
		k := int32(len(m.lanes))
		laneIdx[stream] = k
		m.lanes = append(m.lanes, laneSpec{GPU: p.Streams[stream].Dev, Capacity: units.Bandwidth(x.BatchShared * float64(tp.Memory))})
		return k
	}
	// Kernels beside NCCL's (waves mode); NCCL slowed by them on GPUs of
	// their own (not in loopback).
	waves := po.Mode == program.Waves
	beside := waves && !opt.Loopback
	copyCoef := 2.0
	quantCoef := 1.0
	if x.Quantize > 0 {
		quantCoef = 1 / x.Quantize
	}
	quantGenCoef := quantCoef
	if x.QuantizeGeneric > 0 {
		quantGenCoef = 1 / x.QuantizeGeneric
	}
	quantRowsCoef := quantCoef
	if x.QuantizeRows > 0 {
		quantRowsCoef = 1 / x.QuantizeRows
	}
	packRate := func(c program.BoxClass) float64 {
		if c == program.Contiguous {
			return copyCoef
		}
		f := map[program.BoxClass]float64{program.LongRuns: x.PackLong, program.ShortRuns: x.PackShort, program.Staged: x.PackStage}[c]
		if f <= 0 {
			return 2
		}
		return 2 / f
	}
	for k := range p.Steps {
		st := &p.Steps[k]
		switch st.Kind {
		case program.Local:
			op := s.Ops[st.Op]
			d := dev(op.Rank)
			clock[proc(d)] += units.Time(len(st.Waits))*ev + costs.HostLaunch
			prev, hasPrev := last[st.Stream]
			members := st.Batch
			if members == nil {
				members = []int32{st.Op}
			}
			if st.Batch != nil && op.Kind == ir.Quantize {
				// A batch of quantizes is a launch per kernel's batch
				// form and one per op alone (program.SplitQuantBatch).
				kernels, blocks := make([]string, len(members)), make([]int64, len(members))
				for j, o := range members {
					_, name, nb, err := program.QuantKernelNameOf(s, o)
					if err != nil {
						return nil, fmt.Errorf("executor model: %w", err)
					}
					kernels[j], blocks[j] = name, nb
				}
				groups, alone := program.SplitQuantBatch(kernels, blocks)
				clock[proc(d)] += units.Time(len(groups)+len(alone)-1) * costs.HostLaunch
			}
			// A batch is one kernel: its members start together after the
			// stream's previous op and one launch latency, and share the
			// GPU's memory as concurrent flows.
			lw := tp.LatencyLocal
			var ids []int32
			for _, o := range members {
				op := s.Ops[o]
				if op.Src.IsBox() || op.Dst.IsBox() {
					lw = tp.LatencyLocal + costs.BoxLatency
				}
			}
			// The kernel starts once every member's dependencies are met
			// (the executor waits for all their events before launching).
			all := deps(members...)
			if hasPrev {
				all = append(all, prev)
			}
			for _, o := range members {
				op := s.Ops[o]
				ds := all
				coef, olw := quantCoef, lw
				if op.Kind == ir.Quantize {
					// the kernel the executor runs for it, at its own rate
					k, err := program.QuantKernelOf(s, o)
					if err != nil {
						return nil, fmt.Errorf("executor model: %w", err)
					}
					switch k {
					case program.QuantGeneric:
						coef = quantGenCoef
					case program.QuantRows:
						coef = quantRowsCoef
					case program.QuantSplit:
						// Two kernels: the first reads the source for the
						// amax, the second reads it again and writes the
						// bytes and scales; at quantize_split (its bytes
						// counted once), or where unmeasured at the
						// quantize kernel's rate with the second read.
						if x.QuantizeSplit > 0 {
							coef = 1 / x.QuantizeSplit
						} else {
							moved := float64(op.Src.Bytes + op.Dst.Bytes + s.QuantScale[o].Bytes)
							coef = quantCoef * (moved + float64(op.Src.Bytes)) / moved
						}
						clock[proc(d)] += costs.HostLaunch
						olw += tp.LatencyLocal + costs.BoxLatency
					}
				} else {
					class := program.ClassOf(s, &op)
					if st.Batch != nil && class == program.Contiguous {
						// In a batch, a contiguous copy is the batch
						// kernel's long runs (units of 64 KiB segments),
						// not a copy engine's or the contiguous kernel's
						// copy: its rate is pack_long's.
						class = program.LongRuns
					}
					coef = packRate(class)
					// A batch beside NCCL kernels runs on the grid they
					// leave it (waves mode): its copies share their lane's
					// resource, batch_shared of the memory rate, below.
					// A long contiguous copy alone runs on a few blocks
					// there (native's LocalCopyBlocks), at its own rate.
					if waves && st.Batch == nil && onFewBlocks(&op) && x.CopyShared > 0 {
						coef = 2 / x.CopyShared
					}
				}
				id := add(op, clock[proc(d)], olw, coef, ds)
				if waves && st.Batch != nil && x.BatchShared > 0 && op.Kind != ir.Quantize {
					m.lane[id] = laneOf(st.Stream)
				}
				if beside && st.Batch == nil && onFewBlocks(&op) {
					// NCCL on its GPU keeps a share of its rate while the
					// copy runs on its few blocks (nccl_beside is measured
					// beside it).
					m.beside[id] = x.NCCLBeside
				}
				if beside && st.Batch != nil && op.Kind != ir.Quantize && x.NCCLBesideBatch > 0 && program.ClassOf(s, &op) != program.Contiguous {
					// And while a batch kernel runs box copies there
					// (nccl_beside_batch); batches of contiguous copies
					// are not counted (held out, moe-2gpu's left NCCL at
					// its rate while dense-2gpu's packs slowed it).
					m.beside[id] = x.NCCLBesideBatch
				}
				if op.Kind == ir.Quantize {
					if m.s.QuantScale == nil {
						m.s.QuantScale = map[int32]ir.Region{}
					}
					m.s.QuantScale[id] = s.QuantScale[o]
				}
				m.of[o] = id
				ids = append(ids, id)
				put(st.Stream, id)
			}
			clock[proc(d)] += records(st.Record, st.More)
			last[st.Stream] = ids[0]
			if len(ids) > 1 {
				// the stream's next op waits for the whole batch
				bar := ir.Op{Kind: ir.Copy, Rank: op.Rank, Peer: -1, Match: -1}
				last[st.Stream] = add(bar, 0, 0, 0, ids)
				put(st.Stream, last[st.Stream])
			}
		case program.Xfer:
			snd := s.Ops[st.Op]
			rcv := s.Ops[snd.Match]
			ends := append([]int32{st.Op}, st.Merged...)
			rends := make([]int32, len(ends))
			for i, e := range ends {
				rends[i] = s.Ops[e].Match
			}
			snd.Src.Bytes = st.Bytes
			rcv.Dst.Bytes = st.Bytes
			sd, rd := dev(snd.Rank), dev(rcv.Rank)
			var sdeps, rdeps []int32
			var rel, lat units.Time
			if po.Push {
				// The sender's process copies into the receiver's memory
				// and sets the transfer's flag (a launch each); the
				// receiver's launches its flag wait. A receive that waits
				// for work of its own rank first has its flag stream set a
				// ready flag (after that work and the stream's earlier
				// ends), which a kernel on the sender's stream waits for
				// before the copy (native's issuePush).
				ready := st.WaitsForReceiver(s)
				launches := units.Time(2)
				if ready {
					launches = 3
				}
				clock[proc(sd)] += units.Time(len(st.Waits))*ev + launches*costs.HostLaunch
				rel = clock[proc(sd)]
				clock[proc(sd)] += records(st.Record, st.More)
				sdeps = deps(ends...)
				if l, ok := last[st.Stream]; ok {
					sdeps = append(sdeps, l)
				}
				if ready {
					clock[proc(rd)] += costs.HostLaunch
					rdeps := deps(rends...)
					if l, ok := last[st.RStream]; ok {
						rdeps = append(rdeps, l)
					}
					rb := add(ir.Op{Kind: ir.Copy, Rank: rcv.Rank, Peer: -1, Match: -1}, clock[proc(rd)], 0, 0, rdeps)
					last[st.RStream] = rb
					put(st.RStream, rb)
					w := add(ir.Op{Kind: ir.Copy, Rank: snd.Rank, Peer: -1, Match: -1}, rel, tp.LatencyLocal+costs.BoxLatency, 0, append(sdeps, rb))
					put(st.Stream, w)
					sdeps = []int32{w}
				}
				clock[proc(rd)] += units.Time(len(st.RWaits))*ev + costs.HostLaunch + records(st.RRecord, st.RMore)
				lat = -1
			} else if po.Mode == program.Streams {
				// One device copy on the stream, issued by the receiver's
				// process.
				clock[proc(rd)] += units.Time(len(st.Waits))*ev + costs.HostLaunch
				rel = clock[proc(rd)]
				clock[proc(rd)] += records(st.Record, st.More)
				sdeps = append(deps(ends...), deps(rends...)...)
				if l, ok := last[st.Stream]; ok {
					sdeps = append(sdeps, l)
				}
				lat = -1 // the path class's latency

			} else {
				clock[proc(sd)] += units.Time(len(st.Waits))*ev + costs.HostXfer
				clock[proc(rd)] += units.Time(len(st.RWaits))*ev + costs.HostXfer
				pending[proc(sd)] += records(st.Record, st.More)
				pending[proc(rd)] += records(st.RRecord, st.RMore)
				sdeps, rdeps = deps(ends...), deps(rends...)
				// NCCL runs a group's calls to one peer in order.
				pair := [2]int32{snd.Rank, snd.Peer}
				if l, ok := lastOfPair[pair]; ok {
					sdeps = append(sdeps, l)
					rdeps = append(rdeps, m.s.Ops[l].Match)
				}
				if b, ok := barrier[st.Stream]; ok {
					sdeps = append(sdeps, b)
				}
				if b, ok := barrier[st.RStream]; ok {
					rdeps = append(rdeps, b)
				}
				// Its fixed cost by size, and the stream's start once per
				// iteration.
				lat = costs.XferLatency + costs.RampAt(st.Bytes)

				if !started[st.Stream] || !started[st.RStream] {
					lat += costs.StartLatency
					started[st.Stream], started[st.RStream] = true, true
				}
			}
			si := add(snd, rel, lat, copyCoef, sdeps)
			ri := add(rcv, rel, lat, 0, rdeps)
			m.s.Ops[si].Match, m.s.Ops[ri].Match = ri, si
			for i, e := range ends {
				m.of[e], m.of[rends[i]] = si, ri
			}
			if po.Push {
				// The receiving end: a one-thread kernel on the receiver's
				// flag stream, after the copy and the stream's earlier
				// ends (ends complete in issue order).
				bdeps := []int32{ri}
				if l, ok := last[st.RStream]; ok {
					bdeps = append(bdeps, l)
				}
				bar := ir.Op{Kind: ir.Copy, Rank: rcv.Rank, Peer: -1, Match: -1}
				b := add(bar, clock[proc(rd)], tp.LatencyLocal+costs.BoxLatency, 0, bdeps)
				for _, r := range rends {
					m.of[r] = b
				}
				last[st.Stream], last[st.RStream] = si, b
				put(st.Stream, si)
				put(st.RStream, b)
				continue
			}
			if po.Mode == program.Streams {
				// The copy is one op on the stream (the receive its other
				// end, on no stream of its own).
				last[st.Stream] = si
				put(st.Stream, si)
				continue
			}
			put(st.Stream, si)
			put(st.RStream, ri)
			lastOfPair[[2]int32{snd.Rank, snd.Peer}] = si
			members = append(members, si, ri)
			onStream[st.Stream] = append(onStream[st.Stream], si)
			onStream[st.RStream] = append(onStream[st.RStream], ri)
		case program.GroupStart:
			members = members[:0]
			clear(onStream)
			clear(lastOfPair)
		case program.GroupEnd:
			// ncclGroupEnd launches the group's kernels: each process pays
			// the group's host cost once per GPU of its own in the group.
			gpus := map[int]map[int]bool{}
			for stream := range onStream {
				d := p.Streams[stream].Dev
				if gpus[proc(d)] == nil {
					gpus[proc(d)] = map[int]bool{}
				}
				gpus[proc(d)][d] = true
			}
			for pr, ds := range gpus {
				clock[pr] += units.Time(len(ds)) * costs.HostGroup
			}
			for _, id := range members {
				m.rel[id] = clock[proc(dev(m.s.Ops[id].Rank))]
			}
			// The group's events are recorded once it is launched.
			for pr, t := range pending {
				clock[pr] += t
			}
			clear(pending)
			// The next group on a stream starts after this one's kernel
			// ends there: a barrier per stream, after every transfer of the
			// group on it and the kernel's own cost.
			first, firstDev := int32(-1), 0
			for _, stream := range slices.Sorted(maps.Keys(onStream)) {
				ops := onStream[stream]
				bar := ir.Op{Kind: ir.Copy, Rank: m.s.Ops[ops[0]].Rank, Peer: -1, Match: -1}
				lat := costs.GroupLatency
				if !opt.Loopback && sendsAndReceives(m.s, ops) {
					// Measured between two GPUs: not NCCL within one.
					lat += costs.DuplexStartAt(eachWay(m.s, ops))
					// Each send/recv after the first from this GPU to a
					// peer costs more where the group goes both ways.
					if costs.DuplexOpLatency > 0 || costs.DuplexOpRate > 0 {
						sent := map[int32]bool{}
						for _, id := range ops {
							op := &m.s.Ops[id]
							if op.Kind != ir.Send {
								continue
							}
							if sent[op.Peer] {
								extra := costs.DuplexOpAt(op.Src.Bytes)
								m.lat[id] += extra
								m.lat[op.Match] += extra
							}
							sent[op.Peer] = true
						}
					}
				}
				barrier[stream] = add(bar, 0, lat, 0, ops)
				put(stream, barrier[stream])
				if d := p.Streams[stream].Dev; first < 0 || d < firstDev {
					first, firstDev = barrier[stream], d
				}
			}
			if first >= 0 {
				m.groupEnd = append(m.groupEnd, first)
			}
		}
	}
	for pr, c := range clock {
		m.hostIssue = max(m.hostIssue, c+units.Time(2*streamsOf[pr])*ev)
	}
	return m, nil
}

// sendsAndReceives reports whether a stream's transfers in a group go
// both ways: a send and a receive among ops.
func sendsAndReceives(s *ir.Schedule, ops []int32) bool {
	var snd, rcv bool
	for _, o := range ops {
		snd = snd || s.Ops[o].Kind == ir.Send
		rcv = rcv || s.Ops[o].Kind == ir.Recv
	}
	return snd && rcv
}

// eachWay is what a stream's transfers in a group move each way: the
// more of its sends' bytes and its receives'.
func eachWay(s *ir.Schedule, ops []int32) int64 {
	var snd, rcv int64
	for _, o := range ops {
		switch op := &s.Ops[o]; op.Kind {
		case ir.Send:
			snd += op.Src.Bytes
		case ir.Recv:
			rcv += op.Dst.Bytes
		}
	}
	return max(snd, rcv)
}

// onFewBlocks reports whether the executor copies a local op with its
// long-run copy kernel on a few blocks in waves mode (native's planLocal:
// a copy between contiguous regions of at least program.LongRunBytes;
// the model takes them 16-byte aligned, as the planner's buffers are).
func onFewBlocks(op *ir.Op) bool {
	return op.Kind == ir.Copy && !op.Src.IsBox() && !op.Dst.IsBox() && op.Src.Bytes >= program.LongRunBytes
}

// runProgram simulates the executor's program of s (see modeled); the
// result's flows, spans and ops are those of the modeled schedule
// (Result.Modeled).
func runProgram(s *ir.Schedule, tp *topo.Topology, opt Options, eng engineFunc) (*Result, error) {
	m, err := model(s, tp, opt)
	if err != nil {
		return nil, err
	}
	// NCCL's pair rate caps an NCCL send/recv, and NCCL's channels serve a
	// GPU's sends and receives together (duplex); a device copy runs at
	// the launch mode's copy rate where m2n calibrate measured one (CUDA
	// IPC between processes), else at the links' own rate (nvlink, the
	// copy rate it measures in one process). A scenario of one GPU per
	// virtual domain models that NVLink as its network: both classes are
	// capped.
	costs := tp.Executor.Costs[opt.Exec.Launch]
	c := costs.PairRate
	if m.copies {
		c = costs.CopyRate
	} else {
		opt.duplex = costs.DuplexRate
	}
	for _, k := range []ir.Class{ir.NVLink, ir.Net} {
		if c > 0 && opt.FlowCap[k] == 0 {
			opt.FlowCap[k] = c
		}
	}
	asked := opt
	if opt.GroupEnds && len(m.groupEnd) > 0 || opt.StreamEnds {
		// The barriers' and streams' ends, from the timeline (which turns
		// symmetry off).
		opt.Timeline = true
	}
	opt.lanes = m.lanes
	r, err := eng(m.s, tp, opt, &opCosts{rel: m.rel, lat: m.lat, coef: m.coef, beside: m.beside, lane: m.lane})
	if err != nil {
		return nil, err
	}
	if opt.Timeline {
		if opt.GroupEnds {
			for _, b := range m.groupEnd {
				r.GroupEnds = append(r.GroupEnds, r.Ops[b].End)
			}
		}
		if opt.StreamEnds {
			for k, ops := range m.onStream {
				if len(ops) == 0 {
					continue
				}
				se := StreamEnd{GPU: m.streams[k].Dev, Lane: m.streams[k].Lane}
				for _, id := range ops {
					se.End = max(se.End, r.Ops[id].End)
				}
				r.StreamEnds = append(r.StreamEnds, se)
			}
		}
		if !asked.Timeline {
			r.Ops = nil
			if !asked.Flows {
				r.FlowOf, r.FlowRes, r.FlowCoef, r.FlowLat, r.FlowOps = nil, nil, nil, nil, nil
			}
		}
	}
	// The flows, spans and ops of the result are the modeled schedule's.
	r.Modeled = m.s
	r.FlowRel = make([]units.Time, len(r.FlowOps))
	for f, ops := range r.FlowOps {
		r.FlowRel[f] = m.rel[ops[0]]
		if ops[1] >= 0 {
			r.FlowRel[f] = max(r.FlowRel[f], m.rel[ops[1]])
		}
	}
	r.Groups, r.HostIssue = m.groups, m.hostIssue
	return r, nil
}
