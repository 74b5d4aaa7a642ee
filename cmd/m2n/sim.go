package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/reports"
	"github.com/m2n-project/m2n/sim"
)

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
	topoName := fs.String("topology", "", "with --ir: the topology preset ("+strings.Join(scenario.PresetNames(), ", ")+")")
	modelName := fs.String("model", "", "model each route as m2n's GPU executor runs it on a measured machine: a measured preset's name or file (docs/calibration.md)")
	launch := fs.String("launch", "one-process", "with --model: one-process, or per-gpu (one process per GPU under a launcher)")
	transport := fs.String("transport", "", "with --model: nccl (the default between GPUs) or copy (device copies; the default with --loopback)")
	recommend := fs.Bool("recommend", false, "also print, per point, the fastest route (and staging cap or chunk, where the scenario sweeps them) that fits in the GPUs' memory, and why each other loses")
	loopback := fs.Bool("loopback", false, "with --model: every rank on one GPU of the machine, as m2n run --backend loopback runs it")
	execName := fs.String("executor", "", "model each route as m2n's GPU executor runs it, with the executor costs of this measured preset (name or file) on the scenario's own rates")
	groupEnds := fs.Bool("group-ends", false, "with --model and NCCL: also report when each NCCL group of the executor ends on the first GPU in it, as m2n run --profile measures it (turns symmetry off)")
	symmetry := fs.Bool("symmetry", true, "simulate one flow per class of flows that the schedule's symmetry makes alike, and expand the result (the same to the bit; false simulates every flow, to check that)")
	workers := jobsFlag(fs)
	var sel selection
	sel.register(fs)
	progressMode := progressFlag(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := checkProgress(*progressMode); err != nil {
		return err
	}
	nworkers, err := workersOf(*workers)
	if err != nil {
		return err
	}
	fileOnStdout, err := toStdout(*asJSON, "--trace", *trace, "--flows", *flowsOut)
	if err != nil {
		return err
	}
	opt := sim.Options{Ideal: *ideal, Timeline: *trace != "", Flows: *flowsOut != "", NoSymmetry: !*symmetry, GroupEnds: *groupEnds}
	var machine *topo.Topology
	if *modelName != "" {
		if machine, err = loadPreset(*modelName); err != nil {
			return fmt.Errorf("--model: %w", err)
		}
	} else if *loopback {
		return usagef("--loopback runs every rank on one GPU of a measured machine: it needs --model")
	}
	var executor *topo.Executor
	if *execName != "" {
		if machine != nil {
			return usagef("--executor and --model: give one (--model takes the machine's executor costs too)")
		}
		p, err := loadPreset(*execName)
		if err != nil {
			return fmt.Errorf("--executor: %w", err)
		}
		if p.Executor.IsZero() {
			return usagef("--executor %s: the preset has no executor costs (a measured preset has)", *execName)
		}
		executor = &p.Executor
	}
	if machine != nil || executor != nil {
		switch *launch {
		case "one-process":
		case "per-gpu":
			opt.Exec.Launch = topo.PerGPU
		default:
			return usagef("--launch %q: want one-process or per-gpu", *launch)
		}
		if *transport != "" && *transport != "nccl" && *transport != "copy" {
			return usagef("--transport %q: want nccl or copy", *transport)
		}
		opt.Exec.Transport, opt.Loopback = *transport, *loopback
		// Graphs, as m2n run by default: replayed where the transport
		// can (copies), dropped with NCCL (program.Settings.Resolve).
		opt.Exec.Graph = true
	} else if *transport != "" || *launch != "one-process" {
		return usagef("--launch and --transport model the executor: they need --model or --executor")
	}
	var scName, tpName string
	var sweeps []scenario.Sweep // the scenario's (none for --ir)
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
		scName, sweeps = sc.Name, sc.Sweeps
		if jobs, tpName, err = simJobs(sc, points, &sel); err != nil {
			return err
		}
	}
	for i := range jobs {
		jobs[i].machine, jobs[i].executor = machine, executor
	}
	if (*trace != "" || *flowsOut != "") && len(jobs) != 1 {
		return usagef("--trace and --flows write one simulation, but %d would run; pick one with --route and --point", len(jobs))
	}
	// A counter of the simulations and a line for the running one on a
	// terminal; nothing when stderr is a file or a pipe, or with --json.
	pr := newProgress(e, "sim", "simulations", len(jobs), *asJSON, *progressMode)
	defer pr.close()
	var recs []evaluate.Record
	var skips []evaluate.Skip
	if *trace == "" && *flowsOut == "" {
		// Up to -j points and routes at once; the records come back in job
		// order, and a route past a limit is skipped with its reason.
		if recs, skips, err = simulateAll(ctx, jobs, &sel, opt, pr, nworkers); err != nil {
			return err
		}
	} else { // one job, with its trace or flows
		j := jobs[0]
		t := simTask(pr, j)
		rec, s, res, err := j.run(&sel, opt, t)
		t.done()
		if err != nil {
			return err
		}
		recs = append(recs, rec)
		if *trace != "" {
			if err := encodeFileAtomic(e.stdout, "--trace", *trace, func(w io.Writer) error { return sim.WriteTrace(w, s, res) }); err != nil {
				return err
			}
		}
		if *flowsOut != "" {
			if err := encodeFileAtomic(e.stdout, "--flows", *flowsOut, func(w io.Writer) error { return sim.WriteFlows(w, s, res) }); err != nil {
				return err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	pr.close()
	if fileOnStdout {
		return nil
	}
	var advice []reports.Recommendation
	if *recommend {
		advice = reports.Recommend(recs, skips, reports.ChoiceSweeps(sweeps))
	}
	if *asJSON {
		return printJSON(e.stdout, reports.SimJSON(scName, tpName, recs, skips, advice))
	}
	if err := reports.WriteSimTable(e.stdout, scName, tpName, recs, skips, *ideal); err != nil {
		return err
	}
	if *recommend {
		reports.WriteRecommendations(e.stdout, advice)
	}
	return nil
}
