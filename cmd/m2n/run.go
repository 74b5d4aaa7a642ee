package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/native"
	"github.com/m2n-project/m2n/plan/ir"
)

// runRecord is one line of `m2n run --json`: the GPU's measurements beside
// the evaluation of the same schedule; docs/cli.md documents it.
type runRecord struct {
	Point        map[string]any `json:"point"`
	Route        string         `json:"route"`
	Backend      string         `json:"backend"`
	Mode         string         `json:"mode"`
	Device       string         `json:"device"`
	UniqueBytes  int64          `json:"unique_bytes"`
	Measured     float64        `json:"measured_s"`
	MeasuredMin  float64        `json:"measured_min_s"`
	MeasuredMax  float64        `json:"measured_max_s"`
	Modeled      float64        `json:"modeled_s"`
	ModeledOn    string         `json:"modeled_on"`
	SOL          float64        `json:"sol_s"`
	Verified     bool           `json:"verified"`
	CheckedBytes int64          `json:"checked_bytes"`
	WrongElems   int64          `json:"wrong_elements"`
	Ops          int            `json:"ops"`
	Groups       int            `json:"nccl_groups"`
	GroupCap     int64          `json:"group_cap_bytes"`
	HostIssue    float64        `json:"host_issue_s"`
	PeakDevice   int64          `json:"peak_device_bytes"`
	Staging      int64          `json:"staging_bytes"`
	Iterations   int            `json:"iterations"`
	Error        string         `json:"error,omitempty"` // why this run did not happen, or could not be modeled
	label        string
	ran          bool
}

type runOutput struct {
	Scenario string      `json:"scenario"`
	Records  []runRecord `json:"records"`
}

// runJSON is the record of one run: the GPU's result (nil when the run did
// not happen) beside the evaluation of its schedule; err says why the run
// did not happen or could not be modeled.
func runJSON(ev *evaluate.Record, backend string, iters int, res *native.Result, err error) runRecord {
	rec := runRecord{Point: map[string]any{}, Route: ev.Route, Backend: backend, Iterations: iters, label: ev.Label(), ran: res != nil}
	if ev.Point != nil {
		rec.Point = ev.Point.Map()
	}
	if res != nil {
		ts := append([]units.Time(nil), res.Times...)
		slices.Sort(ts)
		rec.Measured, rec.MeasuredMin, rec.MeasuredMax = ts[len(ts)/2].Seconds(), ts[0].Seconds(), ts[len(ts)-1].Seconds()
		rec.Mode, rec.Device, rec.Verified, rec.CheckedBytes, rec.WrongElems, rec.Ops = res.Mode, res.Device, res.Verified, res.CheckedBytes, res.WrongElems, res.Ops
		rec.Groups, rec.GroupCap, rec.HostIssue = res.Waves, res.WaveCapBytes, res.HostIssue.Seconds()
		rec.PeakDevice, rec.Staging = res.PeakDeviceBytes, res.StagingBytes
	}
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	rec.UniqueBytes, rec.Modeled, rec.ModeledOn, rec.SOL = ev.UniqueBytes, ev.Modeled.Seconds(), ev.ModeledOn, ev.SOL.Seconds()
	return rec
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
	transport := fs.String("transport", "", "loopback: copy (device copies, the default) or nccl (self send/recv); nccl: nccl (the default) or copy (NVLink peer copies, one process)")
	device := fs.Int("device", 0, "loopback: the GPU to run on")
	iters := fs.Int("iters", 5, "timed iterations")
	warmup := fs.Int("warmup", 2, "untimed iterations first")
	graph := fs.Bool("graph", true, "replay each iteration as a CUDA graph (no host launch gaps); copy transport only")
	waveBytes := fs.String("wave-bytes", "", "NCCL groups: the most bytes one ordered pair carries in a group when transfers pipeline through several (default: chosen from the schedule; \"none\": never cut)")
	lanes := fs.Int("lanes", 4, "streams per GPU for local ops and copies")
	timeout := fs.Duration("timeout", 5*time.Minute, "nccl: give up on a peer or an operation after this long")
	irIn := fs.String("ir", "", "run this schedule IR file instead of a scenario")
	topoName := fs.String("topology", "", "with --ir: the topology preset for the simulated and SOL columns")
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
	opt := native.Options{Backend: *backend, Transport: *transport, Device: *device, Iters: *iters, Warmup: *warmup,
		Graph: *graph, Lanes: *lanes, Timeout: *timeout, WaveBytes: wb}
	// CUDA graphs of NCCL send/recv failed or hung (docs/native.md): off by
	// default with the nccl transport, refused when asked for.
	if *transport == native.TransportNCCL || *backend == native.NCCL && *transport != native.TransportCopy {
		if graphSet && *graph {
			return usagef("--graph with the nccl transport: CUDA graphs of NCCL send/recv are not supported (docs/native.md); leave --graph out, or use --transport copy")
		}
		opt.Graph = false
	}
	if *backend == native.NCCL {
		l, err := native.DetectLaunchEnv()
		if err != nil {
			return err
		}
		opt.Launch = l
		if l != nil && l.Rank != 0 {
			// One process per GPU: rank 0 prints; the others report errors only.
			e = &env{stdout: io.Discard, stderr: e.stderr}
		}
	} else if *backend != native.Loopback {
		return usagef("--backend %q: want loopback or nccl", *backend)
	}
	var jobs []simJob
	out := runOutput{}
	if *irIn != "" {
		j, err := irJob(*irIn, *topoName)
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
		out.Scenario = *irIn
	} else {
		sc, points, err := sel.load(pos)
		if err != nil {
			return err
		}
		out.Scenario = sc.Name
		if jobs, _, err = simJobs(sc, points, &sel); err != nil {
			return err
		}
	}
	// Loopback predictions run every rank on the one GPU: measure its
	// memory bandwidth once and simulate with it.
	var eopt evaluate.Options
	if *backend == native.Loopback {
		copyBW, err := native.CopyBandwidth(*device, 1<<30)
		if err != nil {
			return fmt.Errorf("measuring GPU %d: %w", *device, err)
		}
		eopt.LoopbackMemory = copyBW
		fmt.Fprintf(e.stderr, "m2n: GPU %d copies at %.0f GB/s (read+write); the loopback model uses it\n", *device, copyBW.GBps())
	}
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
		res, err := runOnGPU(s, opt)
		if errors.Is(err, native.ErrNotSupported) {
			return fmt.Errorf("m2n run needs a GPU build (linux, cgo) and the CUDA driver: %w", err)
		}
		if err != nil {
			res = nil // a run that failed measured nothing
		} else {
			var model evaluate.Record // the GPU ran: model the same schedule
			if model, _, err = evaluate.Schedule(s, tp, eopt); err != nil {
				err = fmt.Errorf("modeling the run: %w", err)
			} else {
				model.Point = j.point
				ev = model
			}
		}
		rec := runJSON(&ev, *backend, *iters, res, err)
		out.Records = append(out.Records, rec)
		if err != nil {
			// Record the failure and go on with the other runs, unless a
			// peer is lost.
			errs++
			fmt.Fprintf(e.stderr, "m2n: point %s, route %s: %v\n", rec.label, j.route, err)
			if res == nil && *backend == native.NCCL && native.IsPeerFailure(err) {
				// Every later run needs the same peers and would wait its
				// own --timeout for them.
				fmt.Fprintf(e.stderr, "m2n: stopping: the NCCL communicators failed, and the %d runs left need the same peers\n", len(jobs)-len(out.Records))
				break
			}
		}
		if res != nil && !res.Verified {
			failed++
			fmt.Fprintf(e.stderr, "m2n: point %s, route %s: %d wrong elements; first: %s\n", rec.label, j.route, res.WrongElems, res.FirstWrong)
		}
	}
	if *asJSON {
		if err := printJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(e.stdout, "scenario %s, backend %s\n\n", out.Scenario, *backend)
		fmt.Fprintln(tw, "point\troute\tmeasured (median)\tmin .. max\tmodeled\tmodeled on\tSOL (cluster)\tverified\thost issue\tpeak memory/GPU\tmode")
		sec := func(v float64) string { return units.Time(v * float64(units.Second)).String() }
		for _, r := range out.Records {
			if !r.ran {
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\tnot run: see the error above\t\t\t\n", r.label, r.Route)
				continue
			}
			v := fmt.Sprintf("ok, %s", units.Bytes(r.CheckedBytes).Human())
			if !r.Verified {
				v = fmt.Sprintf("%d WRONG elements", r.WrongElems)
			}
			modeled, sol := sec(r.Modeled), sec(r.SOL)
			if r.Error != "" { // ran, but could not be modeled: see the error above
				modeled, sol = "-", "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s .. %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.label, r.Route, sec(r.Measured), sec(r.MeasuredMin), sec(r.MeasuredMax),
				modeled, r.ModeledOn, sol, v, sec(r.HostIssue), units.Bytes(r.PeakDevice).Human(), strings.TrimSpace(r.Mode))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return checkFailed{fmt.Sprintf("%d runs delivered wrong bytes", failed)}
	}
	if errs > 0 {
		return fmt.Errorf("%d of %d runs could not run or be modeled", errs, len(jobs))
	}
	return nil
}

func runTopo(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "topo", "[flags]",
		`List the GPUs NVML sees: name, memory, PCI bus id, active NVLink links and
their speed, and NVLink domain (fabric cluster and clique where the GPU reports
one); then the [topology] table m2n would use for them.`)
	asJSON := fs.Bool("json", false, "print JSON on stdout")
	if _, err := fs.parse(args); err != nil {
		return err
	}
	gpus, err := native.Inventory()
	if err != nil {
		if errors.Is(err, native.ErrNotSupported) {
			return fmt.Errorf("m2n topo needs a GPU build (linux, cgo) and NVML: %w", err)
		}
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, native.InventoryJSON(gpus))
	}
	return native.WriteInventory(e.stdout, gpus)
}
