package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
)

// Options tune a simulation.
type Options struct {
	// Ideal runs at line rates with zero op latencies: the conditions of the
	// speed-of-light bound.
	Ideal bool
	// FlowCap caps the rate of each single flow, per path class (indexed by
	// ir.Local, ir.NVLink, ir.Net); 0 means no cap. NCCL, for one, cannot
	// drive a NIC at full rate from one channel.
	FlowCap [3]units.Bandwidth
	// Loopback simulates the GPU executor's loopback mode: every rank on one
	// GPU, every transfer a device copy, all sharing that GPU's memory.
	Loopback bool
	// Exec is how the GPU executor runs the schedule; it matters only when
	// the topology has executor costs (topo.Executor) and Ideal is unset.
	Exec Exec
	// Timeline records each op's start and end (Result.Ops), and each
	// flow (as Flows does).
	Timeline bool
	// Flows records each flow: Result.FlowOf, FlowRes, FlowCoef, FlowLat
	// and FlowOps. Without it (or Timeline) the simulation keeps a flow's
	// state only while the flow lives.
	Flows bool
	// duplex, set by the executor model, adds each GPU's NCCL channels
	// as a resource of this capacity that NCCL transfers hold at both ends.
	duplex units.Bandwidth
	// lanes, set by the executor model, adds a resource per lane whose
	// batch kernels run beside NCCL (opCosts.lane names it per op).
	lanes []laneSpec
	// NoSymmetry simulates every flow, even where the schedule's symmetry
	// lets the simulator run one per class of flows alike and expand the
	// result (symmetry.go); the result is the same, bit for bit, slower.
	// Symmetry is never used when Timeline or Flows is set.
	NoSymmetry bool
	// GroupEnds records, when the executor model runs an NCCL program,
	// when each NCCL group ended on the first GPU taking part in it
	// (Result.GroupEnds), as m2n run --profile measures it. It turns
	// symmetry off.
	GroupEnds bool
	// StreamEnds records, when the executor model runs, when each stream
	// of the executor's program finishes its part (Result.StreamEnds), as
	// m2n run --profile measures it. It turns symmetry off.
	StreamEnds bool
	// Progress, if set, is told how far the simulation has come: once
	// before the first event, then every 4096 batches of
	// simultaneous events, and once at the end. Its reports are monotone
	// (simulated time and ops done never go back), it is never called
	// concurrently, and it changes nothing in the result.
	Progress func(Progress)
	// Stop, if set, is asked at each of Progress's points whether to give
	// up; when it says so the simulation ends with ErrStopped (a caller
	// that found the schedule or its bound wrong while it ran).
	Stop func() bool
}

// Progress is how far a simulation has come.
type Progress struct {
	Now     units.Time // the simulated time reached
	OpsDone int        // ops completed
	Ops     int        // ops of the schedule
	Events  int64      // flow starts plus flow ends so far
	// Flows is the flows the schedule runs: one per local op and per
	// send/recv pair, each an event when it starts and one when it ends.
	Flows int
}

// progressEvery is how many batches of simultaneous events pass between
// two calls of Options.Progress (a variable for the tests).
var progressEvery = 4096

// Resource classes.
const (
	NICEgress     = "nic-egress"
	NICIngress    = "nic-ingress"
	NVLinkEgress  = "nvlink-egress"
	NVLinkIngress = "nvlink-ingress"
	Memory        = "memory"
	FabricUp      = "fabric-up"
	FabricDown    = "fabric-down"
	// NCCLChannels is a GPU's NCCL send plus receive rate (the executor
	// model with NCCL transfers, topo.ExecCosts.DuplexRate).
	NCCLChannels = "nccl-channels"
	// BatchLane is the share of a GPU a lane's batch kernels run on beside
	// NCCL kernels (the executor model in waves mode: their thread blocks,
	// topo.Executor.BatchShared of the GPU's memory rate).
	BatchLane = "batch-lane"
)

// Resource is one shared capacity of the simulated machine.
type Resource struct {
	Name     string          // e.g. "gpu72/nic0-ingress"
	Class    string          // one of the resource classes
	GPU      int             // the GPU it belongs to; -1 for fabric links
	Domain   int             // the NVLink domain it belongs to
	Capacity units.Bandwidth // bytes per second
}

// ResourceStat is what a resource did during a simulation.
type ResourceStat struct {
	Resource
	Bytes       int64      // bytes it carried (a copy counts its reads and writes)
	Busy        units.Time // time it carried at least one flow
	Utilization float64    // Bytes / (Capacity x makespan)
}

// Span is when an op ran: from the start of its data movement (after its
// start latency) to its end. For a send/recv pair both ops share the span.
type Span struct {
	Ready, Start, End units.Time
}

// Result is the outcome of a simulation.
type Result struct {
	Makespan   units.Time     // when the last op completed
	Flows      int            // flows run: one per local op, one per transfer
	Events     int64          // flow starts plus flow ends
	Resources  []ResourceStat // every resource, in index order
	Bottleneck ResourceStat   // the most utilized resource
	Ops        []Span         // per op, when Options.Timeline is set
	// The flows, when Options.Flows or Timeline is set; a flow's id is its
	// place in the order flows were created.
	// FlowOf maps each op to its flow; a send and its recv share one.
	FlowOf []int32
	// FlowRes lists each flow's resources and their coefficients.
	FlowRes  [][]int32
	FlowCoef [][]float64
	FlowLat  []units.Time
	FlowOps  [][2]int32 // each flow's op(s); the second is -1 for a local op
	// Modeled, when the simulation modeled the executor (topo.Executor),
	// is the schedule as the executor runs it, one op per step of its
	// program, which Ops, FlowOf and FlowOps index; nil when they index
	// the schedule simulated. FlowRel is then each flow's host issue time:
	// it starts no earlier, plus its latency.
	Modeled *ir.Schedule
	FlowRel []units.Time
	// Groups is the NCCL groups of the executor's program, and HostIssue
	// the host's time to issue it (the busiest process's), when the
	// simulation modeled the executor (topo.Executor); else 0.
	Groups    int
	HostIssue units.Time
	// GroupEnds is, with Options.GroupEnds, when each NCCL group of the
	// executor's program ended on the first GPU taking part in it: its
	// kernel's end there (after its last transfer on that GPU and the
	// group's own latency), from the iteration's start.
	GroupEnds []units.Time
	// StreamEnds is, with Options.StreamEnds, when each stream of the
	// executor's program ended: its last op's end (a barrier's, with
	// NCCL), from the iteration's start, in the program's stream order.
	StreamEnds []StreamEnd
	// FlowClasses is the flows the engine ran when it used the schedule's
	// symmetry (one per class of flows alike, Options.NoSymmetry); 0 when
	// it ran every flow.
	FlowClasses int
}

// StreamEnd is when one stream of the executor's program ends: GPU and
// Lane as program.Stream names them (a negative lane: an NCCL
// communicator's stream).
type StreamEnd struct {
	GPU, Lane int
	End       units.Time
}

// ErrDeadlock reports a schedule whose ops can never all run.
var ErrDeadlock = errors.New("sim: deadlock")

// ErrStopped is the error of a simulation that Options.Stop stopped.
var ErrStopped = errors.New("sim: stopped")

// Run simulates a schedule on a topology.
func Run(s *ir.Schedule, tp *topo.Topology, opt Options) (*Result, error) {
	return run(s, tp, opt, nil)
}

// laneSpec is a lane's batch-kernel resource: its GPU and capacity.
type laneSpec struct {
	GPU      int
	Capacity units.Bandwidth
}

// opCosts is what the executor model (runProgram) sets per op of the
// schedule it simulates: when the host has issued it, its start latency
// (negative: its path class's) and its memory coefficient (0: 2, a copy's
// read and write).
type opCosts struct {
	rel  []units.Time
	lat  []units.Time
	coef []float64
	// beside is, per local op (0 elsewhere), the share of their own rate
	// NCCL transfers keep on the op's GPU while it runs there (a kernel
	// beside NCCL's); nil: none.
	beside []float64
	// lane is, per op, the lane resource (Options.lanes) it also holds,
	// with its memory coefficient; -1 or nil: none.
	lane []int32
}

// engineFunc runs the flow engine on a schedule (x: the executor model's
// per-op costs, or nil). The tests pass other engines and solvers.
type engineFunc func(s *ir.Schedule, tp *topo.Topology, opt Options, x *opCosts) (*Result, error)

// run simulates with the engine eng (nil: the exact engine and its
// solver).
func run(s *ir.Schedule, tp *topo.Topology, opt Options, eng engineFunc) (*Result, error) {
	if err := tp.Validate(); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	if eng == nil {
		eng = engineWith(nil)
	}
	if !opt.Ideal && !tp.Executor.IsZero() {
		return runProgram(s, tp, opt, eng)
	}
	return eng(s, tp, opt, nil)
}

// solver shares the resources among the active flows: the engine's view of
// the max-min solver (fluid; the tests' full-refill oracle). After solve,
// changes lists the groups whose level moved and the flows whose group
// did.
type solver interface {
	add(res []int32, coef []int64, limit int64) int32
	remove(id int32)
	solve()
	changes() ([]levelChange, []move)
	groups() int
	levelOf(g int32) int64
	weight(r int32) int64
	// setCapacity changes a resource's capacity (load units); the next
	// solve shares it anew.
	setCapacity(r int32, c u128)
}

func (f *fluid) changes() ([]levelChange, []move) { return f.levelCh, f.moves }
func (f *fluid) weight(r int32) int64             { return f.wsum[r] }
func (f *fluid) levelOf(g int32) int64            { return f.level[g] }

// setCapacity changes resource r's capacity: r is refilled at the next
// solve as if its flow set had changed.
func (f *fluid) setCapacity(r int32, c u128) {
	if f.capacity[r] != c {
		f.capacity[r] = c
		f.dirty = append(f.dirty, r)
	}
}

// engineWith is the engine with the solver newSolver makes (nil: fluid).
func engineWith(newSolver func(capacity []u128) solver) engineFunc {
	return func(s *ir.Schedule, tp *topo.Topology, opt Options, x *opCosts) (*Result, error) {
		e, err := newEngine(s, tp, opt, newSolver)
		if err != nil {
			return nil, err
		}
		if x != nil {
			for i, c := range x.coef {
				if c != 0 && !(c >= minCoef && c <= maxCoef) {
					return nil, fmt.Errorf("op %d: memory coefficient %g outside the simulator's range [%g, %g]", i, c, minCoef, maxCoef)
				}
			}
			e.rel, e.lat1, e.coef, e.lane = x.rel, x.lat, x.coef, x.lane
			for i, b := range x.beside {
				if b != 0 && !(b > 0 && b <= 1) {
					return nil, fmt.Errorf("op %d: NCCL's share beside it %g outside (0, 1]", i, b)
				}
				if b > 0 && b < 1 {
					// GPUs' capacities change as kernels come and go: each
					// flow of its own (no symmetry).
					e.beside, e.opt.NoSymmetry = x.beside, true
				}
			}
		}
		return e.run()
	}
}

type engine struct {
	s   *ir.Schedule
	tp  *topo.Topology
	opt Options

	res   []Resource
	fluid solver
	// per GPU (index into gpus): resource indices
	gpus   []int       // GPU ids in use
	gpuIdx map[int]int // GPU id -> index
	rankG  map[int32]int
	nvlE   []int32
	nvlI   []int32
	nicE   [][]int32
	nicI   [][]int32
	mem    []int32
	nccl   []int32 // per GPU, its NCCL channels; nil unless modeled
	lanes  []int32 // per lane (Options.lanes), its resource
	fabUp  map[int]int32
	fabDn  map[int]int32
	lat    [3]units.Time
	capRt  [3]int64 // per-class flow caps, rate units

	// op state
	waiting    []int32 // unmet dependencies
	dependents []int32 // CSR
	depStart   []int32
	ready      []bool // send/recv whose deps are met
	done       int

	// flows
	flowOf  []int32   // op -> flow id, when recording flows
	fl      []flowRec // the live flows, by slot; a slot is reused once its flow ends
	freeFl  []int32   // free slots of fl
	nflows  int32     // flows created: the next flow's id
	record  bool      // record every flow in the result
	resBuf  []int32   // with record: backing of the result's paths
	coefBuf []float64
	byFluid []int32      // fluid id -> flow
	active  []int32      // per resource, active flow count (for busy time)
	since   []units.Time // per resource, when it last became busy
	busy    []units.Time
	bytes   []u128 // per resource, bytes carried x coefficient (fixed point)

	// Groups: the flows sharing a bottleneck run at one rate, the group's
	// level, so a group keeps one clock for all of them. served is what
	// each flow of the group has been served (2^-40 bytes) from the
	// group's start up to at; a flow's tag is the served amount at which
	// it is done. members holds each group's flows as a heap by (tag, id);
	// the group's next completion is in groupEv.
	gLevel   []int64
	gServed  []u128
	gAt      []units.Time
	members  [][]int32
	gTouched []bool
	touched  []int32
	groupEv  groupHeap
	finished []int32 // flows done at this instant, from fire

	now        units.Time
	seq        int64
	totalFlows int // the flows the schedule runs (Progress.Flows)
	nops       int // the ops of the schedule (Progress.Ops)
	// q, with symmetry, is the quotient the engine runs instead of the
	// schedule (symmetry.go); nil without.
	q         *quotient
	caps      []u128 // per resource, its capacity
	newSolver func(capacity []u128) solver
	starts    eventHeap
	result    *Result
	err       error // a failure inside the event loop

	// The executor model (runProgram): per op, when the host has issued
	// it, its start latency (negative: its path class's) and its memory
	// coefficient (0: 2, a copy's read and write); nil otherwise.
	rel  []units.Time
	lat1 []units.Time
	coef []float64
	lane []int32
	// beside (opCosts.beside), and per GPU (index): the shares of the
	// local flows running there that slow its NCCL transfers, the share
	// its NCCL resources are at (0 before the first: 1), and those
	// resources (its NCCL channels, NVLink and NIC ports).
	beside    []float64
	besideAct [][]float64
	besideNow []float64
	besideRes [][]int32
}

// flowRec is one flow. It holds no pointers, so millions of them cost the
// garbage collector nothing to scan.
type flowRec struct {
	ops      [2]int32
	bytes    int64
	tag      u128  // with its group: the group's served amount at which it is done
	group    int32 // its group, -1 before its first solve
	hpos     int32 // its index in its group's member heap
	id       int32 // its place in the order flows were created
	fluidID  int32
	res      [maxFlowRes]int32 // the resources it holds: res[:nres]
	coef     [maxFlowRes]float64
	fx       [maxFlowRes]int64 // coef in fixed point (coefOf); with symmetry, W(F, R)
	nres     int8
	lat      units.Time
	class    ir.Class
	ready    units.Time
	start    units.Time
	finished bool
	// besideG is the GPU (index) whose NCCL transfers this local flow
	// slows while it runs (opCosts.beside); -1: none.
	besideG int32
}

// maxFlowRes is the most resources a flow holds: NIC egress and ingress and
// two fabric links.
const maxFlowRes = 6

// path returns the flow's resources and coefficients.
func (f *flowRec) path() ([]int32, []float64) { return f.res[:f.nres], f.coef[:f.nres] }

// hold appends a resource to the flow's path.
func (f *flowRec) hold(r int32, coef float64) {
	f.res[f.nres], f.coef[f.nres], f.fx[f.nres] = r, coef, coefOf(coef)
	f.nres++
}

func newEngine(s *ir.Schedule, tp *topo.Topology, opt Options, newSolver func(capacity []u128) solver) (*engine, error) {
	e := &engine{s: s, tp: tp, opt: opt, gpuIdx: map[int]int{}, rankG: map[int32]int{}, fabUp: map[int]int32{}, fabDn: map[int]int32{}}
	if !opt.Ideal {
		e.lat = [3]units.Time{ir.Local: tp.LatencyLocal, ir.NVLink: tp.LatencyNVLink, ir.Net: tp.LatencyNet}
	}
	for c, v := range opt.FlowCap {
		if v < 0 {
			return nil, fmt.Errorf("flow cap %v: must not be negative", v)
		}
		if v > 0 {
			if float64(v)*1e-12 > maxCapacityBpps {
				return nil, fmt.Errorf("flow cap %v: beyond the simulator's range (%v)", v, units.Bandwidth(maxCapacityBpps*1e12))
			}
			e.capRt[c] = max(1, rateOf(float64(v)*1e-12))
		}
	}
	nvl, nic := tp.NVLink, tp.NIC
	if opt.Ideal {
		nvl, nic = tp.NVLinkLine, tp.NICLine
	}
	add := func(r Resource) int32 {
		e.res = append(e.res, r)
		return int32(len(e.res) - 1)
	}
	for _, r := range s.World {
		g := r.GPU
		if opt.Loopback {
			g = 0
		} else if r.Domain != g/tp.GPUsPerDomain || g >= tp.GPUs() {
			return nil, fmt.Errorf("schedule puts rank %d on GPU %d in domain %d, but the topology (%d domains x %d GPUs) puts GPU %d in domain %d",
				r.Rank, r.GPU, r.Domain, tp.Domains, tp.GPUsPerDomain, g, g/tp.GPUsPerDomain)
		}
		if _, ok := e.gpuIdx[g]; !ok {
			e.gpuIdx[g] = len(e.gpus)
			e.gpus = append(e.gpus, g)
			dom := g / tp.GPUsPerDomain
			name := fmt.Sprintf("gpu%d", g)
			e.nvlE = append(e.nvlE, add(Resource{name + "/nvlink-egress", NVLinkEgress, g, dom, nvl}))
			e.nvlI = append(e.nvlI, add(Resource{name + "/nvlink-ingress", NVLinkIngress, g, dom, nvl}))
			var ne, ni []int32
			for k := range tp.NICsPerGPU {
				ne = append(ne, add(Resource{fmt.Sprintf("%s/nic%d-egress", name, k), NICEgress, g, dom, nic}))
				ni = append(ni, add(Resource{fmt.Sprintf("%s/nic%d-ingress", name, k), NICIngress, g, dom, nic}))
			}
			e.nicE, e.nicI = append(e.nicE, ne), append(e.nicI, ni)
			e.mem = append(e.mem, add(Resource{name + "/memory", Memory, g, dom, tp.Memory}))
			if opt.duplex > 0 {
				e.nccl = append(e.nccl, add(Resource{name + "/nccl-channels", NCCLChannels, g, dom, opt.duplex}))
			}
			if tp.Oversubscription > 1 {
				if _, ok := e.fabUp[dom]; !ok {
					up := units.Bandwidth(float64(nic) * float64(tp.GPUsPerDomain*tp.NICsPerGPU) / tp.Oversubscription)
					e.fabUp[dom] = add(Resource{fmt.Sprintf("domain%d/fabric-up", dom), FabricUp, -1, dom, up})
					e.fabDn[dom] = add(Resource{fmt.Sprintf("domain%d/fabric-down", dom), FabricDown, -1, dom, up})
				}
			}
		}
		e.rankG[int32(r.Rank)] = e.gpuIdx[g]
	}
	for k, l := range opt.lanes {
		e.lanes = append(e.lanes, add(Resource{fmt.Sprintf("gpu%d/batch-lane%d", l.GPU, k), BatchLane, l.GPU, l.GPU / tp.GPUsPerDomain, l.Capacity}))
	}
	caps := make([]u128, len(e.res))
	for i, r := range e.res {
		c := float64(r.Capacity) * 1e-12
		if !(c > 0) {
			return nil, fmt.Errorf("resource %s has capacity %v: must be positive", r.Name, r.Capacity)
		}
		if c > maxCapacityBpps {
			return nil, fmt.Errorf("resource %s has capacity %v: beyond the simulator's range (%v)", r.Name, r.Capacity, units.Bandwidth(maxCapacityBpps*1e12))
		}
		caps[i] = fixedFloor(c, rateBits+coefBits)
	}
	e.caps, e.newSolver = caps, newSolver
	if newSolver == nil {
		e.fluid = newFluid(caps)
	} else {
		e.fluid = newSolver(caps)
	}
	e.active = make([]int32, len(e.res))
	e.since = make([]units.Time, len(e.res))
	e.busy = make([]units.Time, len(e.res))
	e.bytes = make([]u128, len(e.res))
	return e, nil
}

func (e *engine) run() (*Result, error) {
	e.record = e.opt.Flows || e.opt.Timeline
	e.nops = len(e.s.Ops)
	// One flow per local op and per send/recv pair.
	for i := range e.s.Ops {
		if e.s.Ops[i].Kind != ir.Recv {
			e.totalFlows++
		}
	}
	if !e.record && !e.opt.NoSymmetry && len(e.opt.lanes) == 0 && e.nops >= symMinOps {
		sym := e.findSymmetry()
		if sym != nil && len(sym.urep)*symGain <= sym.units {
			e.quotient(sym)
		}
	}
	if e.beside != nil {
		ng := len(e.gpus)
		e.besideAct, e.besideNow, e.besideRes = make([][]float64, ng), make([]float64, ng), make([][]int32, ng)
		for g := range ng {
			e.besideNow[g] = 1
			rs := []int32{e.nvlE[g], e.nvlI[g]}
			rs = append(append(rs, e.nicE[g]...), e.nicI[g]...)
			if e.nccl != nil {
				rs = append(rs, e.nccl[g])
			}
			e.besideRes[g] = rs
		}
	}
	s := e.s
	n := int32(len(s.Ops))
	e.waiting = make([]int32, n)
	e.ready = make([]bool, n)
	if e.record {
		e.flowOf = make([]int32, n)
	}
	e.depStart = make([]int32, n+1)
	for i := range n {
		e.waiting[i] = s.Ops[i].DepLen
		for _, d := range s.Deps(i) {
			e.depStart[d+1]++
		}
		if e.record {
			e.flowOf[i] = -1
		}
	}
	for i := range n {
		e.depStart[i+1] += e.depStart[i]
	}
	e.dependents = make([]int32, e.depStart[n])
	fill := append([]int32(nil), e.depStart[:n]...)
	for i := range n {
		for _, d := range s.Deps(i) {
			e.dependents[fill[d]] = i
			fill[d]++
		}
	}
	nflows := e.totalFlows
	if e.record {
		e.result = &Result{FlowOf: e.flowOf}
		e.result.FlowRes, e.result.FlowCoef = make([][]int32, 0, nflows), make([][]float64, 0, nflows)
		e.result.FlowLat, e.result.FlowOps = make([]units.Time, 0, nflows), make([][2]int32, 0, nflows)
	} else {
		e.result = &Result{}
	}
	if e.opt.Timeline {
		e.result.Ops = make([]Span, n)
	}
	for i := range n {
		if e.waiting[i] == 0 {
			e.opReady(i)
		}
	}
	e.progress()
	for batch := 1; e.err == nil; batch++ {
		t, ok := e.nextTime()
		if !ok {
			break
		}
		e.now = t
		for e.err == nil {
			if e.starts.Len() > 0 && e.starts.q[0].at == t {
				e.startFlow(e.starts.pop().flow)
			} else if e.groupEv.Len() > 0 && e.groupEv.q[0].at == t {
				e.fire(e.groupEv.pop().group)
			} else {
				break
			}
		}
		if e.err == nil {
			e.rebalance()
		}
		if batch%progressEvery == 0 {
			e.progress()
			if e.opt.Stop != nil && e.opt.Stop() {
				e.err = ErrStopped
			}
		}
	}
	if e.err != nil {
		return nil, e.err
	}
	e.progress()
	if e.done != e.nops {
		return nil, fmt.Errorf("%w: %d of %d ops never ran (a dependency cycle through a send/recv pair?)", ErrDeadlock, e.nops-e.done, e.nops)
	}
	r := e.result
	r.Makespan = e.now
	r.Flows = int(e.nflows)
	if e.q != nil {
		r.Flows = e.q.sym.units
		r.FlowClasses = len(e.q.sym.urep)
	}
	for i := range e.res {
		j := i
		if e.q != nil {
			j = int(e.q.sym.rclass[i])
		}
		moved := e.bytes[j].float() / (1 << coefBits)
		st := ResourceStat{Resource: e.res[i], Bytes: int64(math.Round(moved)), Busy: e.busy[j]}
		if r.Makespan > 0 {
			st.Utilization = moved / (float64(e.res[i].Capacity) * r.Makespan.Seconds())
		}
		r.Resources = append(r.Resources, st)
		if st.Utilization > r.Bottleneck.Utilization {
			r.Bottleneck = st
		}
	}
	return r, nil
}

// nextTime is the time of the next event.
func (e *engine) nextTime() (units.Time, bool) {
	switch {
	case e.starts.Len() > 0 && e.groupEv.Len() > 0:
		return min(e.starts.q[0].at, e.groupEv.q[0].at), true
	case e.starts.Len() > 0:
		return e.starts.q[0].at, true
	case e.groupEv.Len() > 0:
		return e.groupEv.q[0].at, true
	}
	return 0, false
}

// progress reports how far the simulation has come, if asked to.
func (e *engine) progress() {
	if e.opt.Progress != nil {
		e.opt.Progress(Progress{Now: e.now, OpsDone: e.done, Ops: e.nops, Events: e.result.Events, Flows: e.totalFlows})
	}
}

// opReady handles an op whose dependencies are all met.
func (e *engine) opReady(i int32) {
	op := &e.s.Ops[i]
	switch op.Kind {
	case ir.Send, ir.Recv:
		e.ready[i] = true
		if !e.ready[op.Match] {
			return
		}
		snd := i
		if op.Kind == ir.Recv {
			snd = op.Match
		}
		e.newFlow(snd, op.Match+i-snd)
	default:
		e.newFlow(i, -1)
	}
}

// newFlow creates the flow of a local op (b = -1) or of a send/recv pair
// and schedules its start after the path's latency.
func (e *engine) newFlow(a, b int32) {
	var f flowRec
	var rel units.Time
	if q := e.q; q != nil {
		k := q.opClass[a]
		f, rel = q.sym.spec[k], q.sym.rel[k]
	} else {
		f, rel = e.unitFlow(a)
	}
	f.ops, f.ready, f.group, f.besideG = [2]int32{a, b}, e.now, -1, -1
	id := e.alloc(f)
	e.push(event{at: max(e.now, rel) + f.lat, flow: id})
	if e.opt.Timeline {
		e.result.Ops[a].Ready = e.now
		if b >= 0 {
			e.result.Ops[b].Ready = e.now
		}
	}
}

// spec is the flow of a local op (b = -1) or of a send/recv pair: its
// path and coefficients, bytes, class and start latency.
func (e *engine) spec(a, b int32) flowRec {
	op := &e.s.Ops[a]
	var f flowRec
	var class ir.Class
	if b < 0 {
		class = ir.Local
		g := e.rankG[op.Rank]
		coef := 2.0
		if e.coef != nil && e.coef[a] > 0 {
			coef = e.coef[a]
		}
		f.hold(e.mem[g], coef)
		if e.lane != nil && e.lane[a] >= 0 {
			// A batch kernel on its lane's share of the GPU.
			f.hold(e.lanes[e.lane[a]], coef)
		}
		f.bytes = op.Src.Bytes
		if op.Kind == ir.Quantize { // reads its source once, writes fp8 and scales
			c := 1.0
			if e.coef != nil && e.coef[a] > 0 { // the executor model: the kernel's rate
				c = e.coef[a]
			}
			f.coef[0], f.fx[0] = c, coefOf(c)
			f.bytes = op.Src.Bytes + op.Dst.Bytes + e.s.QuantScale[a].Bytes
		}
	} else {
		f.bytes = op.Src.Bytes
		sg, dg := e.rankG[op.Rank], e.rankG[op.Peer]
		// The GPUs as the engine placed them (loopback: all on one).
		sr := ir.Rank{GPU: e.gpus[sg], Domain: e.gpus[sg] / e.tp.GPUsPerDomain}
		dr := ir.Rank{GPU: e.gpus[dg], Domain: e.gpus[dg] / e.tp.GPUsPerDomain}
		sdom, ddom := sr.Domain, dr.Domain
		switch class = ir.LinkClass(sr, dr); class {
		case ir.Local:
			coef := 2.0
			if e.coef != nil && e.coef[a] > 0 {
				coef = e.coef[a]
			}
			f.hold(e.mem[sg], coef)
		case ir.NVLink:
			f.hold(e.nvlE[sg], 1)
			f.hold(e.nvlI[dg], 1)
			if e.nccl != nil {
				f.hold(e.nccl[sg], 1)
				f.hold(e.nccl[dg], 1)
			}
		default:
			k := e.tp.NICsPerGPU
			f.hold(e.nicE[sg][int(op.Peer)%k], 1)
			f.hold(e.nicI[dg][int(op.Rank)%k], 1)
			if up, ok := e.fabUp[sdom]; ok {
				f.hold(up, 1)
				f.hold(e.fabDn[ddom], 1)
			}
			if e.nccl != nil {
				f.hold(e.nccl[sg], 1)
				f.hold(e.nccl[dg], 1)
			}
		}
	}
	f.lat, f.class = e.lat[class], class
	if e.lat1 != nil && e.lat1[a] >= 0 {
		f.lat = e.lat1[a]
	}
	return f
}

// alloc puts a new flow in a free slot and returns the slot; with
// recording on, it records the flow in the result.
func (e *engine) alloc(f flowRec) int32 {
	if e.record {
		r := e.result
		for _, o := range f.ops {
			if o >= 0 {
				e.flowOf[o] = e.nflows
			}
		}
		// The paths of consecutive flows share backing arrays of a few
		// thousand entries: one allocation per thousand flows.
		res, coef := f.path()
		if cap(e.resBuf)-len(e.resBuf) < len(res) {
			e.resBuf, e.coefBuf = make([]int32, 0, 4096), make([]float64, 0, 4096)
		}
		a := len(e.resBuf)
		e.resBuf, e.coefBuf = append(e.resBuf, res...), append(e.coefBuf, coef...)
		r.FlowRes = append(r.FlowRes, e.resBuf[a:len(e.resBuf):len(e.resBuf)])
		r.FlowCoef = append(r.FlowCoef, e.coefBuf[a:len(e.coefBuf):len(e.coefBuf)])
		r.FlowLat, r.FlowOps = append(r.FlowLat, f.lat), append(r.FlowOps, f.ops)
	}
	f.id = e.nflows
	e.nflows++
	if k := len(e.freeFl); k > 0 {
		id := e.freeFl[k-1]
		e.freeFl = e.freeFl[:k-1]
		e.fl[id] = f
		return id
	}
	e.fl = append(e.fl, f)
	return int32(len(e.fl) - 1)
}

func (e *engine) startFlow(id int32) {
	f := &e.fl[id]
	f.start = e.now
	if f.bytes == 0 && e.rel != nil {
		// The executor model's barriers move nothing: done on arrival,
		// without entering the max-min solution.
		e.result.Events += e.mul(f)
		f.fluidID = -1
		if e.opt.Timeline {
			for _, o := range f.ops {
				if o >= 0 {
					e.result.Ops[o].Start = e.now
				}
			}
		}
		e.finishFlow(id)
		return
	}
	if e.beside != nil && f.ops[1] < 0 {
		if b := e.beside[f.ops[0]]; b > 0 && b < 1 {
			g := int32(e.rankG[e.s.Ops[f.ops[0]].Rank])
			f.besideG = g
			e.besideAct[g] = append(e.besideAct[g], b)
			e.applyBeside(g)
		}
	}
	res := f.res[:f.nres]
	f.fluidID = e.fluid.add(res, f.fx[:f.nres], e.capRt[f.class])
	for int(f.fluidID) >= len(e.byFluid) {
		e.byFluid = append(e.byFluid, -1)
	}
	e.byFluid[f.fluidID] = id
	e.result.Events += e.mul(f)
	for _, r := range res {
		if e.fluid.weight(r) > maxWeight {
			e.err = fmt.Errorf("more flows at once on %s than the simulator holds (coefficients summing to %d x 2^-%d)", e.resName(r), e.fluid.weight(r), coefBits)
		}
		if e.active[r] == 0 {
			e.since[r] = e.now
		}
		e.active[r]++
	}
	if e.opt.Timeline {
		for _, o := range f.ops {
			if o >= 0 {
				e.result.Ops[o].Start = e.now
			}
		}
	}
}

// fire ends the flows of group g that are done by now.
func (e *engine) fire(g int32) {
	e.advance(g)
	e.touch(g)
	h := e.members[g]
	e.finished = e.finished[:0]
	for len(h) > 0 && !e.gServed[g].less(e.fl[h[0]].tag) {
		e.finished = append(e.finished, e.popMember(g))
		h = e.members[g]
	}
	for _, id := range e.finished {
		e.finishFlow(id)
	}
}

func (e *engine) finishFlow(id int32) {
	f := &e.fl[id]
	f.finished = true
	res := f.res[:f.nres]
	if f.fluidID < 0 {
		res = nil // a barrier: it held nothing
	}
	for k, r := range res {
		e.bytes[r] = e.bytes[r].add(mul128(uint64(f.bytes), uint64(f.fx[k])))
		if e.active[r]--; e.active[r] == 0 {
			e.busy[r] += e.now - e.since[r]
		}
	}
	if f.fluidID >= 0 {
		e.fluid.remove(f.fluidID)
		e.byFluid[f.fluidID] = -1
	}
	if g := f.besideG; g >= 0 {
		act := e.besideAct[g]
		i := slices.Index(act, e.beside[f.ops[0]])
		e.besideAct[g] = append(act[:i], act[i+1:]...)
		e.applyBeside(g)
	}
	m := e.mul(f)
	e.result.Events += m
	ops := f.ops // opReady may move e.fl
	for _, o := range ops {
		if o < 0 {
			continue
		}
		if e.opt.Timeline {
			e.result.Ops[o].End = e.now
		}
		e.done += int(m)
		for _, d := range e.dependents[e.depStart[o]:e.depStart[o+1]] {
			if e.waiting[d]--; e.waiting[d] == 0 {
				e.opReady(d)
			}
		}
	}
	// Its completion was the flow's last pending event: the slot is free.
	e.freeFl = append(e.freeFl, id)
}

// applyBeside sets GPU g's NCCL resources to the least share of the
// kernels running beside them there (their own capacity when none runs).
func (e *engine) applyBeside(g int32) {
	share := 1.0
	for _, b := range e.besideAct[g] {
		share = min(share, b)
	}
	if e.besideNow[g] == share {
		return
	}
	e.besideNow[g] = share
	for _, r := range e.besideRes[g] {
		e.fluid.setCapacity(r, fixedFloor(float64(e.res[r].Capacity)*1e-12*share, rateBits+coefBits))
	}
}

// rebalance re-solves the rates the last batch of events changed: each
// group whose level moved keeps its clock up to now at the old level, and
// each flow that changes group carries what it has left into the new one.
func (e *engine) rebalance() {
	e.fluid.solve()
	levels, moves := e.fluid.changes()
	for n := e.fluid.groups(); len(e.gLevel) < n; {
		e.gLevel = append(e.gLevel, e.fluid.levelOf(int32(len(e.gLevel))))
		e.gServed = append(e.gServed, u128{})
		e.gAt = append(e.gAt, e.now)
		e.members = append(e.members, nil)
		e.gTouched = append(e.gTouched, false)
		e.groupEv.pos = append(e.groupEv.pos, -1)
	}
	for _, c := range levels {
		e.advance(c.group)
	}
	for _, m := range moves {
		if m.old >= 0 {
			e.advance(m.old)
		}
		e.advance(m.new)
	}
	for _, c := range levels {
		e.gLevel[c.group] = c.new
		e.touch(c.group)
	}
	for _, m := range moves {
		id := e.byFluid[m.id]
		f := &e.fl[id]
		left := bytesServed(f.bytes)
		if m.old >= 0 {
			left = f.tag.sub(e.gServed[m.old])
			if f.tag.less(e.gServed[m.old]) {
				left = u128{}
			}
			e.removeMember(m.old, id)
			e.touch(m.old)
		}
		f.group = m.new
		f.tag = e.gServed[m.new].add(left)
		e.pushMember(m.new, id)
		e.touch(m.new)
	}
	for _, g := range e.touched {
		e.gTouched[g] = false
		e.reschedule(g)
	}
	e.touched = e.touched[:0]
}

// advance brings group g's clock to now at its level.
func (e *engine) advance(g int32) {
	if dt := e.now - e.gAt[g]; dt > 0 {
		if l := e.gLevel[g]; l != noLevel && len(e.members[g]) > 0 {
			e.gServed[g] = e.gServed[g].add(mul128(uint64(l), uint64(dt)))
		}
		e.gAt[g] = e.now
	}
}

func (e *engine) touch(g int32) {
	if !e.gTouched[g] {
		e.gTouched[g] = true
		e.touched = append(e.touched, g)
	}
}

// maxTime bounds simulated time: a completion later than this is an
// error (about 53 days).
const maxTime = units.Time(math.MaxInt64 / 2)

// reschedule sets group g's next completion: its first member's.
func (e *engine) reschedule(g int32) {
	h := e.members[g]
	if len(h) == 0 {
		e.groupEv.remove(g)
		return
	}
	l := e.gLevel[g]
	if l <= 0 || l == noLevel {
		e.err = fmt.Errorf("sim: flows bottlenecked at group %d run at %d x 2^-%d bytes/ps, outside the simulator's resolution", g, l, rateBits)
		return
	}
	var dt int64
	if top := e.fl[h[0]].tag; e.gServed[g].less(top) {
		dt = top.sub(e.gServed[g]).ceilDiv(uint64(l))
	}
	if dt >= int64(maxTime) || e.gAt[g] > maxTime-units.Time(dt) {
		e.err = fmt.Errorf("sim: a flow would end past the simulator's clock (%v)", maxTime)
		return
	}
	e.groupEv.set(g, e.gAt[g]+units.Time(dt))
}

// memberBefore orders a group's flows: by tag, then by creation.
func (e *engine) memberBefore(a, b int32) bool {
	fa, fb := &e.fl[a], &e.fl[b]
	if fa.tag != fb.tag {
		return fa.tag.less(fb.tag)
	}
	return fa.id < fb.id
}

func (e *engine) placeMember(g int32, i int, id int32) {
	e.members[g][i] = id
	e.fl[id].hpos = int32(i)
}

func (e *engine) memberUp(g int32, i int) {
	h := e.members[g]
	id := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if !e.memberBefore(id, h[p]) {
			break
		}
		e.placeMember(g, i, h[p])
		i = p
	}
	e.placeMember(g, i, id)
}

func (e *engine) memberDown(g int32, i int) {
	h := e.members[g]
	n := len(h)
	id := h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && e.memberBefore(h[r], h[l]) {
			m = r
		}
		if !e.memberBefore(h[m], id) {
			break
		}
		e.placeMember(g, i, h[m])
		i = m
	}
	e.placeMember(g, i, id)
}

func (e *engine) pushMember(g, id int32) {
	e.members[g] = append(e.members[g], id)
	e.memberUp(g, len(e.members[g])-1)
}

func (e *engine) popMember(g int32) int32 {
	h := e.members[g]
	top := h[0]
	n := len(h) - 1
	e.members[g] = h[:n]
	if n > 0 {
		e.placeMember(g, 0, h[n])
		e.memberDown(g, 0)
	}
	return top
}

func (e *engine) removeMember(g, id int32) {
	h := e.members[g]
	i := int(e.fl[id].hpos)
	n := len(h) - 1
	e.members[g] = h[:n]
	if i == n {
		return
	}
	e.placeMember(g, i, h[n])
	e.memberDown(g, i)
	e.memberUp(g, int(e.fl[h[n]].hpos))
}

func (e *engine) push(ev event) {
	ev.seq = e.seq
	e.seq++
	e.starts.push(ev)
}

// ByClass sums resource stats per class, in a fixed order.
func ByClass(rs []ResourceStat) []ResourceStat {
	order := []string{NICEgress, NICIngress, NVLinkEgress, NVLinkIngress, Memory, FabricUp, FabricDown, NCCLChannels, BatchLane}
	sum := map[string]*ResourceStat{}
	for _, r := range rs {
		s, ok := sum[r.Class]
		if !ok {
			s = &ResourceStat{Resource: Resource{Name: r.Class, Class: r.Class, GPU: -1, Domain: -1}}
			sum[r.Class] = s
		}
		s.Bytes += r.Bytes
		s.Busy = max(s.Busy, r.Busy)
		s.Utilization = max(s.Utilization, r.Utilization)
		s.Capacity += r.Capacity
	}
	var out []ResourceStat
	for _, c := range order {
		if s, ok := sum[c]; ok {
			out = append(out, *s)
		}
	}
	return out
}
