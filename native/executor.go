package native

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/program"
)

// Backends.
const (
	// Loopback runs every rank of a schedule on one GPU: each rank's buffers
	// are separate allocations there and each transfer a device copy (or,
	// with the nccl transport, a one-rank NCCL communicator's self send/recv).
	Loopback = "loopback"
	// NCCL runs one rank per GPU: all local GPUs in one process
	// (ncclCommInitAll), or one process per GPU under a launcher; transfers
	// are NCCL send/recv, or in one process with the copy transport, peer
	// copies over NVLink by the GPUs' copy engines.
	NCCL = "nccl"
)

// Transports (program.Settings): device copies, NCCL send/recv, or
// TransportAuto (the nccl backend's default): device copies between GPUs
// that share NVLink in one host (peer copies in one process, CUDA IPC with
// one process per GPU, where the schedule allows it), NCCL where copies
// cannot reach. Result.Transport says which ran.
const (
	TransportCopy = program.TransportCopy
	TransportNCCL = program.TransportNCCL
	TransportAuto = program.TransportAuto
)

// Options configure an executor.
type Options struct {
	Backend string // Loopback or NCCL
	// Settings are the executor's: transport, lanes, wave bytes, graphs,
	// batching (program.Settings; New resolves them, its Loopback and
	// Launch from Backend and Launch here).
	program.Settings
	Device  int           // loopback: the GPU to use
	Warmup  int           // untimed iterations before the timed ones
	Iters   int           // timed iterations; 0 means 5
	Timeout time.Duration // nccl: how long to wait for a peer or an operation; 0 means 5 minutes
	Launch  *LaunchEnv    // nccl: the launcher's rank, world and rendezvous; nil for one process over all local GPUs
	// LocalCopyBlocks is how many thread blocks at most the contiguous
	// local copies of waves mode (a colocated rank's own shard) run on, so
	// they share the GPU with the NCCL kernel instead of holding every SM
	// and most of the memory bandwidth while it runs: 0 means 16 (measured
	// best of 16, 64 and a whole-GPU copy on paper-2gpu, docs/native.md), a
	// negative value a whole-GPU device copy.
	LocalCopyBlocks int
	// Profile records, in every timed iteration, when each stream of this
	// process finished its work (Result.StreamEnds): where the time goes.
	Profile bool
	// External runs on the caller's arrays, stream and NCCL communicator
	// (Execute), not on buffers of m2n's own (Run); NCCL transport only.
	External *External
	// push runs the copy transport's transfers as pushes with flags even
	// in one process (as CUDA IPC with one process per GPU does), so the
	// fake device checks their protocol.
	push bool
}

// settings resolves opt's executor settings (program.Settings.Resolve),
// their Loopback and Launch from Backend and Launch; auto, where it is
// left, becomes what resolve returns (the machine's choice, New's).
func (opt *Options) settings(auto func() string) error {
	switch opt.Backend {
	case Loopback, NCCL:
	default:
		return fmt.Errorf("backend %q: want %s or %s", opt.Backend, Loopback, NCCL)
	}
	set := opt.Settings
	set.Loopback = opt.Backend == Loopback
	set.Launch = topo.OneProcess
	if opt.Launch != nil {
		set.Launch = topo.PerGPU
	}
	set, err := set.Resolve()
	if err == nil && set.Transport == TransportAuto {
		set.Transport = auto()
		set, err = set.Resolve()
	}
	if err != nil {
		return err
	}
	opt.Settings = set
	return nil
}

// StreamEnd is when one stream finished its part of an iteration: the
// median over the timed iterations, from the iteration's start on its
// device.
type StreamEnd struct {
	Device int
	Lane   int    // the program's lane (program.Stream; negative: an NCCL communicator's stream)
	Stream string // its lane or NCCL communicator, and the kinds of work it ran
	End    units.Time
}

// Result is what a run measured and checked.
type Result struct {
	// Times is each timed iteration's time. With one process per GPU it
	// is the slowest process's (every process's times are gathered after
	// the run); with the copy transport every process starts each
	// iteration together, after a barrier outside the timed span.
	Times        []units.Time
	Verified     bool // every destination byte equals its source byte
	CheckedBytes int64
	WrongElems   int64
	FirstWrong   string
	Device       string // the GPU's name (of the first device)
	Kernels      string // the architecture the kernels were compiled for
	Mode         string // how transfers ran: "copy", "nccl waves", ...
	Transport    string // the transport that ran: TransportCopy or TransportNCCL
	Graph        bool   // iterations replayed as a CUDA graph
	Ops, Steps   int
	Streams      int
	Events       int
	Waves        int   // NCCL groups an iteration issues (waves mode)
	WaveCapBytes int64 // the per-pair bytes groups were cut at; 0: uncut
	// HostIssue is the host's time to issue one iteration (median over the
	// timed ones): every launch, event and NCCL call, or the graph launch.
	HostIssue units.Time
	// PeakDeviceBytes is the most device memory m2n allocates for the
	// schedule's buffers on one GPU of this process (all buffers are
	// allocated up front, so it is also the peak); StagingBytes is the
	// staging part of it on the same GPU.
	PeakDeviceBytes int64
	StagingBytes    int64
	// StreamEnds is, with Options.Profile, when each stream finished
	// (ProfileErr says why not, where the device could not time it).
	StreamEnds []StreamEnd
	// GroupEnds is, with Options.Profile in waves mode, when each NCCL
	// group of an iteration ended on the first GPU's NCCL stream (median).
	GroupEnds  []units.Time
	ProfileErr string
}

// handle is a CUDA object (stream, event, graph, communicator) as the
// device layer names it.
type handle = uintptr

// gpu is what the executor needs of a device: the CUDA implementation,
// or a fake in host memory for tests.
type gpu interface {
	name(dev int) string
	arch(dev int) string
	memInfo(dev int) (free, total int64, err error)
	alloc(dev int, n int64) (uint64, error)
	free(dev int, p uint64) error
	newStream(dev int) (handle, error)
	newEvent(dev int, timing bool) (handle, error)
	record(ev, st handle) error
	// recordNode records ev on st as an event record node of the graph
	// being captured, recorded at each replay (the profile's timing
	// events), where record only orders work; only inside a capture.
	recordNode(ev, st handle) error
	wait(st, ev handle) error
	elapsed(a, b handle) (units.Time, error)
	sync(st handle) error
	copy(dst, src uint64, n int64, st handle) error
	boxCopy(a *boxArgs, kernel string, st handle) error
	// copyOn runs a contiguous copy's long-run box-copy kernel on at most
	// blocks blocks, leaving the other SMs to a concurrent NCCL kernel.
	copyOn(a *boxArgs, kernel string, blocks int, st handle) error
	// batchCopy runs many box copies from descriptors in device memory:
	// box_copy_batch_ranges on the whole GPU, or, shared, box_copy_batch
	// on a few blocks, leaving most multiprocessors to a concurrent NCCL
	// kernel (waves mode).
	batchCopy(a *batchArgs, shared bool, st handle) error
	// upload copies host bytes to device memory (before any iteration).
	upload(dev int, dst uint64, b []byte) error
	fill(a *patternArgs, st handle) error
	verify(a *patternArgs, st handle) (bad, first int64, err error)
	// quantize runs a quantize op's kernel; verifyQuant checks an output
	// of a quantized tensor (fp8 bytes or scales) as verify does.
	quantize(a *quantArgs, kernel string, shared bool, st handle) error
	// quantizeBatch runs the batch form of a quantize kernel over the ops
	// whose arguments and block prefix sums are in device memory.
	quantizeBatch(a *quantBatchArgs, kernel string, shared bool, st handle) error
	verifyQuant(a *quantCheckArgs, st handle) (bad, first int64, err error)
	// NCCL, for the waves mode.
	groupStart() error
	groupEnd() error
	send(src uint64, n int64, peer int, comm handle, st handle) error
	recv(dst uint64, n int64, peer int, comm handle, st handle) error
	// Copy transport with one process per GPU: share gives every rank this
	// process's arena over CUDA IPC and returns each NCCL rank's arena as
	// mapped here; barrier waits for every rank.
	share(dev int, base uint64, comm handle, world, me int) ([]uint64, error)
	barrier(dev int, comm handle, world int) error
	// waitValue makes st wait until the 32-bit word at addr equals v, then
	// clears it; writeValue writes v there after st's earlier work
	// (fenced): the flags of pushed transfers between processes.
	waitValue(st handle, addr uint64, v uint32) error
	writeValue(st handle, addr uint64, v uint32) error
	// adopt lets the executor use a stream it did not create (the
	// caller's, External) on dev; close leaves it alone.
	adopt(dev int, st handle)
	// allGather gathers every rank's bytes (each len(mine)), in rank order.
	allGather(dev int, mine []byte, comm handle, world int) ([]byte, error)
	// CUDA graphs.
	beginCapture(st handle) error
	endCapture(st handle) (handle, error)
	launchGraph(g, st handle) error
	close() error
	// abort drops the NCCL communicators without waiting for their work:
	// after a failure, when ncclCommDestroy could wait forever.
	abort()
}

// Executor runs one schedule on GPUs. Make it with New, run it with Run,
// and release its device memory with Close.
type Executor struct {
	s    *ir.Schedule
	g    gpu
	opt  Options
	prog *program.Program
	mode program.Mode

	devOf   map[int32]int    // rank -> device index of this process; absent: a remote rank
	devices []int            // device indices in use
	peerOf  map[int32]int    // rank -> NCCL rank (its index in the world)
	comms   map[int][]handle // device -> its communicators (several only in loopback: parallel NCCL queues)

	arena     map[int]uint64 // device -> base of its allocation
	bufAddr   []uint64       // buffer -> device address (0 for a remote rank's buffer)
	streams   []handle
	events    []handle
	origin    map[int]handle // device -> the stream that starts and ends iterations
	joinEv    []handle       // per stream: recorded at its end of an iteration
	profEv    []handle       // Profile: per stream, a timing event at its end (a graph's record node)
	capturing bool           // iteration is being captured as a CUDA graph
	startEv   map[int]handle
	devT0     map[int]handle // Profile: per device, a timing event at its start of an iteration
	// Profile, waves mode: a timing event recorded after each NCCL group
	// on the first device's first NCCL stream, and that stream; groupNo
	// counts the groups of the iteration being issued.
	groupEv []handle
	groupSt handle
	groupNo int
	t0, t1  handle // timing events on the first device's origin stream
	graph   handle
	// Waves mode: events of a group's transfers, recorded after the group
	// ends (NCCL enqueues a group's work at ncclGroupEnd).
	pending [][2]handle
	// Bytes allocated per device, all buffers and staging only.
	need, staging map[int]int64
	issueTime     units.Time // of the last timed iteration
	// ipc: the copy transport with one process per GPU over CUDA IPC; each
	// transfer is a copy by its receiver from the sender's arena (program.Pullable
	// schedules) or pushed by its sender into the receiver's (push).
	ipc bool
	// push: transfers are device copies issued by their sender, which then
	// sets the transfer's data flag in the receiver's memory; a receiver
	// whose recv waits for its own earlier work (staging to reuse) first
	// sets the transfer's ready flag in the sender's memory. Each waiter
	// resets the flag it waited for, so every iteration starts from zeros.
	// flagAt is, per rank, where its flags are as this process sees them:
	// nSends data flags (one a send of the schedule, sendNo), then nSends
	// ready flags; ready[k] says transfer step k waits for its ready flag.
	push   bool
	flagAt map[int32]uint64
	sendNo []int32
	nSends int
	ready  []bool
	// Launches planned in New: lps[lpOf[op]] for each local op of this
	// process (-1 elsewhere), a batchPlan per batch step, and each
	// device's allocation of batch descriptors.
	lpOf    []int32
	lps     []localPlan
	batches map[int]*batchPlan
	descMem map[int]uint64
	// works are the split quantize kernels' work memories (zero between
	// launches; the kernels leave them so), and workDirty says an
	// iteration stopped on an error, perhaps between a split pair's two
	// launches: the next one zeroes them first.
	works     []workRegion
	workDirty bool
}

// newExecutor prepares a schedule on a device layer: maps ranks to devices,
// checks and allocates memory, and compiles the program.
func newExecutor(s *ir.Schedule, g gpu, opt Options, devOf map[int32]int, peerOf map[int32]int, comms map[int][]handle) (*Executor, error) {
	if err := opt.settings(func() string { return TransportNCCL }); err != nil {
		return nil, err
	}
	if err := alignEnvError(); err != nil {
		return nil, err
	}
	if opt.Iters <= 0 {
		opt.Iters = 5
	}
	if opt.LocalCopyBlocks == 0 {
		opt.LocalCopyBlocks = 16
	}
	x := &Executor{s: s, g: g, opt: opt, devOf: devOf, peerOf: peerOf, comms: comms,
		arena: map[int]uint64{}, origin: map[int]handle{}, startEv: map[int]handle{}, descMem: map[int]uint64{}}
	if x.opt.Transport == TransportNCCL {
		x.mode = program.Waves
	}
	for _, d := range devOf {
		if !slices.Contains(x.devices, d) {
			x.devices = append(x.devices, d)
		}
	}
	slices.Sort(x.devices)
	// Memory: refuse before allocating when it does not fit. Each rank's
	// buffers are one block (placement); a device holds its ranks' blocks.
	// With External, the caller's arrays are this rank's inputs and
	// outputs: only staging is allocated.
	var ext map[int]uint64
	if opt.External != nil {
		if x.mode != program.Waves || len(devOf) != 1 {
			return nil, fmt.Errorf("%w: running on a caller's arrays takes the NCCL transport and one rank a process", ErrNotSupported)
		}
		for r, d := range devOf {
			var err error
			if ext, err = externalBuffers(s, r, d, opt.External.Arrays); err != nil {
				return nil, err
			}
		}
	}
	off, rankBytes, rankStaging, rankAlign := placement(s, func(i int) bool { _, ok := ext[i]; return ok })
	x.ipc = opt.Backend == NCCL && x.opt.Transport == TransportCopy && opt.Launch != nil
	// Over CUDA IPC a receiver pulls where the schedule lets it (program.Pullable:
	// measured faster for the dense whole model, docs/native.md) and
	// senders push otherwise.
	x.push = (x.ipc && program.Pullable(s) != nil) || (opt.push && x.mode == program.Streams)
	var flagBytes int64
	if x.push {
		x.sendNo = make([]int32, len(s.Ops))
		for i := range s.Ops {
			x.sendNo[i] = -1
			if s.Ops[i].Kind == ir.Send {
				x.sendNo[i] = int32(x.nSends)
				x.nSends++
			}
		}
		flagBytes = align(8 * int64(x.nSends))
	}
	need := map[int]int64{}
	x.need, x.staging = need, map[int]int64{}
	rankStart := map[int]int64{}
	for _, r := range s.World {
		if d, ok := devOf[int32(r.Rank)]; ok {
			// A rank's block starts as aligned as its buffers need
			// (several ranks share a device in loopback).
			need[d] = alignTo(need[d], rankAlign[r.Rank])
			rankStart[r.Rank] = need[d]
			need[d] += rankBytes[r.Rank] + flagBytes
			x.staging[d] += rankStaging[r.Rank]
		}
	}
	for _, d := range x.devices {
		free, total, err := g.memInfo(d)
		if err != nil {
			return nil, err
		}
		// Leave room for kernels, NCCL and the verify counters.
		if need[d]+min(256<<20, total/8) > free {
			return nil, fmt.Errorf("the schedule needs %s on GPU %d (%s), which has %s free of %s; shrink the tensors with --scale",
				units.Bytes(need[d]).Human(), d, g.name(d), units.Bytes(free).Human(), units.Bytes(total).Human())
		}
	}
	for _, d := range x.devices {
		if need[d] == 0 {
			continue
		}
		base, err := g.alloc(d, need[d])
		if err != nil {
			x.Close()
			return nil, fmt.Errorf("allocating %s on GPU %d: %w", units.Bytes(need[d]).Human(), d, err)
		}
		x.arena[d] = base
	}
	x.bufAddr = make([]uint64, len(s.Buffers))
	for i := range s.Buffers {
		b := &s.Buffers[i]
		if a, ok := ext[i]; ok {
			x.bufAddr[i] = a
		} else if d, ok := devOf[int32(b.Rank)]; ok {
			x.bufAddr[i] = x.arena[d] + uint64(rankStart[b.Rank]+off[i])
		}
	}
	if x.push {
		x.flagAt = map[int32]uint64{}
		zero := make([]byte, flagBytes)
		for _, r := range s.World {
			if d, ok := devOf[int32(r.Rank)]; ok {
				x.flagAt[int32(r.Rank)] = x.arena[d] + uint64(rankStart[r.Rank]+rankBytes[r.Rank])
				if err := g.upload(d, x.flagAt[int32(r.Rank)], zero); err != nil {
					x.Close()
					return nil, err
				}
			}
		}
	}
	if x.ipc {
		// Every process lays out its one rank as placement does: a peer's
		// buffer is its allocation's base plus the same offset.
		d := x.devices[0]
		bases, err := g.share(d, x.arena[d], comms[d][0], len(s.World), opt.Launch.Rank)
		if err != nil {
			x.Close()
			return nil, fmt.Errorf("sharing buffers over CUDA IPC: %w", err)
		}
		base := map[int]uint64{}
		for i, r := range s.World {
			base[r.Rank] = bases[i]
		}
		for i := range s.Buffers {
			b := &s.Buffers[i]
			if _, ok := devOf[int32(b.Rank)]; !ok {
				x.bufAddr[i] = base[b.Rank] + uint64(off[i])
			}
		}
		for _, r := range s.World {
			if _, ok := devOf[int32(r.Rank)]; !ok && x.push {
				x.flagAt[int32(r.Rank)] = base[r.Rank] + uint64(rankBytes[r.Rank])
			}
		}
	}
	// Ops of remote ranks are in the program too (their levels place the
	// waves every process agrees on); issuing skips them.
	dev := func(r int32) int {
		if d, ok := devOf[r]; ok {
			return d
		}
		return -1 - int(r) // a remote rank: its own (never created) streams
	}
	nComms := 1
	for _, cs := range comms {
		nComms = max(nComms, len(cs))
	}
	prog, err := program.Compile(s, program.Options{Dev: dev, Lanes: opt.Lanes, Mode: x.mode, WaveBytes: opt.WaveBytes, Comms: nComms, NoBatch: opt.NoBatch, Push: x.push})
	if err != nil {
		x.Close()
		return nil, err
	}
	x.prog = prog
	if x.push {
		// From the schedule, not the program's events: every process
		// agrees on which transfers wait for their receiver.
		x.ready = make([]bool, len(prog.Steps))
		for k := range prog.Steps {
			if st := &prog.Steps[k]; st.Kind == program.Xfer {
				x.ready[k] = st.WaitsForReceiver(s)
			}
		}
	}
	if err := x.planLocals(); err != nil {
		x.Close()
		return nil, err
	}
	for _, k := range prog.Streams {
		var st handle
		if k.Dev >= 0 {
			if st, err = g.newStream(k.Dev); err != nil {
				x.Close()
				return nil, err
			}
		}
		x.streams = append(x.streams, st)
	}
	// Events carry dependencies; each lives on the device whose stream
	// records it.
	evDev := make([]int, prog.Events)
	for _, st := range prog.Steps {
		if st.Record >= 0 {
			evDev[st.Record] = prog.Streams[st.Stream].Dev
		}
		if st.RRecord >= 0 {
			evDev[st.RRecord] = prog.Streams[st.RStream].Dev
		}
		for _, e := range st.More {
			evDev[e] = prog.Streams[st.Stream].Dev
		}
		for _, e := range st.RMore {
			evDev[e] = prog.Streams[st.RStream].Dev
		}
	}
	for e := range prog.Events {
		var ev handle
		if evDev[e] >= 0 {
			if ev, err = g.newEvent(evDev[e], false); err != nil {
				x.Close()
				return nil, err
			}
		}
		x.events = append(x.events, ev)
	}
	for _, d := range x.devices {
		var st handle
		if opt.External != nil {
			st = handle(opt.External.Stream)
			g.adopt(d, st)
		} else if st, err = g.newStream(d); err != nil {
			x.Close()
			return nil, err
		}
		x.origin[d] = st
		if x.startEv[d], err = g.newEvent(d, false); err != nil {
			x.Close()
			return nil, err
		}
	}
	if opt.Profile {
		x.devT0 = map[int]handle{}
		for _, d := range x.devices {
			if x.devT0[d], err = g.newEvent(d, true); err != nil {
				x.Close()
				return nil, err
			}
		}
		for i, k := range prog.Streams {
			if k.Dev == x.devices[0] && k.Lane < 0 && x.groupSt == 0 {
				x.groupSt = x.streams[i]
			}
		}
		for range prog.Groups {
			if x.groupSt == 0 {
				break
			}
			ev, err := g.newEvent(x.devices[0], true)
			if err != nil {
				x.Close()
				return nil, err
			}
			x.groupEv = append(x.groupEv, ev)
		}
	}
	for i := range x.streams {
		var ev, pev handle
		if d := prog.Streams[i].Dev; d >= 0 {
			if ev, err = g.newEvent(d, false); err != nil {
				x.Close()
				return nil, err
			}
			if opt.Profile {
				if pev, err = g.newEvent(d, true); err != nil {
					x.Close()
					return nil, err
				}
			}
		}
		x.joinEv = append(x.joinEv, ev)
		x.profEv = append(x.profEv, pev)
	}
	if x.t0, err = g.newEvent(x.devices[0], true); err != nil {
		x.Close()
		return nil, err
	}
	if x.t1, err = g.newEvent(x.devices[0], true); err != nil {
		x.Close()
		return nil, err
	}
	return x, nil
}

func align(n int64) int64 { return alignTo(n, 256) }

// placement lays out each rank's buffers in one block: the rank's staging
// arena first (its largest arena_offset + bytes; arena buffers at their
// offsets, so those whose ranges overlap share memory), then every other
// buffer in schedule order, each at a multiple of bufferAlign when it holds
// at least that many bytes and of smallAlign otherwise. It returns each
// buffer's offset in its rank's block, each rank's block size, and the
// staging part of it (with the padding before its staging buffers), and
// the alignment each rank's block needs (bufferAlign where it holds a
// large buffer, else smallAlign; a rank of none, smallAlign too). Buffers
// skip reports (the caller's arrays) are left out.
func placement(s *ir.Schedule, skip func(buf int) bool) (off []int64, rankBytes, rankStaging, rankAlign map[int]int64) {
	off = make([]int64, len(s.Buffers))
	rankBytes, rankStaging, rankAlign = map[int]int64{}, map[int]int64{}, map[int]int64{}
	for _, r := range s.World {
		rankAlign[r.Rank] = smallAlign
	}
	for r, n := range s.ArenaBytes() {
		rankBytes[r] = align(n)
		rankStaging[r] = align(n)
	}
	for i := range s.Buffers {
		b := &s.Buffers[i]
		if b.InArena {
			off[i] = b.ArenaOffset
			continue
		}
		if skip != nil && skip(i) {
			continue // the caller's array (External)
		}
		at := alignTo(rankBytes[b.Rank], smallAlign)
		if b.Bytes >= bufferAlign {
			at = alignTo(at, bufferAlign)
			rankAlign[b.Rank] = bufferAlign
		}
		end := at + align(b.Bytes)
		if b.Kind == ir.Staging {
			rankStaging[b.Rank] += end - rankBytes[b.Rank]
		}
		off[i], rankBytes[b.Rank] = at, end
	}
	return off, rankBytes, rankStaging, rankAlign
}

// bufferAlign is where in its rank's block a buffer of at least this many
// bytes starts: a multiple of 2 MiB, the GPU's large page; smaller buffers
// start at multiples of smallAlign (256 bytes). With every buffer 256-byte
// aligned, copies pulled from a peer process's buffers over CUDA IPC ran at
// 240-318 GB/s where the same copies in one process ran at 370-385 (two
// H200s: dense-2gpu per GPU 32.7 ms against 23.1 one process; aligned,
// 24.5 ms). Copies pushed with flags (FP8 per GPU) were as fast with 256
// bytes or 2 MiB but slower with 64 KiB (23.1 against 17.3 ms), and slower
// still with the small buffers at 2 MiB too: docs/native.md has the table.
// The padding is under 2 MiB a large buffer. M2N_BUFFER_ALIGN and
// M2N_SMALL_ALIGN (bytes, powers of two of at least 256) override both, to
// measure; every process of a run must set the same (peers lay out each
// other's blocks), and New refuses a value that is not one
// (alignEnvError).
var (
	bufferAlign, bufferAlignErr = envPow2("M2N_BUFFER_ALIGN", 2<<20)
	smallAlign, smallAlignErr   = envPow2("M2N_SMALL_ALIGN", 256)
)

// alignEnvError reports an alignment variable set to what is not a power
// of two of at least 256 (the default stands in for it).
func alignEnvError() error {
	if bufferAlignErr != nil {
		return bufferAlignErr
	}
	return smallAlignErr
}

func alignTo(n, a int64) int64 { return (n + a - 1) &^ (a - 1) }

// envPow2 is the environment variable name's value, def where it is unset,
// or def and an error naming it where it is not a power of two of at least
// 256.
func envPow2(name string, def int64) (int64, error) {
	s := os.Getenv(name)
	if s == "" {
		return def, nil
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil && v >= 256 && v&(v-1) == 0 {
		return v, nil
	}
	return def, fmt.Errorf("%s = %q: want a power of two of at least 256 (bytes)", name, s)
}

// Close releases device memory and the device layer.
func (x *Executor) Close() error {
	var serr error
	if x.opt.External != nil && x.prog != nil {
		// The caller's last Execute may still run on the staging below.
		serr = x.syncAll()
	}
	for _, d := range x.devices {
		if base, ok := x.arena[d]; ok {
			x.g.free(d, base)
		}
		if base, ok := x.descMem[d]; ok {
			x.g.free(d, base)
		}
	}
	x.arena, x.descMem = map[int]uint64{}, map[int]uint64{}
	if err := x.g.close(); err != nil {
		return err
	}
	return serr
}

// Run fills the sources, runs the schedule once and checks every
// destination byte, then runs the warm-up and timed iterations and checks
// again.
func (x *Executor) Run() (_ *Result, err error) {
	// One OS thread for the whole run: NCCL keeps an open group's state per
	// thread (ncclGroupStart on one thread and ncclGroupEnd on another is
	// "invalid usage"), and CUDA ends a stream capture only on the thread
	// that began it.
	if x.opt.External != nil {
		return nil, fmt.Errorf("Run: the executor runs on the caller's arrays (External), which Run would overwrite with test patterns: use Execute")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer func() {
		if err != nil {
			x.g.abort() // work may be left enqueued: Close must not wait for it
		}
	}()
	res := &Result{Device: x.g.name(x.devices[0]), Kernels: x.g.arch(x.devices[0]), Ops: len(x.s.Ops), Transport: x.opt.Transport, Graph: x.opt.Graph,
		Steps: len(x.prog.Steps), Streams: len(x.streams), Events: x.prog.Events, Waves: x.prog.Groups, WaveCapBytes: x.prog.GroupCapBytes}
	for _, d := range x.devices {
		if x.need[d] > res.PeakDeviceBytes {
			res.PeakDeviceBytes, res.StagingBytes = x.need[d], x.staging[d]
		}
	}
	res.Mode = "device copies on " + fmt.Sprint(len(x.streams)) + " streams"
	if x.mode == program.Waves {
		res.Mode = fmt.Sprintf("NCCL send/recv in %d groups", x.prog.Groups)
	}
	switch {
	case x.ipc && x.push:
		res.Mode += ", CUDA IPC pushed by the senders with flags"
	case x.ipc:
		res.Mode += ", CUDA IPC pulled by the receivers"
	}
	if x.opt.Graph {
		res.Mode += ", CUDA graph"
	}
	if err := x.fill(); err != nil {
		return nil, err
	}
	if err := x.barrier(); err != nil { // peers read this process's inputs
		return nil, err
	}
	if err := x.iteration(); err != nil {
		return nil, err
	}
	if err := x.syncAll(); err != nil {
		return nil, err
	}
	if err := x.check(res); err != nil {
		return nil, err
	}
	if x.opt.Graph {
		if err := x.capture(); err != nil {
			return nil, fmt.Errorf("capturing a CUDA graph: %w", err)
		}
	}
	for range x.opt.Warmup {
		if err := x.barrier(); err != nil {
			return nil, err
		}
		if err := x.timed(); err != nil {
			return nil, err
		}
	}
	var issue []units.Time
	ends := make([][]units.Time, len(x.streams))
	var gends [][]units.Time
	for range x.opt.Iters {
		if err := x.barrier(); err != nil { // IPC: every process starts together
			return nil, err
		}
		if err := x.timed(); err != nil {
			return nil, err
		}
		t, err := x.g.elapsed(x.t0, x.t1)
		if err != nil {
			return nil, err
		}
		res.Times = append(res.Times, t)
		issue = append(issue, x.issueTime)
		if x.opt.Profile && res.ProfileErr == "" {
			for i, st := range x.streams {
				if st == 0 {
					continue
				}
				e, err := x.g.elapsed(x.devT0[x.prog.Streams[i].Dev], x.profEv[i])
				if err != nil {
					res.ProfileErr = err.Error()
					break
				}
				ends[i] = append(ends[i], e)
			}
			if len(gends) == 0 {
				gends = make([][]units.Time, len(x.groupEv))
			}
			for k, ev := range x.groupEv {
				e, err := x.g.elapsed(x.devT0[x.devices[0]], ev)
				if err != nil {
					res.ProfileErr = err.Error()
					break
				}
				gends[k] = append(gends[k], e)
			}
		}
	}
	slices.Sort(issue)
	res.HostIssue = issue[len(issue)/2]
	if x.opt.Launch != nil && len(x.s.World) > 1 {
		// A refit ends when its last process does: a process that only
		// sends over CUDA IPC, or waits little for its peers, would report
		// its own short time.
		d := x.devices[0]
		all, err := x.g.allGather(d, encodeTimes(res.Times), x.comms[d][0], len(x.s.World))
		if err != nil {
			return nil, fmt.Errorf("gathering every process's times: %w", err)
		}
		if res.Times, err = slowest(all, len(x.s.World), len(res.Times)); err != nil {
			return nil, err
		}
	}
	if x.opt.Profile && res.ProfileErr == "" {
		res.StreamEnds = x.streamEnds(ends)
		for _, ge := range gends {
			if len(ge) > 0 {
				res.GroupEnds = append(res.GroupEnds, medianTime(ge))
			}
		}
	}
	// Outputs are rewritten with the same bytes each iteration: check again,
	// keeping the first failure's report.
	var again Result
	if err := x.check(&again); err != nil {
		return nil, err
	}
	if res.Verified && !again.Verified {
		res.Verified, res.WrongElems, res.FirstWrong = false, again.WrongElems, again.FirstWrong+" (after the timed iterations)"
	}
	if err := x.barrier(); err != nil { // no peer reads this arena any more
		return nil, err
	}
	return res, nil
}

// encodeTimes writes times as little-endian int64 picoseconds.
func encodeTimes(ts []units.Time) []byte {
	b := make([]byte, 0, 8*len(ts))
	for _, t := range ts {
		b = binary.LittleEndian.AppendUint64(b, uint64(t))
	}
	return b
}

// slowest returns, per iteration, the longest of every rank's times, from
// world ranks' encodeTimes of n times each, in rank order.
func slowest(all []byte, world, n int) ([]units.Time, error) {
	if len(all) != 8*n*world {
		return nil, fmt.Errorf("gathered %d bytes of times, want %d (%d ranks x %d iterations)", len(all), 8*n*world, world, n)
	}
	out := make([]units.Time, n)
	for r := range world {
		for i := range n {
			t := units.Time(binary.LittleEndian.Uint64(all[8*(r*n+i):]))
			out[i] = max(out[i], t)
		}
	}
	return out, nil
}

// streamEnds names each stream of this process by what runs on it, with
// the median of its end times.
func (x *Executor) streamEnds(ends [][]units.Time) []StreamEnd {
	kinds := make([][]string, len(x.streams))
	add := func(i int, k string) {
		if !slices.Contains(kinds[i], k) {
			kinds[i] = append(kinds[i], k)
		}
	}
	for _, st := range x.prog.Steps {
		switch st.Kind {
		case program.Local:
			k := x.s.Ops[st.Op].Kind.String()
			if st.Batch != nil {
				k = "batches"
			}
			add(st.Stream, k)
		case program.Xfer:
			add(st.Stream, "sends")
			add(st.RStream, "recvs")
		}
	}
	var out []StreamEnd
	for i, st := range x.streams {
		if st == 0 || len(ends[i]) == 0 {
			continue
		}
		k := x.prog.Streams[i]
		name := fmt.Sprintf("lane %d", k.Lane)
		if k.Lane < 0 {
			name = fmt.Sprintf("nccl %d", -1-k.Lane)
		}
		slices.Sort(kinds[i])
		if len(kinds[i]) > 0 {
			name += " (" + strings.Join(kinds[i], ", ") + ")"
		}
		out = append(out, StreamEnd{Device: k.Dev, Lane: k.Lane, Stream: name, End: medianTime(ends[i])})
	}
	return out
}

// barrier waits for every process of an IPC run; a no-op otherwise.
func (x *Executor) barrier() error {
	if !x.ipc {
		return nil
	}
	d := x.devices[0]
	if err := x.syncAll(); err != nil {
		return err
	}
	return x.g.barrier(d, x.comms[d][0], len(x.s.World))
}

// fill writes every input's pattern and the complement into every output,
// so a byte the schedule never writes cannot pass.
func (x *Executor) fill() error {
	for i := range x.s.Buffers {
		b := &x.s.Buffers[i]
		d, ok := x.devOf[int32(b.Rank)]
		if !ok || b.Kind == ir.Staging {
			continue
		}
		t := &x.s.Tensors[b.Tensor]
		a, err := planPattern(x.bufAddr[i], b.Tensor, t.Src.Shape, b.Box.Start, b.Box.Size, x.s.BufDType(int32(i)), b.Kind == ir.Output)
		if err != nil {
			return err
		}
		if err := x.g.fill(&a, x.origin[d]); err != nil {
			return err
		}
	}
	return x.syncAll()
}

// check verifies every local output buffer.
func (x *Executor) check(res *Result) error {
	res.Verified, res.CheckedBytes, res.WrongElems, res.FirstWrong = true, 0, 0, ""
	for i := range x.s.Buffers {
		b := &x.s.Buffers[i]
		d, ok := x.devOf[int32(b.Rank)]
		if !ok || b.Kind != ir.Output {
			continue
		}
		t := &x.s.Tensors[b.Tensor]
		var bad, first int64
		if qa, ok, err := planQuantCheck(x.s, i, x.bufAddr[i]); err != nil {
			return err
		} else if ok { // fp8 bytes or scales, against the quantized pattern
			if bad, first, err = x.g.verifyQuant(&qa, x.origin[d]); err != nil {
				return err
			}
		} else {
			a, err := planPattern(x.bufAddr[i], b.Tensor, t.Src.Shape, b.Box.Start, b.Box.Size, t.Src.DType, false)
			if err != nil {
				return err
			}
			if bad, first, err = x.g.verify(&a, x.origin[d]); err != nil {
				return err
			}
		}
		res.CheckedBytes += b.Bytes
		if bad > 0 {
			if res.WrongElems == 0 {
				res.FirstWrong = fmt.Sprintf("output of %s on rank %d, element %d of its box %v", t.Name, b.Rank, first, b.Box)
			}
			res.WrongElems += bad
			res.Verified = false
		}
	}
	return nil
}

func (x *Executor) syncAll() error {
	for _, st := range x.streams {
		if st != 0 {
			if err := x.g.sync(st); err != nil {
				return err
			}
		}
	}
	for _, d := range x.devices {
		if err := x.g.sync(x.origin[d]); err != nil {
			return err
		}
	}
	return nil
}

// timed runs one iteration between the timing events, and keeps the
// host's time to issue it in issueTime.
func (x *Executor) timed() error {
	first := x.origin[x.devices[0]]
	if err := x.g.record(x.t0, first); err != nil {
		return err
	}
	start := time.Now()
	if x.graph != 0 {
		if err := x.g.launchGraph(x.graph, first); err != nil {
			return err
		}
	} else if err := x.iteration(); err != nil {
		return err
	}
	x.issueTime = units.Time(time.Since(start).Nanoseconds()) * units.Nanosecond
	if err := x.g.record(x.t1, first); err != nil {
		return err
	}
	return x.g.sync(first)
}

// workRegion is one split quantize op's work memory.
type workRegion struct {
	dev  int
	addr uint64
	n    int64
}

// zeroWorks zeroes every split quantize op's work memory.
func (x *Executor) zeroWorks() error {
	for _, w := range x.works {
		if err := x.g.upload(w.dev, w.addr, make([]byte, w.n)); err != nil {
			return fmt.Errorf("zeroing a quantize's work memory: %w", err)
		}
	}
	return nil
}

// iteration issues the program once: every stream starts after the first
// origin stream's start and the first origin stream ends after them all.
func (x *Executor) iteration() (err error) {
	if x.workDirty && !x.capturing {
		// The last iteration stopped on an error: its work may be left
		// between a split quantize's launches.
		if err := x.syncAll(); err != nil {
			return err
		}
		if err := x.zeroWorks(); err != nil {
			return err
		}
		x.workDirty = false
	}
	defer func() {
		if err != nil {
			x.workDirty = true
		}
	}()
	g := x.g
	first := x.origin[x.devices[0]]
	if err := g.record(x.startEv[x.devices[0]], first); err != nil {
		return err
	}
	// The profile's timing events: in a graph, nodes of their own.
	timing := g.record
	if x.capturing {
		timing = g.recordNode
	}
	for _, d := range x.devices {
		if err := g.wait(x.origin[d], x.startEv[x.devices[0]]); err != nil {
			return err
		}
		if x.devT0 != nil {
			if err := timing(x.devT0[d], x.origin[d]); err != nil {
				return err
			}
			// Another device's origin joins the first again: a graph's
			// record node there would otherwise be unjoined work.
			if d != x.devices[0] {
				if err := g.record(x.startEv[d], x.origin[d]); err != nil {
					return err
				}
				if err := g.wait(first, x.startEv[d]); err != nil {
					return err
				}
			}
		}
	}
	for _, st := range x.streams {
		if st != 0 {
			if err := g.wait(st, x.startEv[x.devices[0]]); err != nil {
				return err
			}
		}
	}
	x.groupNo = 0
	for k := range x.prog.Steps {
		if err := x.issue(k); err != nil {
			return err
		}
	}
	for i, st := range x.streams {
		if st == 0 {
			continue
		}
		if x.profEv[i] != 0 {
			if err := timing(x.profEv[i], st); err != nil {
				return err
			}
		}
		if err := g.record(x.joinEv[i], st); err != nil {
			return err
		}
		if err := g.wait(first, x.joinEv[i]); err != nil {
			return err
		}
	}
	return nil
}

// capture records one iteration as a CUDA graph on the first origin stream.
// The capture begins and ends on one OS thread: CUDA refuses to end a
// capture on another (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD), and the Go
// scheduler may move a goroutine between threads at any call.
func (x *Executor) capture() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	first := x.origin[x.devices[0]]
	if err := x.g.beginCapture(first); err != nil {
		return err
	}
	x.capturing = true
	err := x.iteration()
	x.capturing = false
	graph, cerr := x.g.endCapture(first)
	if err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	x.graph = graph
	return nil
}

// local reports whether a rank runs in this process.
func (x *Executor) local(r int32) bool {
	_, ok := x.devOf[r]
	return ok
}

func (x *Executor) issue(k int) error {
	st := &x.prog.Steps[k]
	g := x.g
	switch st.Kind {
	case program.GroupStart:
		x.pending = x.pending[:0]
		return g.groupStart()
	case program.GroupEnd:
		if err := g.groupEnd(); err != nil {
			return err
		}
		for _, p := range x.pending {
			if err := g.record(p[0], p[1]); err != nil {
				return err
			}
		}
		if x.groupNo < len(x.groupEv) {
			if err := g.record(x.groupEv[x.groupNo], x.groupSt); err != nil {
				return err
			}
		}
		x.groupNo++
		return nil
	}
	op := &x.s.Ops[st.Op]
	var sendHere, recvHere bool
	var rop *ir.Op
	if st.Kind == program.Xfer {
		rop = &x.s.Ops[op.Match]
		sendHere, recvHere = x.local(op.Rank), x.local(rop.Rank)
	} else if !x.local(op.Rank) {
		return nil
	}
	// Wait for dependencies recorded on other streams.
	waitOn := func(stream int, evs []int32) error { return x.waitAll(x.streams[stream], evs) }
	stream := x.streams[st.Stream]
	switch {
	case st.Kind == program.Local:
		if err := waitOn(st.Stream, st.Waits); err != nil {
			return err
		}
		if st.Batch != nil {
			if err := x.batch(k, stream); err != nil {
				return err
			}
		} else if err := x.local1(st.Op, stream); err != nil {
			return err
		}
		return x.recordAll(stream, st.Record, st.More)
	case x.push:
		return x.issuePush(k, op, rop, sendHere, recvHere)
	case x.mode == program.Streams:
		if !recvHere {
			return nil // a peer process copies it
		}
		if err := waitOn(st.Stream, st.Waits); err != nil {
			return err
		}
		if err := g.copy(x.addr(rop.Dst), x.addr(op.Src), st.Bytes, stream); err != nil {
			return err
		}
		return x.recordAll(stream, st.Record, st.More)
	}
	// Waves mode: each local end of the transfer joins the open NCCL group;
	// its events are recorded once the group ends.
	if sendHere {
		if err := waitOn(st.Stream, st.Waits); err != nil {
			return err
		}
		d := x.devOf[op.Rank]
		if err := g.send(x.addr(op.Src), st.Bytes, x.peerOf[rop.Rank], x.comms[d][st.Comm], stream); err != nil {
			return err
		}
		if st.Record >= 0 {
			x.pending = append(x.pending, [2]handle{x.events[st.Record], stream})
		}
		for _, e := range st.More {
			x.pending = append(x.pending, [2]handle{x.events[e], stream})
		}
	}
	if recvHere {
		if err := waitOn(st.RStream, st.RWaits); err != nil {
			return err
		}
		d := x.devOf[rop.Rank]
		rs := x.streams[st.RStream]
		if err := g.recv(x.addr(rop.Dst), st.Bytes, x.peerOf[op.Rank], x.comms[d][st.Comm], rs); err != nil {
			return err
		}
		if st.RRecord >= 0 {
			x.pending = append(x.pending, [2]handle{x.events[st.RRecord], rs})
		}
		for _, e := range st.RMore {
			x.pending = append(x.pending, [2]handle{x.events[e], rs})
		}
	}
	return nil
}

// issuePush issues transfer step k as a push (see Executor.push): the
// sender's end if it is local, then the receiver's.
func (x *Executor) issuePush(k int, op, rop *ir.Op, sendHere, recvHere bool) error {
	st := &x.prog.Steps[k]
	g := x.g
	n := int64(x.sendNo[st.Op])
	data := x.flagAt[rop.Rank] + uint64(4*n)
	ready := x.flagAt[op.Rank] + uint64(4*(int64(x.nSends)+n))
	if sendHere {
		ss := x.streams[st.Stream]
		if x.ready[k] {
			if err := g.waitValue(ss, ready, 1); err != nil {
				return err
			}
		}
		if err := x.waitAll(ss, st.Waits); err != nil {
			return err
		}
		if err := g.copy(x.addr(rop.Dst), x.addr(op.Src), st.Bytes, ss); err != nil {
			return err
		}
		if err := g.writeValue(ss, data, 1); err != nil {
			return err
		}
		if err := x.recordAll(ss, st.Record, st.More); err != nil {
			return err
		}
	}
	if recvHere {
		rs := x.streams[st.RStream]
		if err := x.waitAll(rs, st.RWaits); err != nil {
			return err
		}
		if x.ready[k] {
			if err := g.writeValue(rs, ready, 1); err != nil {
				return err
			}
		}
		if err := g.waitValue(rs, data, 1); err != nil {
			return err
		}
		return x.recordAll(rs, st.RRecord, st.RMore)
	}
	return nil
}

// waitAll makes st wait for events evs.
func (x *Executor) waitAll(st handle, evs []int32) error {
	for _, e := range evs {
		if err := x.g.wait(st, x.events[e]); err != nil {
			return err
		}
	}
	return nil
}

// recordAll records event rec (unless -1) and events more on st.
func (x *Executor) recordAll(st handle, rec int32, more []int32) error {
	if rec >= 0 {
		if err := x.g.record(x.events[rec], st); err != nil {
			return err
		}
	}
	for _, e := range more {
		if err := x.g.record(x.events[e], st); err != nil {
			return err
		}
	}
	return nil
}

// depsWithinRanks checks that every dependency stays on its op's rank: one
// process per rank cannot wait on another process's ops.
func depsWithinRanks(s *ir.Schedule) error {
	for i := range int32(len(s.Ops)) {
		for _, d := range s.Deps(i) {
			if s.Ops[d].Rank != s.Ops[i].Rank {
				return fmt.Errorf("%w: op %d on rank %d depends on op %d on rank %d, which one process per rank cannot express (one process a GPU waits only for its own rank's ops; copies between processes carry flags, not events)", ErrScheduleNotSupported, i, s.Ops[i].Rank, d, s.Ops[d].Rank)
			}
		}
	}
	return nil
}

// addr is the device address of a byte range (or a box's buffer base).
func (x *Executor) addr(r ir.Region) uint64 { return x.bufAddr[r.Buf] + uint64(r.Offset) }

// localKind is how a local op is launched.
type localKind uint8

const (
	lpCopy   localKind = iota // a device copy (cuMemcpyDtoDAsync)
	lpCopyOn                  // the contiguous copy kernel on a few blocks (waves mode)
	lpBox                     // a box-copy kernel
	lpQuant                   // a quantize kernel
)

// localPlan is the launch of one local op, computed once in New so that
// issuing an iteration does no planning.
type localPlan struct {
	kind     localKind
	dst, src uint64
	n        int64
	kernel   string
	box      boxArgs
	quant    quantArgs
}

// batchPlan is the launch of a batch step: one box_copy_batch over the
// descriptors of its members, or of quantizes a launch per kernel's batch
// form, and the members that run on their own (the staging kernel's
// misaligned rows, a quantize alone with its kernel) in order after it.
type batchPlan struct {
	args   batchArgs
	ds     []batchDesc // until uploaded
	quants []quantBatch
	rest   []int32
}

// planLocals computes the launch of every local op of this process and of
// every batch step, and uploads the batches' descriptors, one allocation
// per device.
func (x *Executor) planLocals() error {
	x.lpOf = make([]int32, len(x.s.Ops))
	for i := range x.lpOf {
		x.lpOf[i] = -1
	}
	for i := range int32(len(x.s.Ops)) {
		op := &x.s.Ops[i]
		if op.Kind == ir.Send || op.Kind == ir.Recv || !x.local(op.Rank) {
			continue
		}
		lp, err := x.planLocal(i)
		if err != nil {
			return err
		}
		x.lpOf[i] = int32(len(x.lps))
		x.lps = append(x.lps, lp)
	}
	x.batches = map[int]*batchPlan{}
	descBytes := map[int]int64{}
	// The split quantize kernels' work memory, in the same allocation as
	// the descriptors: an offset per op, zeroed once (the kernels leave it
	// zero).
	type workAt struct {
		lp  int32
		dev int
		off int64
		n   int64
	}
	var works []workAt
	for i, k := range x.lpOf {
		if k < 0 || x.lps[k].kind != lpQuant || !program.IsSplitKernel(x.lps[k].kernel) {
			continue
		}
		a := &x.lps[k].quant
		d := x.devOf[x.s.Ops[i].Rank]
		w := workAt{lp: k, dev: d, off: descBytes[d], n: splitWorkBytes(a.Lead * a.NBR * a.NBC)}
		descBytes[d] += align(w.n)
		works = append(works, w)
	}
	for k := range x.prog.Steps {
		st := &x.prog.Steps[k]
		if st.Batch == nil || !x.local(x.s.Ops[st.Op].Rank) {
			continue
		}
		bp := &batchPlan{}
		if x.s.Ops[st.Batch[0]].Kind == ir.Quantize { // a batch holds quantizes or box copies
			bp.quants, bp.rest = planQuantBatches(st.Batch, func(i int32) *localPlan { return &x.lps[x.lpOf[i]] })
			x.batches[k] = bp
			d := x.prog.Streams[st.Stream].Dev
			for q := range bp.quants {
				bp.quants[q].args.Args = uint64(descBytes[d])
				descBytes[d] += align(int64(len(bp.quants[q].blob)))
			}
			continue
		}
		for _, i := range st.Batch {
			lp := &x.lps[x.lpOf[i]]
			box, kernel := lp.box, lp.kernel
			if lp.kind == lpCopy || lp.kind == lpCopyOn {
				var err error
				if box, kernel, err = planBoxCopy(view{lp.src, []int64{lp.n}, []int64{0}}, view{lp.dst, []int64{lp.n}, []int64{0}}, []int64{lp.n}, 1); err != nil {
					return err
				}
			}
			if d, ok := batchable(box, kernel); ok && lp.kind != lpQuant {
				bp.ds = append(bp.ds, d)
			} else {
				bp.rest = append(bp.rest, i)
			}
		}
		x.batches[k] = bp
		if len(bp.ds) > 0 {
			d := x.prog.Streams[st.Stream].Dev
			n := int64(len(bp.ds))
			bp.args = batchArgs{Desc: uint64(descBytes[d]), N: n}
			descBytes[d] += align(n*int64(unsafe.Sizeof(batchDesc{})) + 8*(n+1))
		}
	}
	for _, d := range x.devices {
		if descBytes[d] == 0 {
			continue
		}
		base, err := x.g.alloc(d, descBytes[d])
		if err != nil {
			return fmt.Errorf("allocating the batches' descriptors on GPU %d: %w", d, err)
		}
		x.descMem[d] = base
	}
	for _, w := range works {
		addr := x.descMem[w.dev] + uint64(w.off)
		x.lps[w.lp].quant.Work = addr
		x.works = append(x.works, workRegion{w.dev, addr, w.n})
	}
	if err := x.zeroWorks(); err != nil {
		return err
	}
	for k, bp := range x.batches {
		d := x.prog.Streams[x.prog.Steps[k].Stream].Dev
		for q := range bp.quants {
			qb := &bp.quants[q]
			qb.args.Args += x.descMem[d]
			qb.args.Prefix += qb.args.Args
			if err := x.g.upload(d, qb.args.Args, qb.blob); err != nil {
				return err
			}
			qb.blob = nil
		}
		if len(bp.ds) == 0 {
			continue
		}
		b, prefixAt, units := encodeBatch(bp.ds)
		bp.args.Desc += x.descMem[d]
		bp.args.Prefix, bp.args.Units = bp.args.Desc+uint64(prefixAt), units
		if err := x.g.upload(d, bp.args.Desc, b); err != nil {
			return err
		}
		bp.ds = nil
	}
	return nil
}

// planLocal computes the launch of a copy, pack, unpack or quantize.
func (x *Executor) planLocal(i int32) (localPlan, error) {
	op := &x.s.Ops[i]
	if op.Kind == ir.Quantize {
		a, kernel, err := x.planQuant(i)
		return localPlan{kind: lpQuant, quant: a, kernel: kernel}, err
	}
	if !op.Src.IsBox() && !op.Dst.IsBox() {
		lp := localPlan{kind: lpCopy, dst: x.addr(op.Dst), src: x.addr(op.Src), n: op.Src.Bytes}
		if x.mode == program.Waves && x.opt.LocalCopyBlocks >= 0 {
			// The copy kernel on a few blocks where it copies long runs;
			// a device copy otherwise.
			a, kernel, err := planBoxCopy(view{lp.src, []int64{lp.n}, []int64{0}}, view{lp.dst, []int64{lp.n}, []int64{0}}, []int64{lp.n}, 1)
			if err != nil {
				return lp, err
			}
			if strings.Contains(kernel, "long") && lp.n >= program.LongRunBytes {
				lp.kind, lp.box, lp.kernel = lpCopyOn, a, kernel
			}
		}
		return lp, nil
	}
	a, kernel, err := x.boxArgs(op)
	return localPlan{kind: lpBox, box: a, kernel: kernel}, err
}

// local1 issues a copy, pack, unpack or quantize as New planned it.
func (x *Executor) local1(i int32, st handle) error {
	lp := &x.lps[x.lpOf[i]]
	switch lp.kind {
	case lpQuant:
		return x.g.quantize(&lp.quant, lp.kernel, x.mode == program.Waves, st)
	case lpCopyOn:
		return x.g.copyOn(&lp.box, lp.kernel, x.opt.LocalCopyBlocks, st)
	case lpCopy:
		return x.g.copy(lp.dst, lp.src, lp.n, st)
	}
	return x.g.boxCopy(&lp.box, lp.kernel, st)
}

// batch issues a batch step: one kernel over its descriptors, then the
// members that run on their own.
func (x *Executor) batch(k int, st handle) error {
	bp := x.batches[k]
	if bp.args.N > 0 {
		if err := x.g.batchCopy(&bp.args, x.mode == program.Waves, st); err != nil {
			return err
		}
	}
	for q := range bp.quants {
		if err := x.g.quantizeBatch(&bp.quants[q].args, bp.quants[q].kernel, x.mode == program.Waves, st); err != nil {
			return err
		}
	}
	for _, i := range bp.rest {
		if err := x.local1(i, st); err != nil {
			return err
		}
	}
	return nil
}

// boxArgs plans the kernel of a pack, unpack or box copy.
func (x *Executor) boxArgs(op *ir.Op) (boxArgs, string, error) {
	s := x.s
	var size []int64
	side := func(r ir.Region, other ir.Region) view {
		b := &s.Buffers[r.Buf]
		if r.IsBox() {
			box := s.Box(r)
			size = box.Size
			return view{addr: x.bufAddr[r.Buf], full: b.Box.Size, start: box.Start}
		}
		// A byte range holds the other side's box, contiguous.
		ob := s.Box(other)
		return view{addr: x.addr(r), full: ob.Size, start: make([]int64, len(ob.Size))}
	}
	src, dst := side(op.Src, op.Dst), side(op.Dst, op.Src)
	var elem int64
	if b := &s.Buffers[op.Src.Buf]; b.Placed() {
		elem = s.BufElem(op.Src.Buf)
	} else {
		elem = s.BufElem(op.Dst.Buf)
	}
	return planBoxCopy(src, dst, size, elem)
}

// medianTime returns the median of times, which it sorts.
func medianTime(times []units.Time) units.Time {
	slices.Sort(times)
	return times[len(times)/2]
}
