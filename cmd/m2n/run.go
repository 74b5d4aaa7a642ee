package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/native"
	"github.com/m2n-project/m2n/program"
	"github.com/m2n-project/m2n/reports"
)

// runOf is the record's Run: the executor's result (nil when it did not
// run) as plain values, and why it did not run or could not be modeled.
func runOf(backend string, iters int, res *native.Result, err error) *evaluate.Run {
	run := &evaluate.Run{Backend: backend, Iterations: iters, Err: err}
	if res != nil {
		run.Times = slices.Sorted(slices.Values(res.Times))
		run.Mode, run.Device, run.Verified, run.CheckedBytes, run.WrongElems, run.FirstWrong = res.Mode, res.Device, res.Verified, res.CheckedBytes, res.WrongElems, res.FirstWrong
		run.Transport = res.Transport
		run.Groups, run.GroupCapBytes, run.HostIssue = res.Waves, res.WaveCapBytes, res.HostIssue
		run.PeakDeviceBytes, run.StagingBytes = res.PeakDeviceBytes, res.StagingBytes
		run.ProfileErr, run.GroupEnds = res.ProfileErr, res.GroupEnds
		for _, se := range res.StreamEnds {
			run.StreamEnds = append(run.StreamEnds, evaluate.StreamEnd{Device: se.Device, Lane: se.Lane, Stream: se.Stream, End: se.End})
		}
	}
	return run
}

// gpuReady says whether this build and machine can run schedules (a GPU
// build, the CUDA driver, a GPU), before anything is planned; tests
// replace it with runOnGPU.
var gpuReady = func() error {
	_, err := native.Devices()
	if err != nil {
		return fmt.Errorf("m2n run needs a GPU build (linux, cgo) and the CUDA driver: %w", err)
	}
	return nil
}

// runOnGPU prepares, runs and releases one schedule on the GPUs; tests
// replace it to exercise the command without a GPU.
var runOnGPU = func(s *ir.Schedule, opt native.Options) (*native.Result, error) {
	x, err := native.New(s, opt)
	if err != nil {
		return nil, err
	}
	defer x.Close()
	return x.Run()
}

func runRun(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "run", "[flags] [SCENARIO]",
		`Run every route's schedule on GPUs through CUDA and NCCL: fill the sources
with a pattern from each element's global index, run warm-up and timed
iterations, check every destination byte on the GPU, and print the measured
time beside the simulated time of the same schedule and the SOL.

Backends: loopback runs every rank on one GPU (each transfer a device copy,
or with --transport nccl a one-rank NCCL communicator's self send/recv);
nccl runs one rank per GPU, over all local GPUs in one process, or one
process per GPU under torchrun, srun or mpirun.`)
	asJSON := fs.Bool("json", false, "print JSON on stdout (fields in docs/cli.md)")
	backend := fs.String("backend", native.Loopback, "loopback or nccl")
	transport := fs.String("transport", "", "loopback: copy (device copies, the default) or nccl (self send/recv); nccl: auto (the default: copies between GPUs of one host, NCCL where copies cannot reach; with one process per GPU, copies only where the receivers can pull), nccl, or copy (NVLink peer copies; CUDA IPC with one process per GPU, pulled by the receiver or pushed by the sender with flags)")
	device := fs.Int("device", 0, "loopback: the GPU to run on")
	iters := fs.Int("iters", 5, "timed iterations")
	warmup := fs.Int("warmup", 2, "untimed iterations first")
	graph := fs.Bool("graph", true, "replay each iteration as a CUDA graph (no host launch gaps); copy transport only")
	waveBytes := fs.String("wave-bytes", "", "NCCL groups: the most bytes one ordered pair carries in a group when transfers pipeline through several (default: chosen from the schedule; \"none\": never cut)")
	lanes := fs.Int("lanes", program.DefaultLanes, "streams per GPU for local ops and copies")
	timeout := fs.Duration("timeout", 5*time.Minute, "nccl: give up on a peer or an operation after this long")
	irIn := fs.String("ir", "", "run this schedule IR file instead of a scenario")
	topoName := fs.String("topology", "", "with --ir: the topology preset for the simulated and SOL columns")
	profile := fs.Bool("profile", false, "also report when each GPU stream finished its part of an iteration (where the time goes)")
	modelName := fs.String("model", "hgx-h200-measured", "the measured preset that models this machine: a name, or a `file` m2n calibrate wrote (docs/calibration.md)")
	var sel selection
	sel.register(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if *iters < 1 || *warmup < 0 {
		return usagef("--iters must be at least 1 and --warmup at least 0")
	}
	graphSet := false
	fs.Visit(func(f *flag.Flag) { graphSet = graphSet || f.Name == "graph" })
	var wb int64
	switch *waveBytes {
	case "":
	case "none":
		wb = -1
	default:
		b, err := units.ParseBytes(*waveBytes)
		if err != nil || b <= 0 {
			return usagef("--wave-bytes %q: want a positive size such as \"32 MiB\", or \"none\"", *waveBytes)
		}
		wb = int64(b)
	}
	if *backend != native.Loopback && *backend != native.NCCL {
		return usagef("--backend %q: want loopback or nccl", *backend)
	}
	// The executor's settings, from the flags, once: the run and its model
	// resolve the same (program.Settings.Resolve).
	set := program.Settings{Loopback: *backend == native.Loopback, Transport: *transport, Lanes: *lanes, WaveBytes: wb,
		Graph: *graph, GraphStrict: graphSet && *graph}
	set, err = set.Resolve()
	if se := (*program.SettingError)(nil); errors.As(err, &se) {
		switch se.Setting {
		case "transport":
			return usagef("--transport %q with --backend %s: %s", *transport, *backend, strings.TrimSuffix(se.Want, " on one GPU (loopback)"))
		case "graph":
			return usagef("--graph with the nccl transport: CUDA graphs of NCCL send/recv are not supported (docs/native.md); leave --graph out, or use --transport copy")
		case "lanes":
			return usagef("--lanes %d: want at least 1", *lanes)
		}
		return usagef("%v", err)
	}
	opt := native.Options{Backend: *backend, Settings: set, Device: *device, Iters: *iters, Warmup: *warmup,
		Timeout: *timeout, Profile: *profile}
	if *backend == native.NCCL {
		l, err := native.DetectLaunchEnv()
		if err != nil {
			return err
		}
		opt.Launch = l
		if l != nil {
			opt.Settings.Launch = topo.PerGPU
		}
		if l != nil && l.Rank != 0 {
			// One process per GPU: rank 0 prints; the others report errors only.
			e = &env{stdout: io.Discard, stderr: e.stderr}
		}
	}
	if err := gpuReady(); err != nil {
		return err
	}
	var jobs []simJob
	var scenarioName string
	if *irIn != "" {
		j, err := irJob(*irIn, *topoName)
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
		scenarioName = *irIn
	} else {
		sc, points, err := sel.load(pos)
		if err != nil {
			return err
		}
		scenarioName = sc.Name
		if jobs, _, err = simJobs(sc, points, &sel); err != nil {
			return err
		}
	}
	// The model of each run: the executor as it runs here (launch mode,
	// transport, groups, graphs) with the measured costs of --model where
	// the scenario's topology has none.
	measured, err := loadPreset(*modelName)
	if err != nil {
		return fmt.Errorf("--model: %w", err)
	}
	var eopt evaluate.Options
	// The model runs the same settings (auto, until the run resolves it,
	// modeled as NCCL).
	eopt.Sim.Exec = opt.Settings
	// A profile's NCCL groups, modeled beside the measured ones.
	eopt.Sim.GroupEnds = *profile
	// And its streams' ends beside the measured ones.
	eopt.Sim.StreamEnds = *profile
	// The run happens on this machine: its measured rates, latencies and
	// executor costs, on the scenario's shape (domains, placement).
	eopt.Machine = measured
	// Loopback predictions run every rank on the one GPU, at the preset's
	// memory rate: a prediction comes from the preset alone. What this GPU
	// copies at now is printed beside it, never used in it.
	if *backend == native.Loopback {
		eopt.LoopbackMemory = measured.Memory
		copyBW, err := native.CopyBandwidth(*device, 1<<30)
		if err != nil {
			return fmt.Errorf("measuring GPU %d: %w", *device, err)
		}
		fmt.Fprintf(e.stderr, "m2n: GPU %d copies at %.0f GB/s (read+write) now; the loopback model uses %s's %.0f GB/s\n", *device, copyBW.GBps(), *modelName, measured.Memory.GBps())
	}
	var rows []evaluate.Record
	failed, errs := 0, 0
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		s, tp, ev := j.sched, j.tp, evaluate.Record{Route: j.route, Point: j.point}
		if j.point != nil {
			if s, err = sel.build(j.point, j.route); err != nil {
				return err
			}
			tp = j.point.Topology
		}
		ev.Ops = len(s.Ops)
		res, err := runOnGPU(s, opt)
		if errors.Is(err, native.ErrNotSupported) {
			return fmt.Errorf("m2n run needs a GPU build (linux, cgo) and the CUDA driver: %w", err)
		}
		if err != nil {
			res = nil // a run that failed measured nothing
		} else {
			// The GPU ran: model the same schedule, with the transport
			// and graphs it ran with (auto resolves on the GPUs).
			ropt := eopt
			if *backend == native.NCCL {
				ropt.Sim.Exec.Transport, ropt.Sim.Exec.Graph = res.Transport, res.Graph
			}
			var model evaluate.Record
			if model, _, err = evaluate.Schedule(s, tp, ropt); err != nil {
				err = fmt.Errorf("modeling the run: %w", err)
			} else {
				model.Point = j.point
				if *backend == native.Loopback {
					// The model puts every rank on one GPU: the run's.
					for i := range model.ModeledStreamEnds {
						model.ModeledStreamEnds[i].GPU = *device
					}
				}
				ev = model
			}
		}
		ev.Run = runOf(*backend, *iters, res, err)
		ev.Run.Launch = eopt.Sim.Exec.Launch.String()
		rows = append(rows, ev)
		if err != nil {
			// Record the failure and go on with the other runs, unless a
			// peer is lost.
			errs++
			fmt.Fprintf(e.stderr, "m2n: point %s, route %s: %v\n", ev.Label(), j.route, err)
			if res == nil && *backend == native.NCCL && native.IsPeerFailure(err) {
				// Every later run needs the same peers and would wait its
				// own --timeout for them.
				fmt.Fprintf(e.stderr, "m2n: stopping: the NCCL communicators failed, and the %d runs left need the same peers\n", len(jobs)-len(rows))
				break
			}
		}
		if res != nil && !res.Verified {
			failed++
			fmt.Fprintf(e.stderr, "m2n: point %s, route %s: %d wrong elements; first: %s\n", ev.Label(), j.route, res.WrongElems, res.FirstWrong)
		}
	}
	if *asJSON {
		if err := printJSON(e.stdout, reports.RunJSON(scenarioName, rows)); err != nil {
			return err
		}
	} else if err := reports.WriteRunTable(e.stdout, scenarioName, *backend, rows); err != nil {
		return err
	}
	if failed > 0 {
		return checkFailed{fmt.Sprintf("%d runs delivered wrong bytes", failed)}
	}
	if errs > 0 {
		return fmt.Errorf("%d of %d runs could not run or be modeled", errs, len(jobs))
	}
	return nil
}
