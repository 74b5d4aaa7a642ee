package main

import (
	"cmp"
	"strings"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
)

// selection is the flags that pick what to plan: routes, sweep points,
// chunk size, staging cap and a scale-down factor, shared by plan, sim and run.
type selection struct {
	routes     string
	points     multiFlag
	chunk      string
	stagingCap string
	coalesce   string
	scale      float64
	shown      *planProgress // m2n plan's progress display; nil for none
	maxOps     int64
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func (sel *selection) register(fs *flags) {
	fs.Var((*routeList)(&sel.routes), "route", "`list` of routes to plan, comma-separated (default: the scenario's, else all of "+strings.Join(plan.Routes, ", ")+")")
	fs.Var(&sel.points, "point", "only sweep points with this coordinate, as name=value (repeatable: a sweep named twice selects both values)")
	fs.StringVar(&sel.chunk, "chunk", "", "pipelining chunk size, e.g. \"4 MiB\" (default: the scenario's, else 4 MiB)")
	fs.Int64Var(&sel.maxOps, "max-ops", 0, "refuse a schedule of more ops than this, counted from its chunks before it is built (default: as many as this machine's memory holds at 0.3 GB a million, and at least 1e7)")
	fs.StringVar(&sel.stagingCap, "staging-cap", "", "staging memory per GPU a schedule may use, e.g. \"2 GiB\"; staging is reused once consumed (default: 0, no cap)")
	fs.Float64Var(&sel.scale, "scale", 1, "shrink dim 0 of every tensor by this factor in (0, 1], to fit small machines")
	fs.StringVar(&sel.coalesce, "coalesce", "", "coalesce the transfers of a pair of ranks smaller than this into few through staging slabs, e.g. \"4 MiB\"; \"none\" turns it off (default: 1 MiB, docs/ir.md)")
}

// load reads the one scenario the positional arguments name (none: the
// default) and resolves its selected points.
func (sel *selection) load(pos []string) (*scenario.Scenario, []*scenario.Point, error) {
	arg, err := oneScenarioArg(pos)
	if err != nil {
		return nil, nil, err
	}
	sc, err := loadScenario(arg)
	if err != nil {
		return nil, nil, err
	}
	points, err := sel.resolve(sc)
	if err != nil {
		return nil, nil, err
	}
	return sc, points, nil
}

// resolve loads the selected points of a scenario, scaled.
func (sel *selection) resolve(sc *scenario.Scenario) ([]*scenario.Point, error) {
	all, err := sc.Points()
	if err != nil {
		return nil, err
	}
	var out []*scenario.Point
	for _, p := range all {
		ok, err := matchPoints(p, sel.points)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		if !ok {
			continue
		}
		if sel.scale != 1 {
			if err := p.Scale(sel.scale); err != nil {
				return nil, usageError{"--scale: " + err.Error()}
			}
		}
		out = append(out, p)
	}
	if f := unmatchedPoint(all, sel.points); f != "" || len(out) == 0 {
		return nil, usagef("--point %s matches no sweep point%s", cmp.Or(f, sel.points.String()), sweepValues(sc))
	}
	return out, nil
}

// routesOf returns the routes to plan at a point.
func (sel *selection) routesOf(p *scenario.Point) ([]string, error) {
	rs := p.Routes
	if sel.routes != "" {
		rs = strings.Split(sel.routes, ",")
	}
	if len(rs) == 0 {
		rs = plan.Routes
	}
	for _, r := range rs {
		known := false
		for _, k := range plan.Routes {
			known = known || k == r
		}
		if !known {
			return nil, usagef("unknown route %q (known: %s)", r, strings.Join(plan.Routes, ", "))
		}
	}
	return rs, nil
}

// chunkOf returns the chunk size at a point.
func (sel *selection) chunkOf(p *scenario.Point) (int64, error) {
	if sel.chunk != "" {
		b, err := units.ParseBytes(sel.chunk)
		if err != nil || b <= 0 {
			return 0, usagef("--chunk %q: want a positive size such as \"4 MiB\"", sel.chunk)
		}
		return int64(b), nil
	}
	if p.Chunk != nil {
		return int64(*p.Chunk), nil
	}
	return plan.DefaultChunkBytes, nil
}

// planOptions returns the planner's options for a route at a point: the
// one place where the flags become them, for every command.
func (sel *selection) planOptions(p *scenario.Point, route string) (plan.Options, error) {
	chunk, err := sel.chunkOf(p)
	if err != nil {
		return plan.Options{}, err
	}
	var stagingCap units.Bytes
	switch {
	case sel.stagingCap != "":
		if stagingCap, err = units.ParseBytes(sel.stagingCap); err != nil {
			return plan.Options{}, usagef("--staging-cap %q: want a size such as \"2 GiB\", or 0 for no cap", sel.stagingCap)
		}
	case p.StagingCap != nil: // the scenario's staging_cap, swept or not
		stagingCap = *p.StagingCap
	}
	if sel.maxOps < 0 {
		return plan.Options{}, usagef("--max-ops %d: want a positive number of ops", sel.maxOps)
	}
	maxOps := sel.opsLimit()
	co := plan.DefaultCoalesce
	switch sel.coalesce {
	case "":
	case "none":
		co = plan.Coalesce{}
	default:
		b, err := units.ParseBytes(sel.coalesce)
		if err != nil || b <= 0 {
			return plan.Options{}, usagef("--coalesce %q: want a positive size such as \"4 MiB\", or \"none\"", sel.coalesce)
		}
		co.BelowBytes = int64(b)
		co.SlabBytes = max(co.SlabBytes, co.BelowBytes)
		co.BudgetBytes = max(co.BudgetBytes, 2*co.SlabBytes)
	}
	return plan.Options{Route: route, ChunkBytes: chunk, StagingCapBytes: int64(stagingCap), MaxOps: maxOps, Coalesce: co, MaxMemoryBytes: machineMemory()}, nil
}

// build plans one route at one point.
func (sel *selection) build(p *scenario.Point, route string) (*ir.Schedule, error) {
	opt, err := sel.planOptions(p, route)
	if err != nil {
		return nil, err
	}
	t := sel.shown.task(taskLabel(p, route))
	defer t.done()
	return evaluate.Build(p, opt)
}

// opsLimit is the --max-ops in force.
func (sel *selection) opsLimit() int64 {
	if sel.maxOps > 0 {
		return sel.maxOps
	}
	return defaultMaxOps(machineMemory())
}

// defaultMaxOps is --max-ops's default on a machine of mem bytes (0:
// unknown): as many ops as its memory holds while planned and checked
// (plan.OpBytes each), and at least plan.DefaultMaxOps.
func defaultMaxOps(mem int64) int64 {
	return max(plan.DefaultMaxOps, mem/plan.OpBytes)
}

// sweepValues lists a scenario's sweeps and their values, for an error
// about --point: "; the sweeps: gpus = 64, 128 | dst = bf16, fp8_e4m3".
func sweepValues(sc *scenario.Scenario) string {
	if len(sc.Sweeps) == 0 {
		return "; the scenario has no sweeps"
	}
	var parts []string
	for _, sw := range sc.Sweeps {
		var vs []string
		for _, v := range sw.Values {
			vs = append(vs, scenario.FormatValue(v))
		}
		parts = append(parts, sw.Name+" = "+strings.Join(vs, ", "))
	}
	return "; the sweeps: " + strings.Join(parts, " | ")
}
