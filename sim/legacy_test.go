package sim

// The simulator as it was before exact integer rates (issue 23): its
// engine and its floating-point max-min solver, kept verbatim but for
// names as the oracle that the new solver's results are held to within a
// tolerance (tolerance_test.go). Not used outside the tests.

import (
	"fmt"
	"math"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
)

// legacySolver shares the resources among the active flows: the legacyEngine's view of
// the max-min legacySolver. solve returns the flows whose rate changed since the
// last solve, with their old and new rates.
type legacySolver interface {
	add(res []int32, coef []float64, limit float64) int32
	remove(id int32)
	solve() []legacyChange
}

// legacyEngineRun is the legacy engine as an engineFunc; with perturb, a
// completion that falls on a picosecond boundary rounds up to the next
// one (the new solver's rates, floored, end such flows a picosecond
// later): a simulation that this moves is sensitive to the clock's
// rounding itself.
func legacyEngineRun(perturb bool) engineFunc {
	return func(s *ir.Schedule, tp *topo.Topology, opt Options, x *opCosts) (*Result, error) {
		e, err := legacyNewEngine(s, tp, opt, nil)
		if err != nil {
			return nil, err
		}
		e.perturb = perturb
		if x != nil {
			e.rel, e.lat1, e.coef, e.lane = x.rel, x.lat, x.coef, x.lane
		}
		return e.runAll()
	}
}

type legacyEngine struct {
	perturb bool // see legacyEngineRun
	s       *ir.Schedule
	tp      *topo.Topology
	opt     Options

	res         []Resource
	legacyFluid legacySolver
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
	capRt  [3]float64 // per-class flow caps, bytes/ps

	// op state
	waiting    []int32 // unmet dependencies
	dependents []int32 // CSR
	depStart   []int32
	ready      []bool // send/recv whose deps are met
	done       int

	// flows
	flowOf  []int32         // op -> flow id, when recording flows
	fl      []legacyFlowRec // the live flows, by slot; a slot is reused once its flow ends
	freeFl  []int32         // free slots of fl
	nflows  int32           // flows created: the next flow's id
	record  bool            // record every flow in the result
	resBuf  []int32         // with record: backing of the result's paths
	coefBuf []float64
	byFluid []int32      // legacyFluid id -> flow
	active  []int32      // per resource, active flow count (for busy time)
	since   []units.Time // per resource, when it last became busy
	busy    []units.Time
	bytes   []float64

	now    units.Time
	seq    int64
	events legacyEventHeap
	result *Result

	// The executor model (runProgram): per op, when the host has issued
	// it, its start latency (negative: its path class's) and its memory
	// coefficient (0: 2, a copy's read and write); nil otherwise.
	rel  []units.Time
	lat1 []units.Time
	lane []int32
	coef []float64
}

// legacyFlowRec is one flow. It holds no pointers, so millions of them cost the
// garbage collector nothing to scan.
type legacyFlowRec struct {
	ops      [2]int32
	bytes    float64
	left     float64 // bytes left at time last
	rate     float64 // bytes/ps
	last     units.Time
	version  int32
	fluidID  int32
	res      [legacyMaxFlowRes]int32 // the resources it holds: res[:nres]
	coef     [legacyMaxFlowRes]float64
	nres     int8
	lat      units.Time
	class    ir.Class
	ready    units.Time
	start    units.Time
	finished bool
}

// legacyMaxFlowRes is the most resources a flow holds: NIC egress and ingress and
// two fabric links.
const legacyMaxFlowRes = 6

// path returns the flow's resources and coefficients.
func (f *legacyFlowRec) path() ([]int32, []float64) { return f.res[:f.nres], f.coef[:f.nres] }

// hold appends a resource to the flow's path.
func (f *legacyFlowRec) hold(r int32, coef float64) {
	f.res[f.nres], f.coef[f.nres] = r, coef
	f.nres++
}

func legacyNewEngine(s *ir.Schedule, tp *topo.Topology, opt Options, newSolver func(capacity []float64) legacySolver) (*legacyEngine, error) {
	e := &legacyEngine{s: s, tp: tp, opt: opt, gpuIdx: map[int]int{}, rankG: map[int32]int{}, fabUp: map[int]int32{}, fabDn: map[int]int32{}}
	if !opt.Ideal {
		e.lat = [3]units.Time{ir.Local: tp.LatencyLocal, ir.NVLink: tp.LatencyNVLink, ir.Net: tp.LatencyNet}
	}
	for c, v := range opt.FlowCap {
		if v < 0 {
			return nil, fmt.Errorf("flow cap %v: must not be negative", v)
		}
		e.capRt[c] = float64(v) * 1e-12
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
	caps := make([]float64, len(e.res))
	for i, r := range e.res {
		caps[i] = float64(r.Capacity) * 1e-12
		if !(caps[i] > 0) {
			return nil, fmt.Errorf("resource %s has capacity %v: must be positive", r.Name, r.Capacity)
		}
	}
	if newSolver == nil {
		e.legacyFluid = legacyNewFluid(caps)
	} else {
		e.legacyFluid = newSolver(caps)
	}
	e.active = make([]int32, len(e.res))
	e.since = make([]units.Time, len(e.res))
	e.busy = make([]units.Time, len(e.res))
	e.bytes = make([]float64, len(e.res))
	return e, nil
}

func (e *legacyEngine) runAll() (*Result, error) {
	s := e.s
	n := int32(len(s.Ops))
	e.waiting = make([]int32, n)
	e.ready = make([]bool, n)
	e.record = e.opt.Flows || e.opt.Timeline
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
	// One flow per local op and per send/recv pair.
	nflows := 0
	for i := range n {
		if k := s.Ops[i].Kind; k != ir.Recv {
			nflows++
		}
	}
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
	for batch := 1; e.events.Len() > 0; batch++ {
		t := e.events.q[0].at
		e.now = t
		for e.events.Len() > 0 && e.events.q[0].at == t {
			ev := e.events.pop()
			switch ev.kind {
			case legacyEvStart:
				e.startFlow(ev.flow)
			case legacyEvDone:
				f := &e.fl[ev.flow]
				if f.version == ev.version && !f.finished {
					e.finishFlow(ev.flow)
				}
			}
		}
		e.rebalance()
		if batch%progressEvery == 0 {
			e.progress()
		}
	}
	e.progress()
	if e.done != int(n) {
		return nil, fmt.Errorf("%w: %d of %d ops never ran (a dependency cycle through a send/recv pair?)", ErrDeadlock, int(n)-e.done, n)
	}
	r := e.result
	r.Makespan = e.now
	r.Flows = int(e.nflows)
	for i := range e.res {
		st := ResourceStat{Resource: e.res[i], Bytes: int64(math.Round(e.bytes[i])), Busy: e.busy[i]}
		if r.Makespan > 0 {
			st.Utilization = e.bytes[i] / (float64(e.res[i].Capacity) * r.Makespan.Seconds())
		}
		r.Resources = append(r.Resources, st)
		if st.Utilization > r.Bottleneck.Utilization {
			r.Bottleneck = st
		}
	}
	return r, nil
}

// progress reports how far the simulation has come, if asked to.
func (e *legacyEngine) progress() {
	if e.opt.Progress != nil {
		e.opt.Progress(Progress{Now: e.now, OpsDone: e.done, Ops: len(e.s.Ops), Events: e.result.Events})
	}
}

// opReady handles an op whose dependencies are all met.
func (e *legacyEngine) opReady(i int32) {
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
func (e *legacyEngine) newFlow(a, b int32) {
	op := &e.s.Ops[a]
	f := legacyFlowRec{ops: [2]int32{a, b}, ready: e.now}
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
			f.hold(e.lanes[e.lane[a]], coef)
		}
		f.bytes = float64(op.Src.Bytes)
		if op.Kind == ir.Quantize { // reads its source once, writes fp8 and scales
			f.coef[0] = 1
			if e.coef != nil && e.coef[a] > 0 { // the executor model: the kernel's rate
				f.coef[0] = e.coef[a]
			}
			f.bytes = float64(op.Src.Bytes + op.Dst.Bytes + e.s.QuantScale[a].Bytes)
		}
	} else {
		f.bytes = float64(op.Src.Bytes)
		sg, dg := e.rankG[op.Rank], e.rankG[op.Peer]
		sdom, ddom := e.gpus[sg]/e.tp.GPUsPerDomain, e.gpus[dg]/e.tp.GPUsPerDomain
		switch {
		case e.opt.Loopback || sg == dg:
			class = ir.Local
			coef := 2.0
			if e.coef != nil && e.coef[a] > 0 {
				coef = e.coef[a]
			}
			f.hold(e.mem[sg], coef)
		case sdom == ddom:
			class = ir.NVLink
			f.hold(e.nvlE[sg], 1)
			f.hold(e.nvlI[dg], 1)
			if e.nccl != nil {
				f.hold(e.nccl[sg], 1)
				f.hold(e.nccl[dg], 1)
			}
		default:
			class = ir.Net
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
	at := e.now
	if e.rel != nil {
		if e.lat1[a] >= 0 {
			f.lat = e.lat1[a]
		}
		at = max(at, e.rel[a])
		if b >= 0 {
			at = max(at, e.rel[b])
		}
	}
	id := e.alloc(f)
	e.push(legacyEvent{at: at + f.lat, kind: legacyEvStart, flow: id})
	if e.opt.Timeline {
		e.result.Ops[a].Ready = e.now
		if b >= 0 {
			e.result.Ops[b].Ready = e.now
		}
	}
}

// alloc puts a new flow in a free slot and returns the slot; with
// recording on, it records the flow in the result.
func (e *legacyEngine) alloc(f legacyFlowRec) int32 {
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
	e.nflows++
	if k := len(e.freeFl); k > 0 {
		id := e.freeFl[k-1]
		e.freeFl = e.freeFl[:k-1]
		e.fl[id] = f
		return id
	}
	e.fl = append(e.fl, f)
	e.events.pos = append(e.events.pos, -1)
	return int32(len(e.fl) - 1)
}

func (e *legacyEngine) startFlow(id int32) {
	f := &e.fl[id]
	f.start, f.last, f.left = e.now, e.now, f.bytes
	if f.bytes == 0 && e.rel != nil {
		// The executor model's barriers move nothing: done on arrival,
		// without entering the max-min solution.
		e.result.Events++
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
	res, coef := f.path()
	f.fluidID = e.legacyFluid.add(res, coef, e.capRt[f.class])
	for int(f.fluidID) >= len(e.byFluid) {
		e.byFluid = append(e.byFluid, -1)
	}
	e.byFluid[f.fluidID] = id
	e.result.Events++
	for _, r := range res {
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

func (e *legacyEngine) finishFlow(id int32) {
	f := &e.fl[id]
	f.finished = true
	moved := f.bytes
	res, coef := f.path()
	if f.fluidID < 0 {
		res = nil // a barrier: it held nothing
	}
	for k, r := range res {
		e.bytes[r] += moved * coef[k]
		if e.active[r]--; e.active[r] == 0 {
			e.busy[r] += e.now - e.since[r]
		}
	}
	if f.fluidID >= 0 {
		e.legacyFluid.remove(f.fluidID)
		e.byFluid[f.fluidID] = -1
	}
	e.result.Events++
	ops := f.ops // opReady may move e.fl
	for _, o := range ops {
		if o < 0 {
			continue
		}
		if e.opt.Timeline {
			e.result.Ops[o].End = e.now
		}
		e.done++
		for _, d := range e.dependents[e.depStart[o]:e.depStart[o+1]] {
			if e.waiting[d]--; e.waiting[d] == 0 {
				e.opReady(d)
			}
		}
	}
	// Its completion was the flow's last pending legacyEvent: the slot is free.
	e.freeFl = append(e.freeFl, id)
}

// rebalance re-solves the rates the last batch of events changed and
// reschedules the completions of the flows whose rate changed.
func (e *legacyEngine) rebalance() {
	for _, c := range e.legacyFluid.solve() {
		id := e.byFluid[c.id]
		f := &e.fl[id]
		f.left -= c.old * float64(e.now-f.last)
		if f.left < 0 {
			f.left = 0
		}
		f.last = e.now
		f.rate = c.new
		f.version++
		q := f.left / f.rate
		if e.perturb {
			q += 1e-3 // a completion on a picosecond boundary rounds up to the next
		}
		dt := units.Time(math.Ceil(q))
		// The flow's completion moves: one pending legacyEvent per flow, updated
		// in place, as if pushed anew.
		e.events.set(legacyEvent{at: e.now + dt, seq: e.seq, kind: legacyEvDone, flow: id, version: f.version})
		e.seq++
	}
}

func (e *legacyEngine) push(ev legacyEvent) {
	ev.seq = e.seq
	e.seq++
	e.events.push(ev)
}

const (
	legacyEvStart = iota
	legacyEvDone
)

type legacyEvent struct {
	at      units.Time
	seq     int64
	kind    int8
	flow    int32
	version int32
}

// legacyEventHeap orders events by (time, sequence): deterministic on ties. A
// flow has at most one pending completion; pos locates it, so a rate legacyChange
// moves it instead of leaving a stale copy behind. It is a typed binary
// heap: container/heap would box every legacyEvent in an interface.
type legacyEventHeap struct {
	q   []legacyEvent
	pos []int32 // per flow: the index of its pending legacyEvDone in q, or -1
}

func (h *legacyEventHeap) Len() int { return len(h.q) }

func (a legacyEvent) before(b legacyEvent) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// place puts ev at index i and records where a completion went.
func (h *legacyEventHeap) place(i int, ev legacyEvent) {
	h.q[i] = ev
	if ev.kind == legacyEvDone {
		h.pos[ev.flow] = int32(i)
	}
}

func (h *legacyEventHeap) up(i int) {
	ev := h.q[i]
	for i > 0 {
		p := (i - 1) / 2
		if !ev.before(h.q[p]) {
			break
		}
		h.place(i, h.q[p])
		i = p
	}
	h.place(i, ev)
}

func (h *legacyEventHeap) down(i int) {
	n := len(h.q)
	ev := h.q[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.q[r].before(h.q[l]) {
			m = r
		}
		if !h.q[m].before(ev) {
			break
		}
		h.place(i, h.q[m])
		i = m
	}
	h.place(i, ev)
}

func (h *legacyEventHeap) push(ev legacyEvent) {
	h.q = append(h.q, ev)
	h.up(len(h.q) - 1)
}

// set pushes a flow's completion, or moves its pending one.
func (h *legacyEventHeap) set(ev legacyEvent) {
	i := h.pos[ev.flow]
	if i < 0 {
		h.push(ev)
		return
	}
	old := h.q[i]
	h.q[i] = ev
	if ev.before(old) {
		h.up(int(i))
	} else {
		h.down(int(i))
	}
}

func (h *legacyEventHeap) pop() legacyEvent {
	top := h.q[0]
	if top.kind == legacyEvDone {
		h.pos[top.flow] = -1
	}
	n := len(h.q) - 1
	last := h.q[n]
	h.q = h.q[:n]
	if n > 0 {
		h.q[0] = last
		h.down(0)
	}
	return top
}

// legacyFluid is a set of resources shared by active flows. Rates are max-min
// fair: progressive filling raises every unfrozen flow's rate together
// until some resource saturates, freezes the flows crossing it, and repeats.
// A flow may use a resource with a coefficient (2 for memory: a copy reads
// and writes each byte). Rates are in bytes per picosecond.
//
// Solving is incremental: only the connected component (flows linked by
// shared resources) around resources whose flow set changed is re-solved.
// When many flows are active, a local re-solve comes first (solveLocal): it
// re-solves only the flows on the changed resources, holding the others at
// their rates, and checks the result against the max-min conditions; it
// widens the set until they hold, and falls back to the component.
type legacyFluid struct {
	capacity []float64 // per resource, bytes/ps
	users    [][]int32 // per resource, its active flows
	userPos  [][]int32 // per resource, per user: index of the resource in the flow's list

	flows   []legacyFlowState
	pos     [][legacyMaxPath]int32 // per flow slot: its index in users[res[k]]
	limit   []float64              // per flow slot: its rate cap in bytes/ps; 0 for none
	free    []int32                // recycled flow slots
	nactive int                    // active flows
	ncapped int                    // active flows with a rate cap

	// Per resource, maintained by add and remove: the sum of the
	// coefficients of its flows. Coefficients are small integers (1, or 2
	// for a copy's memory), so the sum is exact in any order and equals
	// the one a solve would accumulate; intCoef turns false, for good, at
	// the first coefficient that is not, and solves then sum per flow.
	wsum    []float64
	intCoef bool

	// The state of the last solution, per resource: the level at which it
	// saturated (+Inf if it did not), the number of flows it bottlenecks,
	// and its load (sum of coefficient x rate).
	level []float64
	nb    []int32
	load  []float64
	// localMin is the number of active flows from which solve tries a local
	// re-solve first. Below it, every solve fills the whole component.
	localMin int
	// local and full count the solves of each kind, for tests and tuning.
	local, full int
	// scratch of the local re-solve, per flow slot and per resource
	nrate  []float64
	nbott  []int32
	nfrz   []bool
	lv     []float64
	sb     []int32
	frozAt []bool
	actv   []int32

	dirty []int32 // resources whose flow set changed since the last solve
	// scratch, stamped per solve
	resMark  []uint32
	flowMark []uint32
	frz      []uint32 // per flow slot: the epoch of the solve that froze it
	epoch    uint32
	compRes  []int32
	compFlow []int32
	left     []float64      // per resource in the component: capacity minus frozen load
	weight   []float64      // per resource: sum of coefficients of unfrozen flows
	count    []int32        // per resource: number of unfrozen flows
	changed  []legacyChange // flows whose rate changed in the last solve
	capped   []int32        // scratch: unfrozen flows with a rate cap
	act      []int32        // scratch: the resources of a full solve with unfrozen flows
	// scratch of the local re-solve: the flows of S on each resource of R,
	// in CSR form (sOff indexed by the resource's place in R)
	sOff  []int32
	sFlow []int32
	rIdx  []int32 // per resource: its place in R
}

// legacyChange records a flow whose rate a solve changed: its old and new rates.
type legacyChange struct {
	id       int32
	old, new float64
}

// legacyFlowState is what the solves read of a flow: 64 bytes, one cache line.
type legacyFlowState struct {
	res  [legacyMaxPath]int32
	coef [legacyMaxPath]float64
	rate float64 // bytes/ps
	bott int32   // the resource that froze it in the last solve; -1: its cap, or none
	n    int8
}

// legacyMaxPath is the most resources one flow holds at once: egress and ingress
// ports, two fabric links and a GPU's NCCL channels at each end.
const legacyMaxPath = 6

// legacyDefaultLocalMin is where local re-solving starts to pay: below it, a
// component is small enough to fill whole.
const legacyDefaultLocalMin = 2048

func legacyNewFluid(capacity []float64) *legacyFluid {
	n := len(capacity)
	f := &legacyFluid{
		capacity: capacity,
		users:    make([][]int32, n),
		userPos:  make([][]int32, n),
		resMark:  make([]uint32, n),
		left:     make([]float64, n),
		weight:   make([]float64, n),
		count:    make([]int32, n),
		level:    make([]float64, n),
		nb:       make([]int32, n),
		load:     make([]float64, n),
		lv:       make([]float64, n),
		sb:       make([]int32, n),
		frozAt:   make([]bool, n),
		wsum:     make([]float64, n),
		rIdx:     make([]int32, n),
		intCoef:  true,
		localMin: legacyDefaultLocalMin,
	}
	for r := range f.level {
		f.level[r] = math.Inf(1)
	}
	return f
}

// add starts a flow over resources res with coefficients coef and returns
// its id. Its rate is set by the next solve.
func (f *legacyFluid) add(res []int32, coef []float64, limit float64) int32 {
	var id int32
	if k := len(f.free); k > 0 {
		id = f.free[k-1]
		f.free = f.free[:k-1]
	} else {
		id = int32(len(f.flows))
		f.flows = append(f.flows, legacyFlowState{})
		f.pos = append(f.pos, [legacyMaxPath]int32{})
		f.limit = append(f.limit, 0)
		f.flowMark = append(f.flowMark, 0)
		f.frz = append(f.frz, 0)
		f.nrate = append(f.nrate, 0)
		f.nbott = append(f.nbott, -1)
		f.nfrz = append(f.nfrz, false)
	}
	f.nactive++
	if limit > 0 {
		f.ncapped++
	}
	f.limit[id] = limit
	f.frz[id] = 0
	fl := &f.flows[id]
	*fl = legacyFlowState{n: int8(len(res)), bott: -1}
	for k, r := range res {
		c := coef[k]
		if c != math.Trunc(c) || c <= 0 || c > 1<<20 {
			f.intCoef = false
		}
		f.wsum[r] += c
		fl.res[k], fl.coef[k] = r, c
		f.pos[id][k] = int32(len(f.users[r]))
		f.users[r] = append(f.users[r], id)
		f.userPos[r] = append(f.userPos[r], int32(k))
		f.dirty = append(f.dirty, r)
	}
	return id
}

// remove ends a flow.
func (f *legacyFluid) remove(id int32) {
	fl := &f.flows[id]
	f.nactive--
	if f.limit[id] > 0 {
		f.ncapped--
	}
	if fl.bott >= 0 {
		f.nb[fl.bott]--
	}
	for k := range int(fl.n) {
		r := fl.res[k]
		f.load[r] -= fl.coef[k] * fl.rate
		if f.load[r] < 0 {
			f.load[r] = 0
		}
		f.wsum[r] -= fl.coef[k]
		p := f.pos[id][k]
		us, ps := f.users[r], f.userPos[r]
		last := int32(len(us) - 1)
		if p != last {
			moved := us[last]
			us[p], ps[p] = moved, ps[last]
			f.pos[moved][ps[p]] = p
		}
		f.users[r], f.userPos[r] = us[:last], ps[:last]
		f.dirty = append(f.dirty, r)
	}
	fl.rate = 0
	f.free = append(f.free, id)
}

// solve recomputes the rates of the flows in the components touched since
// the last solve and returns the flows whose rate changed.
func (f *legacyFluid) solve() []legacyChange {
	f.changed = f.changed[:0]
	if len(f.dirty) == 0 {
		return f.changed
	}
	if f.nactive >= f.localMin && f.solveLocal() {
		f.local++
		return f.changed
	}
	f.full++
	e := f.stamp()
	// The component: every resource and flow reachable from a dirty resource.
	f.compRes, f.compFlow = f.compRes[:0], f.compFlow[:0]
	for _, r := range f.dirty {
		if f.resMark[r] != e {
			f.resMark[r] = e
			f.compRes = append(f.compRes, r)
		}
	}
	f.dirty = f.dirty[:0]
	for i := 0; i < len(f.compRes); i++ {
		for _, id := range f.users[f.compRes[i]] {
			if f.flowMark[id] == e {
				continue
			}
			f.flowMark[id] = e
			f.compFlow = append(f.compFlow, id)
			fl := &f.flows[id]
			for k := range int(fl.n) {
				if r := fl.res[k]; f.resMark[r] != e {
					f.resMark[r] = e
					f.compRes = append(f.compRes, r)
				}
			}
		}
	}
	// Progressive filling. Every unfrozen flow has the same rate, level.
	for _, r := range f.compRes {
		f.left[r] = f.capacity[r]
		f.weight[r] = f.wsum[r]
		f.count[r] = int32(len(f.users[r]))
		f.level[r] = math.Inf(1)
		f.nb[r] = 0
		f.load[r] = 0
	}
	if !f.intCoef { // sum the coefficients in the component's order
		for _, r := range f.compRes {
			f.weight[r] = 0
		}
		for _, id := range f.compFlow {
			fl := &f.flows[id]
			for k := range int(fl.n) {
				f.weight[fl.res[k]] += fl.coef[k]
			}
		}
	}
	f.capped = f.capped[:0]
	if f.ncapped > 0 {
		for _, id := range f.compFlow {
			if f.limit[id] > 0 {
				f.capped = append(f.capped, id)
			}
		}
	}
	active := append(f.act[:0], f.compRes...)
	unfrozen := len(f.compFlow)
	level := 0.0
	for unfrozen > 0 {
		var next float64
		active, next = f.nextSaturation(active, level)
		for _, id := range f.capped {
			if f.frz[id] != e && f.limit[id] < next {
				next = f.limit[id]
			}
		}
		if math.IsInf(next, 1) {
			break // flows on no resource: cannot happen, every flow has one
		}
		inc := next - level
		for _, r := range active {
			f.left[r] -= inc * f.weight[r]
		}
		level = next
		// Freeze capped flows that reached their cap.
		for _, id := range f.capped {
			if f.frz[id] != e && f.limit[id] <= level*(1+1e-12) {
				f.freeze(id, level, -1, e)
				unfrozen--
			}
		}
		// Freeze the flows of every resource saturated at this level.
		for _, r := range active {
			if f.count[r] == 0 || f.left[r] > 1e-12*f.capacity[r] {
				continue
			}
			f.level[r] = level
			for _, id := range f.users[r] {
				if f.frz[id] != e {
					f.freeze(id, level, r, e)
					unfrozen--
				}
			}
			f.weight[r] = 0
			f.left[r] = 0
		}
	}
	f.act = active
	// Record the solution's loads for local re-solves, summed in the
	// component's order (freeze counted the bottlenecks).
	for _, id := range f.compFlow {
		fl := &f.flows[id]
		for k := range int(fl.n) {
			f.load[fl.res[k]] += fl.coef[k] * fl.rate
		}
	}
	return f.changed
}

// nextSaturation drops from active the resources with no unfrozen flow
// left and returns the rest with the level at which the first of them
// saturates (+Inf when none is left).
func (f *legacyFluid) nextSaturation(active []int32, level float64) ([]int32, float64) {
	next := math.Inf(1)
	keep := active[:0]
	for _, r := range active {
		if f.count[r] == 0 {
			continue
		}
		keep = append(keep, r)
		if l := level + f.left[r]/f.weight[r]; l < next {
			next = l
		}
	}
	return keep, next
}

// stamp starts a new marking epoch and returns it.
func (f *legacyFluid) stamp() uint32 {
	f.epoch++
	if f.epoch == 0 { // wrapped: reset stamps
		clear(f.resMark)
		clear(f.flowMark)
		clear(f.frz)
		f.epoch = 1
	}
	return f.epoch
}

// freeze fixes a flow's rate at level and takes it out of the filling of
// the solve of epoch e; at is the resource that froze it (-1: its cap).
func (f *legacyFluid) freeze(id int32, level float64, at int32, e uint32) {
	fl := &f.flows[id]
	f.frz[id] = e
	fl.bott = at
	if at >= 0 {
		f.nb[at]++
	}
	if fl.rate != level {
		f.changed = append(f.changed, legacyChange{id, fl.rate, level})
	}
	fl.rate = level
	for k := range int(fl.n) {
		f.weight[fl.res[k]] -= fl.coef[k]
		f.count[fl.res[k]]--
	}
}

// legacyLocalRounds bounds how often a local re-solve widens its set before it
// gives the component to the full solve.
const legacyLocalRounds = 8

// solveLocal re-solves the flows on the changed resources (the set S),
// holding every other flow at its rate, and accepts the result when the
// max-min conditions hold on every resource S touches; otherwise it adds
// the flows of the resources where they fail to S and tries again. It
// reports false, changing nothing, when S grows past half the active flows
// or the rounds run out: the caller then fills the whole component.
//
// The conditions: a feasible allocation is max-min fair if and only if
// every flow has a bottleneck, a saturated resource on which no flow is
// faster. The flows outside S keep their rates and bottlenecks, so only a
// resource r that S touches can break them:
//   - if flows outside S are bottlenecked at r, r must saturate at their
//     rate (its level must not legacyChange);
//   - if a flow of S is bottlenecked at r at a level below r's old one, no
//     flow outside S on r may be faster.
//
// Levels are compared with a relative tolerance of 1e-9.
func (f *legacyFluid) solveLocal() bool {
	e := f.stamp()
	S, R := f.compFlow[:0], f.compRes[:0]
	addRes := func(r int32) {
		if f.resMark[r] != e {
			f.resMark[r] = e
			R = append(R, r)
		}
	}
	addFlow := func(id int32) {
		if f.flowMark[id] == e {
			return
		}
		f.flowMark[id] = e
		S = append(S, id)
		fl := &f.flows[id]
		for k := range int(fl.n) {
			addRes(fl.res[k])
		}
	}
	for _, r := range f.dirty {
		addRes(r)
		for _, id := range f.users[r] {
			addFlow(id)
		}
	}
	limit := f.nactive / 2
	for round := 0; ; round++ {
		if len(S) > limit || round == legacyLocalRounds {
			f.compFlow, f.compRes = S, R
			return false
		}
		f.fillLocal(S, R)
		bad := false
		for _, r := range R[:len(R):len(R)] {
			if f.violated(r, e) {
				bad = true
				for _, id := range f.users[r] {
					addFlow(id)
				}
			}
		}
		if !bad {
			break
		}
	}
	for _, id := range S {
		fl := &f.flows[id]
		nr := f.nrate[id]
		if nr != fl.rate {
			f.changed = append(f.changed, legacyChange{id, fl.rate, nr})
			for k := range int(fl.n) {
				f.load[fl.res[k]] += fl.coef[k] * (nr - fl.rate)
			}
		}
		if fl.bott >= 0 {
			f.nb[fl.bott]--
		}
		if b := f.nbott[id]; b >= 0 {
			f.nb[b]++
		}
		fl.rate, fl.bott = nr, f.nbott[id]
	}
	for _, r := range R {
		f.level[r] = f.lv[r]
	}
	f.compFlow, f.compRes = S, R
	f.dirty = f.dirty[:0]
	return true
}

// fillLocal runs progressive filling over the flows S on the resources R,
// each resource's capacity reduced by the load of the flows outside S. It
// writes the new rates and bottlenecks to nrate and nbott, each resource's
// saturation level to lv, the number of S flows its old solution
// bottlenecked there to sb, and whether an S flow froze there to frozAt.
func (f *legacyFluid) fillLocal(S, R []int32) {
	for _, r := range R {
		f.left[r] = f.capacity[r] - f.load[r]
		f.weight[r], f.count[r], f.sb[r] = 0, 0, 0
		f.lv[r], f.frozAt[r] = math.Inf(1), false
	}
	f.capped = f.capped[:0]
	for _, id := range S {
		fl := &f.flows[id]
		f.nfrz[id], f.nbott[id], f.nrate[id] = false, -1, 0
		if f.limit[id] > 0 {
			f.capped = append(f.capped, id)
		}
		if fl.bott >= 0 {
			f.sb[fl.bott]++
		}
		for k := range int(fl.n) {
			r := fl.res[k]
			f.left[r] += fl.coef[k] * fl.rate
			f.weight[r] += fl.coef[k]
			f.count[r]++
		}
	}
	for _, r := range R {
		f.left[r] = max(f.left[r], 0)
	}
	// The flows of S on each resource of R: a saturated resource freezes
	// them without scanning its other flows. Which flows freeze where does
	// not depend on their order, and with integer coefficients neither do
	// the weights left.
	csr := f.intCoef
	if csr {
		f.sOff = legacyResize(f.sOff, len(R)+1)
		f.sOff[0] = 0
		for i, r := range R {
			f.rIdx[r] = int32(i)
			f.sOff[i+1] = f.count[r]
		}
		for i := range R {
			f.sOff[i+1] += f.sOff[i]
		}
		f.sFlow = legacyResize(f.sFlow, int(f.sOff[len(R)]))
		for _, id := range S {
			fl := &f.flows[id]
			for k := range int(fl.n) {
				i := f.rIdx[fl.res[k]]
				f.sFlow[f.sOff[i]] = id
				f.sOff[i]++
			}
		}
		for i := len(R); i > 0; i-- { // the cursors moved each start to the next one's
			f.sOff[i] = f.sOff[i-1]
		}
		f.sOff[0] = 0
	}
	e := f.epoch
	freeze := func(id int32, level float64, at int32) {
		f.nfrz[id], f.nrate[id], f.nbott[id] = true, level, at
		fl := &f.flows[id]
		for k := range int(fl.n) {
			f.weight[fl.res[k]] -= fl.coef[k]
			f.count[fl.res[k]]--
		}
	}
	active := append(f.actv[:0], R...)
	unfrozen := len(S)
	level := 0.0
	for unfrozen > 0 {
		var next float64
		active, next = f.nextSaturation(active, level)
		for _, id := range f.capped {
			if !f.nfrz[id] && f.limit[id] < next {
				next = f.limit[id]
			}
		}
		if math.IsInf(next, 1) {
			break
		}
		inc := next - level
		for _, r := range active {
			f.left[r] -= inc * f.weight[r]
		}
		level = next
		for _, id := range f.capped {
			if !f.nfrz[id] && f.limit[id] <= level*(1+1e-12) {
				freeze(id, level, -1)
				unfrozen--
			}
		}
		for _, r := range active {
			if f.count[r] == 0 || f.left[r] > 1e-12*f.capacity[r] {
				continue
			}
			f.lv[r] = level
			if csr {
				i := f.rIdx[r]
				for _, id := range f.sFlow[f.sOff[i]:f.sOff[i+1]] {
					if !f.nfrz[id] {
						freeze(id, level, r)
						f.frozAt[r] = true
						unfrozen--
					}
				}
				f.weight[r] = 0
				f.left[r] = 0
				continue
			}
			for _, id := range f.users[r] {
				if f.flowMark[id] == e && !f.nfrz[id] {
					freeze(id, level, r)
					f.frozAt[r] = true
					unfrozen--
				}
			}
			f.weight[r] = 0
			f.left[r] = 0
		}
	}
	f.actv = active
}

// violated reports whether the local solution breaks the max-min
// conditions at resource r (see solveLocal); e marks the flows of S.
func (f *legacyFluid) violated(r int32, e uint32) bool {
	if f.nb[r]-f.sb[r] > 0 {
		return !legacySameLevel(f.lv[r], f.level[r])
	}
	if !f.frozAt[r] || f.lv[r] >= f.level[r] || legacySameLevel(f.lv[r], f.level[r]) {
		return false
	}
	for _, id := range f.users[r] {
		if f.flowMark[id] != e && f.flows[id].rate > f.lv[r]*(1+1e-9) {
			return true
		}
	}
	return false
}

// legacySameLevel compares two levels (+Inf for none) with a relative tolerance.
func legacySameLevel(a, b float64) bool {
	if math.IsInf(a, 1) || math.IsInf(b, 1) {
		return a == b
	}
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

// legacyResize returns s with length n, reusing its array when it is big enough;
// the contents are not cleared.
func legacyResize(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n, n+n/4)
	}
	return s[:n]
}
