package main

// Simulation jobs (a route at a point, or an IR file) and the worker pool
// that runs them, shared by m2n sim and m2n report.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/sim"
)

// jobsFlag registers -j: how many simulations run at once.
func jobsFlag(fs *flags) *int {
	return fs.Int("j", 0, "run up to `N` simulations at once, 0 for as many as CPUs; the output does not depend on it")
}

// workersOf checks -j's value and resolves 0 to the CPU count.
func workersOf(j int) (int, error) {
	if j < 0 {
		return 0, usagef("-j %d: want a number of simulations at a time, or 0 for one per CPU", j)
	}
	if j == 0 {
		return runtime.NumCPU(), nil
	}
	return j, nil
}

// simulateAll runs the jobs on up to workers goroutines (at least one) and
// returns their records in job order. On a failure it starts no more jobs
// and returns the error of the first failed job in job order, which does
// not depend on timing: every job before it was started, and ran to its
// end. Each job is a task of pr.
func simulateAll(ctx context.Context, jobs []simJob, sel *selection, opt sim.Options, pr progress, workers int) ([]evaluate.Record, []evaluate.Skip, error) {
	recs := make([]evaluate.Record, len(jobs))
	errs := make([]error, len(jobs))
	skipped := make([]string, len(jobs)) // the reason a job passed a limit
	next := make(chan int)
	var mu sync.Mutex
	failed := false
	var wg sync.WaitGroup
	for range max(1, min(workers, len(jobs))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := simTask(pr, jobs[i])
				rec, _, _, err := jobs[i].run(sel, opt, t)
				t.done()
				if why, ok := overLimit(err); ok {
					skipped[i], err = why, nil
				}
				mu.Lock()
				recs[i], errs[i] = rec, err
				failed = failed || err != nil
				mu.Unlock()
			}
		}()
	}
	var ctxErr error
	for i := range jobs {
		mu.Lock()
		stop := failed
		mu.Unlock()
		if stop {
			break
		}
		if ctxErr = ctx.Err(); ctxErr != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	if ctxErr != nil {
		return nil, nil, ctxErr
	}
	var out []evaluate.Record
	var skips []evaluate.Skip
	for i := range jobs {
		if skipped[i] != "" {
			skips = append(skips, evaluate.Skip{Point: jobs[i].point, Route: jobs[i].route, Reason: skipped[i]})
			continue
		}
		out = append(out, recs[i])
	}
	if len(out) == 0 && len(skips) > 0 {
		return nil, nil, fmt.Errorf("every route at every point passes a limit; the first: point %s, route %s: %s", skips[0].Label(), skips[0].Route, skips[0].Reason)
	}
	return out, skips, nil
}

// overLimit reports whether err is a route passing a planning limit (a
// staging cap too small, the ops or memory limit), and its reason: such a
// route is skipped and the others go on.
func overLimit(err error) (string, bool) {
	var capErr *plan.StagingCapError
	var opsErr *plan.OpsLimitError
	var memErr *plan.MemoryLimitError
	switch {
	case errors.As(err, &capErr):
		return capErr.Error(), true
	case errors.As(err, &opsErr):
		return opsErr.Error(), true
	case errors.As(err, &memErr):
		return memErr.Error(), true
	}
	return "", false
}

// simJob is one evaluation: a route at a scenario point, or an IR file.
type simJob struct {
	point *scenario.Point
	route string
	refs  []scenario.Reference
	// from an IR file
	sched *ir.Schedule
	tp    *topo.Topology
	// machine, when set, models the run on a measured machine
	// (evaluate.Options.Machine); in loopback, on one of its GPUs.
	machine  *topo.Topology
	executor *topo.Executor // the executor costs to model on the job's topology
}

// evalOptions are the evaluation options of the job.
func (j simJob) evalOptions(opt sim.Options, t task) evaluate.Options {
	eo := evaluate.Options{Sim: opt, References: j.refs, Progress: t.sim, Machine: j.machine, Executor: j.executor}
	if j.point != nil {
		eo.Framework = j.point.Framework
	}
	if j.machine != nil && opt.Loopback {
		eo.LoopbackMemory = j.machine.Memory
		eo.Sim.Loopback = false // LoopbackMemory sets it
	}
	return eo
}

// simJobs is every selected route at every point, and the topology preset
// of the points (the last one's).
func simJobs(sc *scenario.Scenario, points []*scenario.Point, sel *selection) ([]simJob, string, error) {
	var jobs []simJob
	var presets []string // the points' topology presets, in order of first use
	refs := sc.References
	if sel.scale != 1 { // a scaled tensor is not what was measured
		refs = nil
	}
	for _, p := range points {
		routes, err := sel.routesOf(p)
		if err != nil {
			return nil, "", err
		}
		if !slices.Contains(presets, p.Topology.Preset) {
			presets = append(presets, p.Topology.Preset)
		}
		for _, r := range routes {
			jobs = append(jobs, simJob{point: p, route: r, refs: refs})
		}
	}
	preset := strings.Join(presets, ", ")
	if len(presets) > 1 {
		preset += " (by point)"
	}
	return jobs, preset, nil
}

// irJob reads a schedule from a file, on a topology preset grown to hold
// its world.
func irJob(path, preset string) (simJob, error) {
	if preset == "" {
		return simJob{}, usagef("--ir needs --topology (one of %s)", strings.Join(scenario.PresetNames(), ", "))
	}
	tp, err := scenario.Preset(preset)
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

// label names the job on the progress display.
func (j simJob) label() string {
	return taskLabel(j.point, j.route)
}

// run evaluates the job; its simulation moves t along.
func (j simJob) run(sel *selection, opt sim.Options, t task) (evaluate.Record, *ir.Schedule, *sim.Result, error) {
	if j.point == nil {
		rec, res, err := evaluate.Schedule(j.sched, j.tp, j.evalOptions(opt, t))
		if err != nil {
			return rec, nil, nil, fmt.Errorf("route %s: %w", j.route, err)
		}
		return rec, j.sched, res, nil
	}
	popt, err := sel.planOptions(j.point, j.route)
	if err != nil {
		return evaluate.Record{}, nil, nil, err
	}
	return evaluate.Point(j.point, popt, j.evalOptions(opt, t))
}
