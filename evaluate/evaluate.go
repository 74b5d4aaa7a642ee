// Package evaluate evaluates one route at one point: it builds the
// schedule, simulates it, bounds it and matches the scenario's reference
// measurement, into one [Record]. `m2n sim`, `m2n report` and `m2n run`
// fill and print that record. It is pure, as the planner and the
// simulator it calls: no files, clocks, devices or global randomness.
package evaluate

import (
	"fmt"
	"sync/atomic"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/sim"
)

// Record is one route evaluated at one point: the SOL bound beside the
// simulated time, with the bottleneck and, where the scenario has one, the
// reference measurement.
type Record struct {
	Point *scenario.Point // nil for a schedule read from a file
	Route string
	Ideal bool // simulated at line rates with zero latencies

	UniqueBytes int64      // bytes of the tensors, each counted once
	SOL         units.Time // the speed-of-light bound (plan.Bound), line rates
	SOLTerm     string     // the binding term of the bound, e.g. "network egress of rank 0"

	Modeled   units.Time // the simulated time
	ModeledOn string     // what the simulation ran on: the topology's preset, or the loopback GPU, and the executor model
	// ExecutorModel is the launch mode the executor model ran
	// ("one-process", "per-gpu"); "" where the simulation modeled the
	// schedule's ops alone.
	ExecutorModel string
	Bottleneck    sim.ResourceStat   // the most utilized resource
	Resources     []sim.ResourceStat // the resources summed by class (sim.ByClass)
	// Memory is what the schedule holds on its busiest GPU.
	Memory Memory
	// Framework is the frameworks' costs the user gave
	// ([workload.framework]): the busiest trainer rank's export and the
	// busiest generator rank's load; nil without them. The refit then
	// takes Framework.Export + Modeled + Framework.Load.
	Framework *FrameworkTime
	// Models says what the modeled time includes (Scope).
	Models string
	// ModeledHostIssue is the host's time to issue the schedule in the
	// executor model (topo.Executor); 0 without one.
	ModeledHostIssue units.Time
	// ModeledGroupEnds is, with Options.Sim.GroupEnds, when each NCCL group
	// of the executor model ended on the first GPU taking part in it
	// (sim.Result.GroupEnds): the model of Run.GroupEnds.
	ModeledGroupEnds []units.Time
	// ModeledStreamEnds is, with Options.Sim.StreamEnds, when each stream
	// of the executor model ended (sim.Result.StreamEnds): the model of
	// Run.StreamEnds, matched to it by GPU and lane.
	ModeledStreamEnds []sim.StreamEnd
	Ops               int // ops of the schedule
	Flows             int // flows simulated
	// FlowClasses is the classes of flows alike the simulator ran one flow
	// each for (sim.Result.FlowClasses); 0 when it ran every flow.
	FlowClasses int
	Events      int64 // flow starts plus flow ends

	Measured       units.Time // the scenario's reference measurement; 0 without one
	MeasuredSource string     // where the measurement comes from
	MeasuredNote   string     // the reference's note, e.g. "approximate"

	// TensorClasses sums a workload's tensors by class; nil without one.
	TensorClasses []Class

	// Run is what m2n run measured on GPUs for this schedule; nil for the
	// commands that do not run it.
	Run *Run
}

// Run is one schedule's run on GPUs (m2n run): the executor's result as
// plain values, beside the model of the same schedule in the Record.
type Run struct {
	Backend         string
	Launch          string       // "one-process", or "per-gpu" under a launcher
	Mode            string       // how transfers ran, as the executor says
	Transport       string       // the transport that ran: copy or nccl (auto resolved)
	Device          string       // the GPU's name
	Times           []units.Time // per timed iteration, sorted ascending
	Verified        bool         // every destination byte right, after the first and the last iteration
	CheckedBytes    int64
	WrongElems      int64
	FirstWrong      string
	Groups          int        // NCCL groups an iteration issues
	GroupCapBytes   int64      // the per-pair bytes groups were cut at; 0 when uncut
	HostIssue       units.Time // the host's time to issue one iteration (median)
	PeakDeviceBytes int64      // device memory for the schedule's buffers on the busiest GPU of the process
	StagingBytes    int64      // the staging part of PeakDeviceBytes
	Iterations      int        // timed iterations asked for
	// StreamEnds is, for a profiled run (m2n run --profile), when each
	// stream of the process finished its part of an iteration (median);
	// ProfileErr says why a profile could not be taken.
	StreamEnds []StreamEnd
	GroupEnds  []units.Time // profiled, NCCL groups: when each ended on the first GPU
	ProfileErr string
	// Err says why the schedule did not run (Times empty), or why a run
	// could not be modeled (the Record's model fields are then unset).
	Err error
}

// StreamEnd is when one GPU stream finished its part of an iteration,
// from the iteration's start on its device.
type StreamEnd struct {
	Device int
	Lane   int    // the executor program's lane (program.Stream; negative: an NCCL communicator's stream)
	Stream string // its lane or NCCL communicator, and the work it ran
	End    units.Time
}

// Ran reports whether the schedule ran and was timed.
func (r *Run) Ran() bool { return len(r.Times) > 0 }

// Median is the median timed iteration; 0 when it did not run.
func (r *Run) Median() units.Time {
	if !r.Ran() {
		return 0
	}
	return r.Times[len(r.Times)/2]
}

// Label names the record's point in tables: the point's label, or "-" for
// a schedule read from a file.
func (r *Record) Label() string {
	if r.Point == nil {
		return "-"
	}
	return r.Point.Label()
}

// HasMeasured reports whether the record has a reference measurement.
func (r *Record) HasMeasured() bool { return r.Measured > 0 }

// RunError is the model's error against the GPU run: modeled / measured
// median - 1; 0 without a run or a model.
func (r *Record) RunError() float64 {
	if r.Run == nil || !r.Run.Ran() || r.Run.Err != nil || r.Modeled <= 0 {
		return 0
	}
	return r.Modeled.Seconds()/r.Run.Median().Seconds() - 1
}

// MeasuredError is modeled / measured - 1; 0 without a measurement.
func (r *Record) MeasuredError() float64 {
	if !r.HasMeasured() {
		return 0
	}
	return r.Modeled.Seconds()/r.Measured.Seconds() - 1
}

// Ratio is modeled / SOL; 0 when the SOL is 0.
func (r *Record) Ratio() float64 {
	if r.SOL <= 0 {
		return 0
	}
	return float64(r.Modeled) / float64(r.SOL)
}

// Options tune an evaluation.
type Options struct {
	Sim sim.Options
	// References are the scenario's measurements; the last one matching the
	// route and point is the record's. Leave them out for a point whose
	// tensors are not what was measured (scaled down, say).
	References []scenario.Reference
	// LoopbackMemory, when set, models the GPU executor's loopback mode:
	// every rank on one GPU that copies at this rate (read+write). The SOL
	// stays the bound on the point's cluster.
	LoopbackMemory units.Bandwidth
	// Machine, when set, models the schedule as run on that machine: its
	// achievable rates, latencies and executor costs (a measured preset),
	// on the point's shape (domains, placement). The SOL stays the
	// point's topology's.
	Machine *topo.Topology
	// Executor, when set, is the GPU executor's costs to model on the
	// point's own topology (rates and latencies unchanged): how the
	// schedule would run with m2n's executor as measured elsewhere.
	Executor *topo.Executor
	// Progress, if set, follows the simulation (as sim.Options.Progress,
	// which it replaces) with the schedule's SOL bound, 0 until the bound
	// (computed beside the simulation) is known: an estimate of the
	// makespan, for a progress bar. It changes nothing in the record.
	Progress func(p sim.Progress, sol units.Time)
	// Framework is the frameworks' own costs around the transfer, as the
	// user measured them ([workload.framework]); nil: none.
	Framework *scenario.FrameworkCosts
}

// Build plans a route at a sweep point.
func Build(p *scenario.Point, opt plan.Options) (*ir.Schedule, error) {
	s, err := plan.Build(pointTensors(p), p.Topology, opt)
	if err != nil {
		return nil, pointErr(p, opt.Route, err)
	}
	return s, nil
}

// pointErr says which point and route an error is of.
func pointErr(p *scenario.Point, route string, err error) error {
	return fmt.Errorf("point %s, route %s: %w", p.Label(), route, err)
}

// pointTensors are the tensors a point moves.
func pointTensors(p *scenario.Point) []ir.Tensor {
	tensors := make([]ir.Tensor, len(p.Tensors))
	for i, t := range p.Tensors {
		tensors[i] = ir.Tensor{Name: t.Name, Src: t.Src, Dst: t.Dst, Quant: t.Quant}
	}
	return tensors
}

// Point builds a route at a sweep point (popt names the route) and
// evaluates its schedule. It returns the schedule and the simulation with
// the record, for a trace. The schedule's data flow check
// ([plan.BuildDeferred]) and its bound run beside the simulation, on
// another core where there is one; an error of either is the point's.
func Point(p *scenario.Point, popt plan.Options, opt Options) (Record, *ir.Schedule, *sim.Result, error) {
	s, verify, err := plan.BuildDeferred(pointTensors(p), p.Topology, popt)
	if err != nil {
		return Record{}, nil, nil, pointErr(p, popt.Route, err)
	}
	rec, res, err := schedule(s, p.Topology, opt, verify)
	if err != nil {
		return Record{}, nil, nil, pointErr(p, popt.Route, err)
	}
	AtPoint(&rec, p, opt.References)
	return rec, s, res, nil
}

// AtPoint completes the record of a schedule evaluated at point p: the
// point, its tensor classes, and the last of refs that matches its route
// and point (the measurement beside the model).
func AtPoint(rec *Record, p *scenario.Point, refs []scenario.Reference) {
	rec.Point = p
	rec.TensorClasses = TensorClasses(p)
	for _, ref := range refs {
		if ref.Route == rec.Route && ref.Matches(p) {
			rec.Measured, rec.MeasuredSource, rec.MeasuredNote = ref.Measured, ref.Source, ref.Note
		}
	}
}

// Skip is a route at a point that was not evaluated because it passes a
// limit (a staging cap too small for it, the ops or memory limit): the
// other routes and points go on, and every output lists it with Reason.
type Skip struct {
	Point  *scenario.Point // nil for a schedule file
	Route  string
	Reason string
}

// Label names the skip's point ("-" without sweeps).
func (k Skip) Label() string {
	if k.Point == nil {
		return "-"
	}
	return k.Point.Label()
}

// Excludes is what no modeled time includes: the frameworks' own work.
const Excludes = "framework export and load (the trainer gathering its weights for export, the generator loading them into its engine), process start-up and synchronization"

// Models names what a modeled time includes: the data movement over the
// links, plus the GPU executor's measured costs where a measured preset
// models it.
func Models(executor bool) string {
	if executor {
		return "data movement over the links, and the GPU executor's measured costs (launches, NCCL groups, host issue)"
	}
	return "data movement over the links (achievable rates, op latencies)"
}

// FrameworkTime is the frameworks' time around one refit.
type FrameworkTime struct {
	Export, Load units.Time
}

// FrameworkOf charges the user's framework costs to a schedule: each rank
// exports the tensors of its input buffers and loads those of its output
// buffers (per tensor, and per GiB of their bytes); ranks work in
// parallel, so the busiest exporter and the busiest loader count.
func FrameworkOf(s *ir.Schedule, c *scenario.FrameworkCosts) *FrameworkTime {
	if c == nil {
		return nil
	}
	type share struct {
		tensors map[int]bool
		bytes   int64
	}
	in, out := map[int]*share{}, map[int]*share{}
	for i := range s.Buffers {
		b := &s.Buffers[i]
		var m map[int]*share
		switch b.Kind {
		case ir.Input:
			m = in
		case ir.Output:
			m = out
		default:
			continue
		}
		sh := m[b.Rank]
		if sh == nil {
			sh = &share{tensors: map[int]bool{}}
			m[b.Rank] = sh
		}
		sh.tensors[b.Tensor] = true
		sh.bytes += b.Bytes
	}
	cost := func(m map[int]*share, perTensor, perGiB units.Time) units.Time {
		var most units.Time
		for _, sh := range m {
			t := units.Time(len(sh.tensors))*perTensor + units.Time(float64(sh.bytes)/(1<<30)*float64(perGiB)+0.5)
			most = max(most, t)
		}
		return most
	}
	return &FrameworkTime{Export: cost(in, c.ExportPerTensor, c.ExportPerGiB), Load: cost(out, c.LoadPerTensor, c.LoadPerGiB)}
}

// Memory is a schedule's memory on one GPU (all the ranks it hosts): the
// weights it holds for the refit (source shards and destination weights,
// in the destination dtype with FP8 scales), its staging peak, and their
// total; of the GPU with the largest total. Optimizer state, activations
// and the generator's KV cache are not in it.
type Memory struct {
	GPU           int   // the GPU with the largest total
	ResidentBytes int64 // its input and output buffers
	StagingBytes  int64 // its staging (arena extent plus other staging buffers)
	TotalBytes    int64
	CapacityBytes int64 // the topology's GPU memory; 0: unknown
	Fits          bool  // TotalBytes <= CapacityBytes (false when unknown)
	CapacityKnown bool
}

// MemoryOf computes a schedule's memory per GPU against the topology's GPU
// memory.
func MemoryOf(s *ir.Schedule, tp *topo.Topology) Memory {
	gpuOf := map[int]int{}
	for _, r := range s.World {
		gpuOf[r.Rank] = r.GPU
	}
	resident, staging := map[int]int64{}, map[int]int64{}
	for i := range s.Buffers {
		b := &s.Buffers[i]
		if b.Kind == ir.Input || b.Kind == ir.Output {
			resident[gpuOf[b.Rank]] += b.Bytes
		}
	}
	for r, n := range s.StagingByRank() {
		staging[gpuOf[r]] += n
	}
	m := Memory{GPU: -1, CapacityBytes: tp.GPUMemoryBytes, CapacityKnown: tp.GPUMemoryBytes > 0}
	gpus := map[int]bool{}
	for g := range resident {
		gpus[g] = true
	}
	for g := range staging {
		gpus[g] = true
	}
	for g := range gpus {
		t := resident[g] + staging[g]
		if t > m.TotalBytes || t == m.TotalBytes && (m.GPU < 0 || g < m.GPU) {
			m.GPU, m.ResidentBytes, m.StagingBytes, m.TotalBytes = g, resident[g], staging[g], t
		}
	}
	m.Fits = m.CapacityKnown && m.TotalBytes <= m.CapacityBytes
	return m
}

// Schedule evaluates a built schedule on a topology: it simulates the
// schedule and bounds its route over the schedule's tensors. A failure of
// either is an error, never a zero in the record.
func Schedule(s *ir.Schedule, tp *topo.Topology, opt Options) (Record, *sim.Result, error) {
	return schedule(s, tp, opt, nil)
}

// schedule is Schedule with the schedule's deferred data flow check
// (nil: none). The check, then the bound, run on a goroutine beside the
// simulation (both read what it reads, and write nothing it does). An
// error of either stops the simulation at its next progress point and is
// the result, the check's first (the schedule is what the simulation
// ran); a panic there is the caller's, as it was before they moved.
func schedule(s *ir.Schedule, tp *topo.Topology, opt Options, verify func() error) (Record, *sim.Result, error) {
	rec := Record{Route: s.Route, Ideal: opt.Sim.Ideal, Ops: len(s.Ops), ModeledOn: tp.Preset, Memory: MemoryOf(s, tp), Framework: FrameworkOf(s, opt.Framework)}
	var (
		sol      plan.SOL
		sideErr  error
		panicked any
		failed   atomic.Bool  // the side found an error: stop the simulation
		solTime  atomic.Int64 // units.Time, for progress: 0 until the bound is known
		sideDone = make(chan struct{})
	)
	go func() {
		defer close(sideDone)
		defer func() {
			if r := recover(); r != nil {
				panicked = r
				failed.Store(true)
			}
		}()
		if verify != nil {
			sideErr = verify()
		}
		if sideErr == nil {
			if sol, sideErr = plan.Bound(s.Route, s.Tensors, tp); sideErr != nil {
				sideErr = fmt.Errorf("SOL bound: %w", sideErr)
			}
		}
		if sideErr != nil {
			failed.Store(true)
			return
		}
		solTime.Store(int64(sol.Time))
	}()
	stop := opt.Sim.Stop
	opt.Sim.Stop = func() bool { return failed.Load() || stop != nil && stop() }
	res, err := simulate(s, tp, opt, &rec, func() units.Time { return units.Time(solTime.Load()) })
	<-sideDone
	if panicked != nil {
		panic(panicked)
	}
	if sideErr != nil {
		return rec, nil, sideErr
	}
	if err != nil {
		return rec, nil, err
	}
	rec.SOL, rec.SOLTerm, rec.UniqueBytes = sol.Time, sol.Term, sol.UniqueBytes
	return rec, res, nil
}

// simulate runs the simulation of a record, on the machine opt names,
// and fills the record's modeled fields; sol is the bound so far, for
// progress.
func simulate(s *ir.Schedule, tp *topo.Topology, opt Options, rec *Record, sol func() units.Time) (*sim.Result, error) {
	mtp, sopt := tp, opt.Sim
	if opt.Machine != nil {
		mtp = OnMachine(tp, opt.Machine)
		rec.ModeledOn = mtp.Preset
	}
	if opt.Executor != nil {
		mtp = mtp.Clone()
		mtp.Executor = *opt.Executor
	}
	if opt.LoopbackMemory > 0 {
		mtp = mtp.Clone()
		mtp.Memory = opt.LoopbackMemory
		sopt.Loopback = true
		rec.ModeledOn = fmt.Sprintf("one GPU at %.0f GB/s", opt.LoopbackMemory.GBps())
	}
	if opt.Progress != nil {
		sopt.Progress = func(p sim.Progress) { opt.Progress(p, sol()) }
	}
	res, err := sim.Run(s, mtp, sopt)
	if err != nil {
		return nil, fmt.Errorf("simulation: %w", err)
	}
	rec.Models = Models(res.Modeled != nil)
	if res.Modeled != nil {
		rec.ExecutorModel = sopt.Exec.Launch.String()
		rec.ModeledOn += ", executor model " + rec.ExecutorModel
	}
	rec.Modeled, rec.Flows, rec.FlowClasses, rec.Events = res.Makespan, res.Flows, res.FlowClasses, res.Events
	rec.ModeledHostIssue, rec.ModeledGroupEnds, rec.ModeledStreamEnds = res.HostIssue, res.GroupEnds, res.StreamEnds
	rec.Bottleneck = res.Bottleneck
	rec.Resources = sim.ByClass(res.Resources)
	return res, nil
}

// OnMachine is a topology's shape with a machine's achievable rates,
// latencies and executor costs (its line rates stay, for the bound).
func OnMachine(tp, machine *topo.Topology) *topo.Topology {
	c := tp.Clone()
	c.Preset = machine.Preset
	c.NVLink, c.NIC, c.Memory = machine.NVLink, machine.NIC, machine.Memory
	c.LatencyNVLink, c.LatencyNet, c.LatencyLocal = machine.LatencyNVLink, machine.LatencyNet, machine.LatencyLocal
	c.Executor = machine.Executor
	return c
}

// FitTopology grows a topology by whole NVLink domains until it holds
// every GPU of a schedule's world: a schedule read from a file may span
// more domains than its preset.
func FitTopology(tp *topo.Topology, s *ir.Schedule) {
	for _, r := range s.World {
		tp.Domains = max(tp.Domains, r.GPU/tp.GPUsPerDomain+1)
	}
}
