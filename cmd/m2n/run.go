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

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/native"
	"github.com/m2n-project/m2n/plan/ir"
	"github.com/m2n-project/m2n/sim"
)

// runRecord is one line of `m2n run --json`; docs/cli.md documents it.
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
	Error        string         `json:"error,omitempty"` // why this run did not happen
	label        string
}

type runOutput struct {
	Scenario string      `json:"scenario"`
	Records  []runRecord `json:"records"`
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
	type job struct {
		p     *scenario.Point
		route string
		s     *ir.Schedule
		tp    *topo.Topology
	}
	var jobs []job
	out := runOutput{}
	if *irIn != "" {
		j, _, err := irJob(*irIn, *topoName)
		if err != nil {
			return err
		}
		jobs = append(jobs, job{route: j.route, s: j.sched, tp: j.tp})
		out.Scenario = *irIn
	} else {
		sc, points, err := sel.load(pos)
		if err != nil {
			return err
		}
		out.Scenario = sc.Name
		for _, p := range points {
			routes, err := sel.routesOf(p)
			if err != nil {
				return err
			}
			for _, r := range routes {
				jobs = append(jobs, job{p: p, route: r, tp: p.Topology})
			}
		}
	}
	// Loopback predictions run every rank on the one GPU: measure its
	// memory bandwidth once and simulate with it.
	var copyBW units.Bandwidth
	if *backend == native.Loopback {
		copyBW, err = native.CopyBandwidth(*device, 1<<30)
		if err != nil {
			return fmt.Errorf("measuring GPU %d: %w", *device, err)
		}
		fmt.Fprintf(e.stderr, "m2n: GPU %d copies at %.0f GB/s (read+write); the loopback model uses it\n", *device, copyBW.GBps())
	}
	failed, errs := 0, 0
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		s := j.s
		rec := runRecord{Route: j.route, Backend: *backend, Point: map[string]any{}, label: "-", Iterations: *iters}
		if j.p != nil {
			if s, err = sel.build(j.p, j.route); err != nil {
				return err
			}
			rec.Point, rec.label = j.p.Map(), j.p.Label()
		}
		res, err := runOnGPU(s, opt)
		if errors.Is(err, native.ErrNotSupported) {
			return fmt.Errorf("m2n run needs a GPU build (linux, cgo) and the CUDA driver: %w", err)
		}
		if err != nil {
			// Record the failure and go on with the other runs, unless a
			// peer is lost: every later run needs the same peers and would
			// wait its own --timeout for them.
			errs++
			rec.Error = err.Error()
			fmt.Fprintf(e.stderr, "m2n: point %s, route %s: %v\n", rec.label, j.route, err)
			out.Records = append(out.Records, rec)
			if *backend == native.NCCL && native.IsPeerFailure(err) {
				fmt.Fprintf(e.stderr, "m2n: stopping: the NCCL communicators failed, and the %d runs left need the same peers\n", len(jobs)-len(out.Records))
				break
			}
			continue
		}
		ts := append([]units.Time(nil), res.Times...)
		slices.Sort(ts)
		rec.Measured, rec.MeasuredMin, rec.MeasuredMax = ts[len(ts)/2].Seconds(), ts[0].Seconds(), ts[len(ts)-1].Seconds()
		rec.Mode, rec.Device, rec.Verified, rec.CheckedBytes, rec.WrongElems, rec.Ops = res.Mode, res.Device, res.Verified, res.CheckedBytes, res.WrongElems, res.Ops
		rec.Groups, rec.GroupCap, rec.HostIssue = res.Waves, res.WaveCapBytes, res.HostIssue.Seconds()
		rec.PeakDevice, rec.Staging = res.PeakDeviceBytes, res.StagingBytes
		if !res.Verified {
			failed++
			fmt.Fprintf(e.stderr, "m2n: point %s, route %s: %d wrong elements; first: %s\n", rec.label, j.route, res.WrongElems, res.FirstWrong)
		}
		for _, t := range s.Tensors {
			rec.UniqueBytes += t.Src.Bytes()
		}
		if j.tp != nil {
			if sol, err := sim.Bound(j.route, s.Tensors, j.tp); err == nil {
				rec.SOL = sol.Time.Seconds()
			}
			tp, sopt := j.tp, sim.Options{}
			rec.ModeledOn = tp.Preset
			if *backend == native.Loopback {
				tp = tp.Clone()
				tp.Memory = copyBW
				sopt.Loopback = true
				rec.ModeledOn = fmt.Sprintf("one GPU at %.0f GB/s", copyBW.GBps())
			}
			if r, err := sim.Run(s, tp, sopt); err == nil {
				rec.Modeled = r.Makespan.Seconds()
			}
		}
		out.Records = append(out.Records, rec)
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
			if r.Error != "" {
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\tnot run: see the error above\t\t\t\n", r.label, r.Route)
				continue
			}
			v := fmt.Sprintf("ok, %s", units.Bytes(r.CheckedBytes).Human())
			if !r.Verified {
				v = fmt.Sprintf("%d WRONG elements", r.WrongElems)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s .. %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.label, r.Route, sec(r.Measured), sec(r.MeasuredMin), sec(r.MeasuredMax),
				sec(r.Modeled), r.ModeledOn, sec(r.SOL), v, sec(r.HostIssue), units.Bytes(r.PeakDevice).Human(), strings.TrimSpace(r.Mode))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return checkFailed{fmt.Sprintf("%d runs delivered wrong bytes", failed)}
	}
	if errs > 0 {
		return fmt.Errorf("%d of %d runs could not run", errs, len(jobs))
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
		type gj struct {
			native.GPUInfo
			Domain     string  `json:"domain"`
			NVLinkGBps float64 `json:"nvlink_gbps"`
		}
		var out []gj
		for _, g := range gpus {
			out = append(out, gj{g, g.Domain(), g.NVLinkGBps()})
		}
		return printJSON(e.stdout, map[string]any{"gpus": out, "topology_toml": native.TopologyTOML(gpus)})
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "gpu\tname\tmemory\tpci\tnvlink links\tper link\tremote\tfabric\tdomain")
	for _, g := range gpus {
		links, speed := fmt.Sprint(g.NVLinks), "-"
		if gen := g.NVLinkGeneration(); gen != "" {
			links += " (NVLink " + gen + ")"
		}
		if g.NVLinkSpeedMBps > 0 {
			speed = fmt.Sprintf("%d MB/s (%s)", g.NVLinkSpeedMBps, g.NVLinkSpeedFrom)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Index, g.Name, units.Bytes(g.MemoryBytes).Human(), g.PCIBusID,
			links, speed, orDash(g.NVLinkRemote), g.FabricState, g.Domain())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\n%s", native.TopologyTOML(gpus))
	return nil
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
