package calibrate

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/program"
	"github.com/m2n-project/m2n/sim"
)

// truth is a machine with known constants.
func truth() *topo.Topology {
	t := topology()
	t.Memory = units.GBps(4200)
	t.LatencyLocal = 2500 * units.Nanosecond
	t.NVLink, t.NIC, t.NICLine = units.GBps(350), units.GBps(350), units.GBps(450)
	t.Executor = topo.Executor{PackLong: 0.88, PackShort: 0.8, PackStage: 0.65, Quantize: 0.3, QuantizeGeneric: 0.12, QuantizeRows: 0.21, QuantizeSplit: 0.17, BatchShared: 0.27, CopyShared: 0.26, NCCLBeside: 0.85, NCCLBesideBatch: 0.7}
	t.Executor.Costs[topo.OneProcess] = topo.ExecCosts{PairRate: units.GBps(365), DuplexRate: units.GBps(610), DuplexStart: 120 * units.Microsecond, DuplexStartSmall: 35 * units.Microsecond, DuplexOpLatency: 12 * units.Microsecond, DuplexOpRate: units.GBps(1800), XferLatency: 6 * units.Microsecond,
		GroupLatency: 4 * units.Microsecond, HostGroup: 5 * units.Microsecond, HostXfer: 2 * units.Microsecond, HostLaunch: 3 * units.Microsecond, HostEvent: 900 * units.Nanosecond,
		StartLatency: 20 * units.Microsecond, BoxLatency: 2 * units.Microsecond, Ramp: []topo.RampPoint{{Bytes: 8 << 20}, {Bytes: 32 << 20, Extra: 9 * units.Microsecond}, {Bytes: 64 << 20, Extra: 25 * units.Microsecond}}}
	t.Executor.Costs[topo.PerGPU] = topo.ExecCosts{PairRate: units.GBps(360), DuplexRate: units.GBps(640), DuplexStart: 90 * units.Microsecond, DuplexOpLatency: 9 * units.Microsecond, XferLatency: 9 * units.Microsecond,
		GroupLatency: 7 * units.Microsecond, HostGroup: 8 * units.Microsecond, HostXfer: 1 * units.Microsecond, HostLaunch: 4 * units.Microsecond, HostEvent: 1200 * units.Nanosecond,
		StartLatency: 30 * units.Microsecond, BoxLatency: 3 * units.Microsecond, CopyRate: units.GBps(330), Ramp: []topo.RampPoint{{Bytes: 8 << 20}, {Bytes: 32 << 20, Extra: 15 * units.Microsecond}, {Bytes: 64 << 20, Extra: 20 * units.Microsecond}}}
	return t
}

// measure runs every bench on the simulator of the truth, as the command
// runs them on GPUs, with the box classes at their efficiencies.
func measure(t *testing.T, tp *topo.Topology, launch topo.Launch) Input {
	t.Helper()
	return measureOn(t, tp, launch, 2)
}

// measureOn is measure on a machine of gpus GPUs (1: the benches of one
// GPU only, as `m2n calibrate` runs there).
func measureOn(t *testing.T, tp *topo.Topology, launch topo.Launch, gpus int) Input {
	t.Helper()
	bs, err := Benches(gpus)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Launch: launch, GPUsPerProcess: gpus, Samples: map[string]Sample{}, Counts: map[string]Counts{}, Boxes: map[program.BoxClass]BoxSample{}}
	if launch == topo.PerGPU {
		in.GPUsPerProcess = 1
	}
	for _, b := range bs {
		o := sim.Options{Loopback: b.GPUs == 1, Exec: sim.Exec{Launch: launch, Transport: b.Transport, Graph: b.Graph, WaveBytes: b.WaveBytes, NoBatch: b.NoBatch}, GroupEnds: b.Profile}
		r, err := sim.Run(b.Schedule, tp, o)
		if err != nil {
			t.Fatalf("%s: %v", b.Name, err)
		}
		in.Samples[b.Name] = Sample{Times: []units.Time{r.Makespan}, HostIssue: r.HostIssue, Groups: r.Groups}
		if b.Profile {
			if len(r.GroupEnds) == 0 {
				t.Fatalf("%s: the model timed no group", b.Name)
			}
			s := in.Samples[b.Name]
			s.GroupEnd = r.GroupEnds[0]
			in.Samples[b.Name] = s
		}
		if in.Counts[b.Name], err = HostCounts(&b, launch); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range BoxCases() {
		eff := map[program.BoxClass]float64{program.LongRuns: tp.Executor.PackLong, program.ShortRuns: tp.Executor.PackShort, program.Staged: tp.Executor.PackStage}[c.Class]
		n := c.Elem
		for _, k := range c.Size {
			n *= k
		}
		cp := units.Time(2 * float64(n) / float64(tp.Memory) * 1e12)
		in.Boxes[c.Class] = BoxSample{Pack: []units.Time{units.Time(float64(cp) / eff)}, Unpack: []units.Time{units.Time(float64(cp) / eff)}, Copy: []units.Time{cp}}
	}
	// The quantize kernel at its rate.
	qb := int64(3)
	for _, n := range QuantShape {
		qb *= n
	}
	in.Quant, in.QuantBytes = []units.Time{units.Time(float64(qb) / (tp.Executor.Quantize * float64(tp.Memory)) * 1e12)}, qb
	// The generic kernel at its own: the source read, fp8 and a scale a
	// block written; the row kernel the same with a scale a row.
	gb := 3*QuantGenShape[0]*QuantGenShape[1] + 4*(QuantGenShape[0]/QuantGenBlock[0])*(QuantGenShape[1]/QuantGenBlock[1])
	in.QuantGen, in.QuantGenBytes = []units.Time{units.Time(float64(gb) / (tp.Executor.QuantizeGeneric * float64(tp.Memory)) * 1e12)}, gb
	rb := 3*QuantGenShape[0]*QuantGenShape[1] + 4*QuantGenShape[0]
	in.QuantRows, in.QuantRowsBytes = []units.Time{units.Time(float64(rb) / (tp.Executor.QuantizeRows * float64(tp.Memory)) * 1e12)}, rb
	// The split kernels: one scale, the source counted once.
	sb := 3*QuantGenShape[0]*QuantGenShape[1] + 4
	in.QuantSplit, in.QuantSplitBytes = []units.Time{units.Time(float64(sb) / (tp.Executor.QuantizeSplit * float64(tp.Memory)) * 1e12)}, sb
	// The batch on the whole GPU at the long class's rate, and on the
	// grid left beside NCCL at batch_shared of it.
	bb := BatchCase.Elem * layout.Box{Size: BatchCase.Size}.Elems()
	whole := units.Time(2 * float64(bb) / (tp.Executor.PackLong * float64(tp.Memory)) * 1e12)
	in.BatchWhole, in.BatchShared = []units.Time{whole}, []units.Time{units.Time(float64(whole) / tp.Executor.BatchShared)}
	return in
}

func nearly(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*math.Abs(want) {
		t.Errorf("%s: fitted %g, the truth is %g (tolerance %.1f%%)", name, got, want, 100*tol)
	}
}

// The fit recovers the constants of a machine that runs the model: it
// inverts the simulator on the benches, in both launch modes.
func TestFitRecoversTheModel(t *testing.T) {
	tp := truth()
	for _, launch := range []topo.Launch{topo.OneProcess, topo.PerGPU} {
		f, err := Fitting(measure(t, tp, launch))
		if err != nil {
			t.Fatal(err)
		}
		want := tp.Executor.Costs[launch]
		near := func(name string, got, want, tol float64) {
			t.Helper()
			nearly(t, launch.String()+" "+name, got, want, tol)
		}
		near("memory", float64(f.Memory), float64(tp.Memory), 0.01)
		near("duplex_rate", float64(f.Costs.DuplexRate), float64(want.DuplexRate), 0.01)
		near("duplex_start", float64(f.Costs.DuplexStart), float64(want.DuplexStart), 0.05)
		near("duplex_start_small", float64(f.Costs.DuplexStartSmall), float64(want.DuplexStartSmall), 0.05)
		near("nccl_beside", f.NCCLBeside, tp.Executor.NCCLBeside, 0.01)
		near("nccl_beside_batch", f.NCCLBesideBatch, tp.Executor.NCCLBesideBatch, 0.01)
		near("duplex_op_latency", float64(f.Costs.DuplexOpLatency), float64(want.DuplexOpLatency), 0.03)
		if want.DuplexOpRate > 0 {
			near("duplex_op_rate", float64(f.Costs.DuplexOpRate), float64(want.DuplexOpRate), 0.03)
		} else if f.Costs.DuplexOpRate > 1e15 || f.Costs.DuplexOpRate < 0 {
			t.Errorf("%v: duplex_op_rate %v, the truth has no bytes term", launch, f.Costs.DuplexOpRate)
		}
		near("copy_shared", f.CopyShared, tp.Executor.CopyShared, 0.02)
		near("latency_local", float64(f.LatencyLocal), float64(tp.LatencyLocal), 0.02)
		// Copies between GPUs run at the launch mode's copy rate where it
		// has one (CUDA IPC per GPU), else at the link's.
		copyRate := tp.NVLink
		if want.CopyRate > 0 {
			copyRate = min(copyRate, want.CopyRate)
		}
		near("nvlink", float64(f.NVLink), float64(copyRate), 0.015) // less a copy's latency
		near("copy_rate", float64(f.Costs.CopyRate), float64(copyRate), 0.015)
		near("pack_long", f.PackLong, tp.Executor.PackLong, 0.01)
		near("pack_short", f.PackShort, tp.Executor.PackShort, 0.01)
		near("pack_stage", f.PackStage, tp.Executor.PackStage, 0.01)
		near("quantize", f.Quantize, tp.Executor.Quantize, 0.01)
		near("quantize_generic", f.QuantGeneric, tp.Executor.QuantizeGeneric, 0.01)
		near("quantize_rows", f.QuantRows, tp.Executor.QuantizeRows, 0.01)
		near("quantize_split", f.QuantSplit, tp.Executor.QuantizeSplit, 0.01)
		near("batch_shared", f.BatchShared, tp.Executor.BatchShared, 0.01)
		// One pair alone runs at the lesser of its cap and the link.
		near("pair_rate", float64(f.Costs.PairRate), math.Min(float64(want.PairRate), float64(tp.NVLink)), 0.01)
		near("host_launch", float64(f.Costs.HostLaunch), float64(want.HostLaunch), 0.01)
		near("host_event", float64(f.Costs.HostEvent), float64(want.HostEvent), 0.01)
		near("host_group", float64(f.Costs.HostGroup), float64(want.HostGroup), 0.02)
		near("host_xfer", float64(f.Costs.HostXfer), float64(want.HostXfer), 0.005)
		near("xfer_latency", float64(f.Costs.XferLatency), float64(want.XferLatency), 0.05)
		near("group_latency", float64(f.Costs.GroupLatency), float64(want.GroupLatency), 0.05)
		near("start_latency", float64(f.Costs.StartLatency), float64(want.StartLatency), 0.05)
		near("box_latency", float64(f.Costs.BoxLatency), float64(want.BoxLatency), 0.02)
		if len(f.Costs.Ramp) != len(want.Ramp) {
			t.Fatalf("%v: ramp %v, want %v", launch, f.Costs.Ramp, want.Ramp)
		}
		for k, p := range f.Costs.Ramp {
			if p.Bytes != want.Ramp[k].Bytes || math.Abs(float64(p.Extra-want.Ramp[k].Extra)) > 0.5e6 {
				t.Errorf("%v: ramp %v, want %v (within 0.5 us)", launch, f.Costs.Ramp, want.Ramp)
			}
		}
		if len(f.Measurements) < 10 {
			t.Errorf("%v: %d measurements noted, want one per constant", launch, len(f.Measurements))
		}
	}
}

// The host's cost of an event holds up under host noise: with the launch
// and waits benches' host issue 5% off either way it stays within 15% of
// the truth (from the events bench, as before the waits bench, up to
// about 35%); samples without the waits bench (an older m2n's) still fit
// it, from events.
func TestHostEventUnderNoise(t *testing.T) {
	tp := truth()
	want := tp.Executor.Costs[topo.OneProcess]
	base := measure(t, tp, topo.OneProcess)
	with := func(scale map[string]float64, drop string) Input {
		in := base
		in.Samples, in.Counts = maps.Clone(base.Samples), maps.Clone(base.Counts)
		for name, k := range scale {
			s := in.Samples[name]
			s.HostIssue = units.Time(float64(s.HostIssue) * k)
			in.Samples[name] = s
		}
		delete(in.Samples, drop)
		delete(in.Counts, drop)
		return in
	}
	for _, a := range []float64{0.95, 1.05} {
		for _, b := range []float64{0.95, 1.05} {
			f, err := Fitting(with(map[string]float64{"launch": a, "waits": b, "events": b}, ""))
			if err != nil {
				t.Fatal(err)
			}
			nearly(t, fmt.Sprintf("host_event, launch x%.2f, waits x%.2f", a, b), float64(f.Costs.HostEvent), float64(want.HostEvent), 0.15)
		}
	}
	f, err := Fitting(with(nil, "waits"))
	if err != nil {
		t.Fatal(err)
	}
	nearly(t, "host_event from events", float64(f.Costs.HostEvent), float64(want.HostEvent), 0.01)
	nearly(t, "host_launch from events", float64(f.Costs.HostLaunch), float64(want.HostLaunch), 0.01)
}

// A measured preset round-trips through the TOML parser: the topology it
// defines is the one written, to the precision a preset keeps.
func TestPresetRoundTrip(t *testing.T) {
	tp := truth()
	p := topology()
	p.Domains = 1
	for _, launch := range []topo.Launch{topo.OneProcess, topo.PerGPU} {
		f, err := Fitting(measure(t, tp, launch))
		if err != nil {
			t.Fatal(err)
		}
		Apply(p, f)
	}
	var buf bytes.Buffer
	if err := WritePreset(&buf, "test-measured", "a test", "hgx-h200", p, nil); err != nil {
		t.Fatal(err)
	}
	doc, got, err := scenario.ParsePreset("test.toml", buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if doc.Name != "test-measured" || got.Preset != "test-measured" {
		t.Errorf("name %q, preset %q", doc.Name, got.Preset)
	}
	rel := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b)+1e-3 }
	for name, v := range map[string][2]float64{
		"memory": {float64(got.Memory), float64(p.Memory)}, "nvlink": {float64(got.NVLink), float64(p.NVLink)},
		"latency_local": {float64(got.LatencyLocal), float64(p.LatencyLocal)}, "pack_short": {got.Executor.PackShort, p.Executor.PackShort},
	} {
		if math.Abs(v[0]-v[1]) > 0.0051*math.Abs(v[1]) {
			t.Errorf("%s: read %g, wrote %g", name, v[0], v[1])
		}
	}
	for l := range 2 {
		g, w := got.Executor.Costs[l], p.Executor.Costs[l]
		for name, v := range map[string][2]float64{
			"pair_rate": {float64(g.PairRate), float64(w.PairRate)}, "host_group": {float64(g.HostGroup), float64(w.HostGroup)},
			"xfer_latency": {float64(g.XferLatency), float64(w.XferLatency)}, "group_latency": {float64(g.GroupLatency), float64(w.GroupLatency)},
		} {
			// Times are kept to 10 ns, rates to 0.1 GB/s.
			if d := math.Abs(v[0] - v[1]); d > 5e3+1 && !rel(v[0], v[1]) && d > 0.0005*math.Abs(v[1]) {
				t.Errorf("%v %s: read %g, wrote %g", topo.Launch(l), name, v[0], v[1])
			}
		}
	}
	// Written again from what was read: the same document.
	var again bytes.Buffer
	if err := WritePreset(&again, "test-measured", "a test", "hgx-h200", got, nil); err != nil {
		t.Fatal(err)
	}
	if again.String() != buf.String() {
		t.Errorf("rewritten preset differs:\n%s\nvs\n%s", again.String(), buf.String())
	}
}

// A beside bench whose copy did not outlast NCCL gives neither
// copy_shared nor nccl_beside, and says so, instead of failing the fit.
func TestBesideCopyTooShort(t *testing.T) {
	in := measure(t, truth(), topo.OneProcess)
	s := in.Samples["beside"]
	s.GroupEnd = s.Times[0] // NCCL ended with the iteration
	in.Samples["beside"] = s
	f, err := Fitting(in)
	if err != nil {
		t.Fatal(err)
	}
	if f.NCCLBeside != 0 || f.CopyShared != 0 {
		t.Errorf("nccl_beside %g, copy_shared %g from a copy that did not outlast NCCL", f.NCCLBeside, f.CopyShared)
	}
	if !slices.ContainsFunc(f.Notes, func(n string) bool { return strings.Contains(n, "bench beside") }) {
		t.Errorf("no note says why: %q", f.Notes)
	}
}
