package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan/ir"
	"github.com/m2n-project/m2n/sim"
)

// simRecord is one line of `m2n sim --json`: the JSON view of an
// evaluate.Record; docs/cli.md documents it.
type simRecord struct {
	Point         map[string]any   `json:"point"`
	Route         string           `json:"route"`
	Ideal         bool             `json:"ideal"`
	UniqueBytes   int64            `json:"unique_bytes"`
	SOLSeconds    float64          `json:"sol_s"`
	SOLTerm       string           `json:"sol_term"`
	Modeled       float64          `json:"modeled_s"`
	Ratio         float64          `json:"modeled_over_sol"`
	Bottleneck    bottleneckJSON   `json:"bottleneck"`
	Measured      *float64         `json:"measured_s,omitempty"`
	Error         *float64         `json:"error,omitempty"`
	Source        string           `json:"measured_source,omitempty"`
	Ops           int              `json:"ops"`
	Flows         int              `json:"flows"`
	Events        int64            `json:"events"`
	Resources     []resourceJSON   `json:"resources"`
	TensorClasses []evaluate.Class `json:"tensor_classes,omitempty"`
}

type bottleneckJSON struct {
	Resource    string  `json:"resource"`
	Class       string  `json:"class"`
	Utilization float64 `json:"utilization"`
}

type resourceJSON struct {
	Class          string  `json:"class"`
	Bytes          int64   `json:"bytes"`
	BusyMaxSeconds float64 `json:"busy_max_s"`
	Utilization    float64 `json:"utilization_max"`
}

func simJSON(r *evaluate.Record) simRecord {
	j := simRecord{
		Point: map[string]any{}, Route: r.Route, Ideal: r.Ideal, UniqueBytes: r.UniqueBytes,
		SOLSeconds: r.SOL.Seconds(), SOLTerm: r.SOLTerm, Modeled: r.Modeled.Seconds(), Ratio: r.Ratio(),
		Bottleneck: bottleneckJSON{r.Bottleneck.Name, r.Bottleneck.Class, r.Bottleneck.Utilization},
		Ops:        r.Ops, Flows: r.Flows, Events: r.Events, TensorClasses: r.TensorClasses,
	}
	if r.Point != nil {
		j.Point = r.Point.Map()
	}
	if r.HasMeasured() {
		m, e := r.Measured.Seconds(), r.MeasuredError()
		j.Measured, j.Error, j.Source = &m, &e, r.MeasuredSource
	}
	for _, c := range r.Resources {
		j.Resources = append(j.Resources, resourceJSON{c.Class, c.Bytes, c.Busy.Seconds(), c.Utilization})
	}
	return j
}

type simOutput struct {
	Scenario string      `json:"scenario"`
	Topology string      `json:"topology"`
	Records  []simRecord `json:"records"`
}

func runSim(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "sim", "[flags] [SCENARIO]",
		`Simulate every route at every sweep point: the bandwidth-accurate event
simulation of the schedule (max-min fair sharing of NVLink, NIC, fabric and
memory ports) beside the speed-of-light bound, with the bottleneck resource
and, where the scenario has one, the reference measurement.
With --ir FILE, simulate a schedule read from a file on a --topology preset.`)
	asJSON := fs.Bool("json", false, "print JSON on stdout (fields in docs/cli.md)")
	ideal := fs.Bool("ideal", false, "line rates and zero latencies: the conditions of the SOL bound")
	trace := fs.String("trace", "", "write a Chrome/Perfetto trace of the timeline to this file (needs one route and one point)")
	flowsOut := fs.String("flows", "", "write the simulated flows as JSON to this file (needs one route and one point)")
	irIn := fs.String("ir", "", "simulate this schedule IR file instead of a scenario")
	topoName := fs.String("topology", "", "with --ir: the topology preset ("+strings.Join(topo.PresetNames(), ", ")+")")
	var sel selection
	sel.register(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	opt := sim.Options{Ideal: *ideal, Timeline: *trace != ""}
	var scName, tpName string
	var jobs []simJob
	if *irIn != "" {
		if len(pos) > 0 {
			return usagef("sim: give a scenario or --ir, not both")
		}
		j, err := irJob(*irIn, *topoName)
		if err != nil {
			return err
		}
		scName, tpName = *irIn, *topoName
		jobs = append(jobs, j)
	} else {
		sc, points, err := sel.load(pos)
		if err != nil {
			return err
		}
		scName = sc.Name
		if jobs, tpName, err = simJobs(sc, points, &sel); err != nil {
			return err
		}
	}
	if (*trace != "" || *flowsOut != "") && len(jobs) != 1 {
		return usagef("--trace and --flows write one simulation, but %d would run; pick one with --route and --point", len(jobs))
	}
	var recs []evaluate.Record
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, s, res, err := j.run(&sel, opt)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
		if *trace != "" {
			if err := encodeFileAtomic("--trace", *trace, func(w io.Writer) error { return sim.WriteTrace(w, s, res) }); err != nil {
				return err
			}
		}
		if *flowsOut != "" {
			if err := encodeFileAtomic("--flows", *flowsOut, func(w io.Writer) error { return sim.WriteFlows(w, s, res) }); err != nil {
				return err
			}
		}
	}
	if *asJSON {
		return printSimJSON(e, scName, tpName, recs)
	}
	return printSim(e, scName, tpName, recs, *ideal)
}

func printSimJSON(e *env, scName, tpName string, recs []evaluate.Record) error {
	out := simOutput{Scenario: scName, Topology: tpName}
	for i := range recs {
		out.Records = append(out.Records, simJSON(&recs[i]))
	}
	return printJSON(e.stdout, out)
}

// simJob is one evaluation: a route at a scenario point, or an IR file.
type simJob struct {
	point *scenario.Point
	route string
	refs  []scenario.Reference
	// from an IR file
	sched *ir.Schedule
	tp    *topo.Topology
}

// simJobs is every selected route at every point, and the topology preset
// of the points (the last one's).
func simJobs(sc *scenario.Scenario, points []*scenario.Point, sel *selection) ([]simJob, string, error) {
	var jobs []simJob
	preset := ""
	refs := sc.References
	if sel.scale != 1 { // a scaled tensor is not what was measured
		refs = nil
	}
	for _, p := range points {
		routes, err := sel.routesOf(p)
		if err != nil {
			return nil, "", err
		}
		preset = p.Topology.Preset
		for _, r := range routes {
			jobs = append(jobs, simJob{point: p, route: r, refs: refs})
		}
	}
	return jobs, preset, nil
}

// irJob reads a schedule from a file, on a topology preset grown to hold
// its world.
func irJob(path, preset string) (simJob, error) {
	if preset == "" {
		return simJob{}, usagef("--ir needs --topology (one of %s)", strings.Join(topo.PresetNames(), ", "))
	}
	tp, err := topo.Preset(preset)
	if err != nil {
		return simJob{}, usageError{"--topology: " + err.Error()}
	}
	f, err := os.Open(path)
	if err != nil {
		return simJob{}, err
	}
	defer f.Close()
	s, err := ir.Decode(f)
	if err != nil {
		return simJob{}, fmt.Errorf("%s: %w", path, err)
	}
	evaluate.FitTopology(tp, s)
	return simJob{sched: s, tp: tp, route: s.Route}, nil
}

// run evaluates the job.
func (j simJob) run(sel *selection, opt sim.Options) (evaluate.Record, *ir.Schedule, *sim.Result, error) {
	if j.point == nil {
		rec, res, err := evaluate.Schedule(j.sched, j.tp, evaluate.Options{Sim: opt})
		if err != nil {
			return rec, nil, nil, fmt.Errorf("route %s: %w", j.route, err)
		}
		return rec, j.sched, res, nil
	}
	chunk, err := sel.chunkOf(j.point)
	if err != nil {
		return evaluate.Record{}, nil, nil, err
	}
	return evaluate.Point(j.point, j.route, evaluate.Options{Sim: opt, ChunkBytes: chunk, References: j.refs})
}

func printSim(e *env, scName, tpName string, recs []evaluate.Record, ideal bool) error {
	mode := "achievable rates, op latencies"
	if ideal {
		mode = "ideal: line rates, no latency"
	}
	fmt.Fprintf(e.stdout, "scenario %s on %s (%s); bytes counted exactly, rates decimal\n\n", scName, tpName, mode)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "point\troute\tSOL\tmodeled\tx SOL\tbottleneck\tmeasured\terror")
	for i := range recs {
		r := &recs[i]
		meas, errs := "-", "-"
		if r.HasMeasured() {
			meas = r.Measured.String()
			errs = fmt.Sprintf("%+.1f%%", r.MeasuredError()*100)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f\t%s (%.0f%%)\t%s\t%s\n", r.Label(), r.Route, r.SOL, r.Modeled, r.Ratio(),
			r.Bottleneck.Name, 100*r.Bottleneck.Utilization, meas, errs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printClasses(e, recs); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nresources by class (bytes carried; the busiest port's busy time and utilization)\n")
	tw = tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "point\troute\tclass\tbytes\tbusy max\tutilization max")
	for i := range recs {
		r := &recs[i]
		for _, c := range r.Resources {
			if c.Bytes == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.0f%%\n", r.Label(), r.Route, c.Class, units.Bytes(c.Bytes).Human(), c.Busy, 100*c.Utilization)
		}
	}
	return tw.Flush()
}

// printClasses writes each point's tensor classes once.
func printClasses(e *env, recs []evaluate.Record) error {
	seen := map[string]bool{}
	for i := range recs {
		r := &recs[i]
		if len(r.TensorClasses) == 0 || seen[r.Label()] {
			continue
		}
		seen[r.Label()] = true
		var total int64
		for _, c := range r.TensorClasses {
			total += c.UniqueBytes
		}
		fmt.Fprintf(e.stdout, "\nworkload at point %s: %s in all, by class (weights: parameters as the frameworks store them)\n", r.Label(), units.Bytes(total).Human())
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "class\tweights\tbytes\tshare")
		for _, c := range r.TensorClasses {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f%%\n", c.Class, c.Weights, units.Bytes(c.UniqueBytes).Human(), 100*float64(c.UniqueBytes)/float64(max(total, 1)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
