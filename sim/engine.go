package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"

	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan/ir"
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
	// Timeline records each op's start and end.
	Timeline bool
	// Progress, if set, is called now and then with ops done and ops total.
	Progress func(done, total int)
}

// Resource classes.
const (
	NICEgress     = "nic-egress"
	NICIngress    = "nic-ingress"
	NVLinkEgress  = "nvlink-egress"
	NVLinkIngress = "nvlink-ingress"
	Memory        = "memory"
	FabricUp      = "fabric-up"
	FabricDown    = "fabric-down"
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
	// FlowOf maps each op to its flow; a send and its recv share one.
	FlowOf []int32
	// FlowRes lists each flow's resources and their coefficients.
	FlowRes  [][]int32
	FlowCoef [][]float64
	FlowLat  []units.Time
	FlowOps  [][2]int32 // each flow's op(s); the second is -1 for a local op
}

// ErrDeadlock reports a schedule whose ops can never all run.
var ErrDeadlock = errors.New("sim: deadlock")

// Run simulates a schedule on a topology.
func Run(s *ir.Schedule, tp *topo.Topology, opt Options) (*Result, error) {
	if err := tp.Validate(); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	e, err := newEngine(s, tp, opt)
	if err != nil {
		return nil, err
	}
	return e.run()
}

type engine struct {
	s   *ir.Schedule
	tp  *topo.Topology
	opt Options

	res   []Resource
	fluid *fluid
	// per GPU (index into gpus): resource indices
	gpus   []int       // GPU ids in use
	gpuIdx map[int]int // GPU id -> index
	rankG  map[int32]int
	nvlE   []int32
	nvlI   []int32
	nicE   [][]int32
	nicI   [][]int32
	mem    []int32
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
	flowOf  []int32 // op -> flow
	fl      []flowRec
	byFluid []int32      // fluid id -> flow
	active  []int32      // per resource, active flow count (for busy time)
	since   []units.Time // per resource, when it last became busy
	busy    []units.Time
	bytes   []float64

	now    units.Time
	seq    int64
	events eventHeap
	result *Result
}

type flowRec struct {
	ops      [2]int32
	bytes    float64
	left     float64 // bytes left at time last
	rate     float64 // bytes/ps
	last     units.Time
	version  int32
	fluidID  int32
	res      []int32
	coef     []float64
	lat      units.Time
	class    ir.Class
	ready    units.Time
	start    units.Time
	finished bool
}

func newEngine(s *ir.Schedule, tp *topo.Topology, opt Options) (*engine, error) {
	e := &engine{s: s, tp: tp, opt: opt, gpuIdx: map[int]int{}, rankG: map[int32]int{}, fabUp: map[int]int32{}, fabDn: map[int]int32{}}
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
	caps := make([]float64, len(e.res))
	for i, r := range e.res {
		caps[i] = float64(r.Capacity) * 1e-12
		if !(caps[i] > 0) {
			return nil, fmt.Errorf("resource %s has capacity %v: must be positive", r.Name, r.Capacity)
		}
	}
	e.fluid = newFluid(caps)
	e.active = make([]int32, len(e.res))
	e.since = make([]units.Time, len(e.res))
	e.busy = make([]units.Time, len(e.res))
	e.bytes = make([]float64, len(e.res))
	return e, nil
}

func (e *engine) run() (*Result, error) {
	s := e.s
	n := int32(len(s.Ops))
	e.waiting = make([]int32, n)
	e.ready = make([]bool, n)
	e.flowOf = make([]int32, n)
	e.depStart = make([]int32, n+1)
	for i := range n {
		e.waiting[i] = s.Ops[i].DepLen
		for _, d := range s.Deps(i) {
			e.depStart[d+1]++
		}
		e.flowOf[i] = -1
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
	e.result = &Result{FlowOf: e.flowOf}
	if e.opt.Timeline {
		e.result.Ops = make([]Span, n)
	}
	for i := range n {
		if e.waiting[i] == 0 {
			e.opReady(i)
		}
	}
	for e.events.Len() > 0 {
		t := e.events[0].at
		e.now = t
		for e.events.Len() > 0 && e.events[0].at == t {
			ev := heap.Pop(&e.events).(event)
			switch ev.kind {
			case evStart:
				e.startFlow(ev.flow)
			case evDone:
				f := &e.fl[ev.flow]
				if f.version == ev.version && !f.finished {
					e.finishFlow(ev.flow)
				}
			}
		}
		e.rebalance()
		if e.opt.Progress != nil && e.result.Events%4096 == 0 {
			e.opt.Progress(e.done, int(n))
		}
	}
	if e.done != int(n) {
		return nil, fmt.Errorf("%w: %d of %d ops never ran (a dependency cycle through a send/recv pair?)", ErrDeadlock, int(n)-e.done, n)
	}
	r := e.result
	r.Makespan = e.now
	r.Flows = len(e.fl)
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
	for _, f := range e.fl {
		r.FlowRes = append(r.FlowRes, f.res)
		r.FlowCoef = append(r.FlowCoef, f.coef)
		r.FlowLat = append(r.FlowLat, f.lat)
		r.FlowOps = append(r.FlowOps, f.ops)
	}
	return r, nil
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
	op := &e.s.Ops[a]
	f := flowRec{ops: [2]int32{a, b}, ready: e.now}
	var class ir.Class
	if b < 0 {
		class = ir.Local
		g := e.rankG[op.Rank]
		f.res, f.coef = []int32{e.mem[g]}, []float64{2}
		f.bytes = float64(op.Src.Bytes)
	} else {
		f.bytes = float64(op.Src.Bytes)
		sg, dg := e.rankG[op.Rank], e.rankG[op.Peer]
		sdom, ddom := e.gpus[sg]/e.tp.GPUsPerDomain, e.gpus[dg]/e.tp.GPUsPerDomain
		switch {
		case e.opt.Loopback || sg == dg:
			class = ir.Local
			f.res, f.coef = []int32{e.mem[sg]}, []float64{2}
		case sdom == ddom:
			class = ir.NVLink
			f.res, f.coef = []int32{e.nvlE[sg], e.nvlI[dg]}, []float64{1, 1}
		default:
			class = ir.Net
			k := e.tp.NICsPerGPU
			f.res = []int32{e.nicE[sg][int(op.Peer)%k], e.nicI[dg][int(op.Rank)%k]}
			f.coef = []float64{1, 1}
			if up, ok := e.fabUp[sdom]; ok {
				f.res = append(f.res, up, e.fabDn[ddom])
				f.coef = append(f.coef, 1, 1)
			}
		}
	}
	f.lat, f.class = e.lat[class], class
	id := int32(len(e.fl))
	e.fl = append(e.fl, f)
	e.flowOf[a] = id
	if b >= 0 {
		e.flowOf[b] = id
	}
	e.push(event{at: e.now + f.lat, kind: evStart, flow: id})
	if e.opt.Timeline {
		e.result.Ops[a].Ready = e.now
		if b >= 0 {
			e.result.Ops[b].Ready = e.now
		}
	}
}

func (e *engine) startFlow(id int32) {
	f := &e.fl[id]
	f.start, f.last, f.left = e.now, e.now, f.bytes
	f.fluidID = e.fluid.add(f.res, f.coef, e.capRt[f.class])
	for int(f.fluidID) >= len(e.byFluid) {
		e.byFluid = append(e.byFluid, -1)
	}
	e.byFluid[f.fluidID] = id
	e.result.Events++
	for _, r := range f.res {
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

func (e *engine) finishFlow(id int32) {
	f := &e.fl[id]
	f.finished = true
	moved := f.bytes
	for k, r := range f.res {
		e.bytes[r] += moved * f.coef[k]
		if e.active[r]--; e.active[r] == 0 {
			e.busy[r] += e.now - e.since[r]
		}
	}
	e.fluid.remove(f.fluidID)
	e.byFluid[f.fluidID] = -1
	e.result.Events++
	for _, o := range f.ops {
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
}

// rebalance re-solves the rates the last batch of events changed and
// reschedules the completions of the flows whose rate changed.
func (e *engine) rebalance() {
	for _, c := range e.fluid.solve() {
		id := e.byFluid[c.id]
		f := &e.fl[id]
		f.left -= c.old * float64(e.now-f.last)
		if f.left < 0 {
			f.left = 0
		}
		f.last = e.now
		f.rate = e.fluid.flows[c.id].rate
		f.version++
		dt := units.Time(math.Ceil(f.left / f.rate))
		e.push(event{at: e.now + dt, kind: evDone, flow: id, version: f.version})
	}
}

func (e *engine) push(ev event) {
	ev.seq = e.seq
	e.seq++
	heap.Push(&e.events, ev)
}

const (
	evStart = iota
	evDone
)

type event struct {
	at      units.Time
	seq     int64
	kind    int8
	flow    int32
	version int32
}

// eventHeap orders events by (time, sequence): deterministic on ties.
type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// ByClass sums resource stats per class, in a fixed order.
func ByClass(rs []ResourceStat) []ResourceStat {
	order := []string{NICEgress, NICIngress, NVLinkEgress, NVLinkIngress, Memory, FabricUp, FabricDown}
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
