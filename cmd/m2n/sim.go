package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/plan/ir"
	"github.com/m2n-project/m2n/sim"
)

// simRecord is one line of `m2n sim --json`; docs/cli.md documents it.
type simRecord struct {
	Point       map[string]any `json:"point"`
	Route       string         `json:"route"`
	Ideal       bool           `json:"ideal"`
	UniqueBytes int64          `json:"unique_bytes"`
	SOLSeconds  float64        `json:"sol_s"`
	SOLTerm     string         `json:"sol_term"`
	Modeled     float64        `json:"modeled_s"`
	Ratio       float64        `json:"modeled_over_sol"`
	Bottleneck  bottleneckJSON `json:"bottleneck"`
	Measured    *float64       `json:"measured_s,omitempty"`
	Error       *float64       `json:"error,omitempty"`
	Source      string         `json:"measured_source,omitempty"`
	Ops         int            `json:"ops"`
	Flows       int            `json:"flows"`
	Events      int64          `json:"events"`
	Resources   []resourceJSON `json:"resources"`
	// TensorClasses sums a workload's tensors by class; absent without one.
	TensorClasses []classJSON `json:"tensor_classes,omitempty"`
	label         string      `json:"-"`
	classes       []sim.ResourceStat
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
	var out simOutput
	var jobs []simJob
	if *irIn != "" {
		if len(pos) > 0 {
			return usagef("sim: give a scenario or --ir, not both")
		}
		j, tpName, err := irJob(*irIn, *topoName)
		if err != nil {
			return err
		}
		out.Scenario, out.Topology = *irIn, tpName
		jobs = append(jobs, j)
	} else {
		sc, points, err := sel.load(pos)
		if err != nil {
			return err
		}
		out.Scenario = sc.Name
		if jobs, out.Topology, err = simJobs(sc, points, &sel); err != nil {
			return err
		}
	}
	if (*trace != "" || *flowsOut != "") && len(jobs) != 1 {
		return usagef("--trace and --flows write one simulation, but %d would run; pick one with --route and --point", len(jobs))
	}
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, s, res, err := j.run(&sel, opt)
		if err != nil {
			return err
		}
		out.Records = append(out.Records, rec)
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
		return printJSON(e.stdout, out)
	}
	return printSim(e, out, *ideal)
}

// simJob is one simulation: a route at a scenario point, or an IR file.
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
	for _, p := range points {
		routes, err := sel.routesOf(p)
		if err != nil {
			return nil, "", err
		}
		preset = p.Topology.Preset
		for _, r := range routes {
			jobs = append(jobs, simJob{point: p, route: r, refs: sc.References})
		}
	}
	return jobs, preset, nil
}

func irJob(path, preset string) (simJob, string, error) {
	if preset == "" {
		return simJob{}, "", usagef("--ir needs --topology (one of %s)", strings.Join(topo.PresetNames(), ", "))
	}
	tp, err := topo.Preset(preset)
	if err != nil {
		return simJob{}, "", usageError{"--topology: " + err.Error()}
	}
	f, err := os.Open(path)
	if err != nil {
		return simJob{}, "", err
	}
	defer f.Close()
	s, err := ir.Decode(f)
	if err != nil {
		return simJob{}, "", fmt.Errorf("%s: %w", path, err)
	}
	for _, r := range s.World {
		tp.Domains = max(tp.Domains, r.GPU/tp.GPUsPerDomain+1)
	}
	return simJob{sched: s, tp: tp, route: s.Route}, preset, nil
}

func (j simJob) run(sel *selection, opt sim.Options) (simRecord, *ir.Schedule, *sim.Result, error) {
	var rec simRecord
	s, tp := j.sched, j.tp
	var tensors []ir.Tensor
	if j.point != nil {
		var err error
		if s, err = sel.build(j.point, j.route); err != nil {
			return rec, nil, nil, err
		}
		tp = j.point.Topology
		rec.Point, rec.label = j.point.Map(), j.point.Label()
		rec.TensorClasses = tensorClasses(j.point)
	} else {
		rec.Point, rec.label = map[string]any{}, "-"
	}
	tensors = s.Tensors
	res, err := sim.Run(s, tp, opt)
	if err != nil {
		return rec, nil, nil, fmt.Errorf("point %s, route %s: %w", rec.label, j.route, err)
	}
	rec.Route, rec.Ideal = j.route, opt.Ideal
	rec.Modeled = res.Makespan.Seconds()
	rec.Ops, rec.Flows, rec.Events = len(s.Ops), res.Flows, res.Events
	rec.Bottleneck = bottleneckJSON{res.Bottleneck.Name, res.Bottleneck.Class, res.Bottleneck.Utilization}
	if sol, err := plan.Bound(j.route, tensors, tp); err == nil {
		rec.SOLSeconds, rec.SOLTerm, rec.UniqueBytes = sol.Time.Seconds(), sol.Term, sol.UniqueBytes
		if sol.Time > 0 {
			rec.Ratio = float64(res.Makespan) / float64(sol.Time)
		}
	}
	rec.classes = sim.ByClass(res.Resources)
	for _, c := range rec.classes {
		rec.Resources = append(rec.Resources, resourceJSON{c.Class, c.Bytes, c.Busy.Seconds(), c.Utilization})
	}
	if j.point != nil && sel.scale == 1 { // a scaled tensor is not what was measured
		for _, ref := range j.refs {
			if ref.Route == j.route && ref.Matches(j.point) {
				m := ref.Measured.Seconds()
				e := rec.Modeled/m - 1
				rec.Measured, rec.Error, rec.Source = &m, &e, ref.Source
			}
		}
	}
	return rec, s, res, nil
}

func printSim(e *env, out simOutput, ideal bool) error {
	mode := "achievable rates, op latencies"
	if ideal {
		mode = "ideal: line rates, no latency"
	}
	fmt.Fprintf(e.stdout, "scenario %s on %s (%s); bytes counted exactly, rates decimal\n\n", out.Scenario, out.Topology, mode)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "point\troute\tSOL\tmodeled\tx SOL\tbottleneck\tmeasured\terror")
	for _, r := range out.Records {
		meas, errs := "-", "-"
		if r.Measured != nil {
			meas = units.Time(*r.Measured * float64(units.Second)).String()
			errs = fmt.Sprintf("%+.1f%%", *r.Error*100)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f\t%s (%.0f%%)\t%s\t%s\n", r.label, r.Route,
			units.Time(r.SOLSeconds*float64(units.Second)), units.Time(r.Modeled*float64(units.Second)), r.Ratio,
			r.Bottleneck.Resource, 100*r.Bottleneck.Utilization, meas, errs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printClasses(e, out); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nresources by class (bytes carried; the busiest port's busy time and utilization)\n")
	tw = tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "point\troute\tclass\tbytes\tbusy max\tutilization max")
	for _, r := range out.Records {
		for _, c := range r.classes {
			if c.Bytes == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.0f%%\n", r.label, r.Route, c.Class, units.Bytes(c.Bytes).Human(), c.Busy, 100*c.Utilization)
		}
	}
	return tw.Flush()
}
