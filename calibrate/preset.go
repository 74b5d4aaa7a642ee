package calibrate

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
)

// Apply sets a fit's constants on a measured preset's topology. A fit in
// one process sets the machine's constants (memory, NVLink, pack rates,
// latencies) and its launch mode's costs; a fit per GPU sets that mode's
// costs only, so that both modes can be measured into one preset (and
// the machine constants too while the preset has no one-process fit). The constants it
// sets from others (nic from nvlink, the latencies from xfer_latency) get
// a derived record each, appended to f.Measurements. A constant a fit may
// leave unmeasured (batch_shared, quantize_generic, quantize_rows,
// quantize_split: 0) keeps the preset's
// value and record; a per-GPU fit sets it where the preset has none. So do
// the pair's costs (NCCL's and the copies' between GPUs) of a fit on one
// GPU.
func Apply(t *topo.Topology, f *Fit) {
	x := &t.Executor
	optional := func(v *float64, fit float64, only bool) {
		if fit > 0 && (!only || *v == 0) {
			*v = fit
		}
	}
	costs := f.Costs
	if f.NVLink == 0 {
		// One GPU: the pair's benches did not run, so its costs were not
		// measured; the preset keeps its own, and their records.
		old := x.Costs[f.Launch]
		costs.PairRate, costs.DuplexRate, costs.DuplexStart, costs.CopyRate = old.PairRate, old.DuplexRate, old.DuplexStart, old.CopyRate
		costs.DuplexOpLatency, costs.DuplexOpRate, costs.DuplexStartSmall = old.DuplexOpLatency, old.DuplexOpRate, old.DuplexStartSmall
		costs.XferLatency, costs.StartLatency, costs.GroupLatency = old.XferLatency, old.StartLatency, old.GroupLatency
		costs.HostGroup, costs.HostXfer, costs.Ramp = old.HostGroup, old.HostXfer, slices.Clone(old.Ramp)
	}
	// The machine constants are the one-process fit's where there is one.
	if x.Costs[f.Launch] = costs; f.Launch != topo.OneProcess && !x.Costs[topo.OneProcess].IsZero() {
		optional(&x.BatchShared, f.BatchShared, true)
		optional(&x.QuantizeGeneric, f.QuantGeneric, true)
		optional(&x.QuantizeRows, f.QuantRows, true)
		optional(&x.QuantizeSplit, f.QuantSplit, true)
		optional(&x.CopyShared, f.CopyShared, true)
		optional(&x.NCCLBeside, f.NCCLBeside, true)
		optional(&x.NCCLBesideBatch, f.NCCLBesideBatch, true)
		return
	}
	t.Memory = f.Memory
	t.LatencyLocal = f.LatencyLocal
	x.PackLong, x.PackShort, x.PackStage, x.Quantize = f.PackLong, f.PackShort, f.PackStage, f.Quantize
	optional(&x.BatchShared, f.BatchShared, false)
	optional(&x.QuantizeGeneric, f.QuantGeneric, false)
	optional(&x.QuantizeRows, f.QuantRows, false)
	optional(&x.QuantizeSplit, f.QuantSplit, false)
	optional(&x.CopyShared, f.CopyShared, false)
	optional(&x.NCCLBeside, f.NCCLBeside, false)
	optional(&x.NCCLBesideBatch, f.NCCLBesideBatch, false)
	if f.NVLink > 0 {
		// Scenarios with one GPU per virtual domain model NVLink between
		// the two GPUs as their network: both carry the pair's values.
		t.NVLink, t.NIC, t.NICLine = f.NVLink, f.NVLink, t.NVLinkLine
		t.LatencyNVLink, t.LatencyNet = f.Costs.XferLatency, f.Costs.XferLatency
		mode := f.Launch.String()
		xfer := "executor." + key(mode) + ".xfer_latency"
		for _, d := range []struct{ constant, value, from, how string }{
			{"nic", fmtBW(t.NIC), "nvlink", "the pair's NVLink is the network of a scenario with one GPU per domain"},
			{"nic_line", fmtBW(t.NICLine), "the base preset's NVLink line rate", "the pair's NVLink is the network of a scenario with one GPU per domain"},
			{"latency_nvlink", fmtT(t.LatencyNVLink), xfer, "an NCCL send/recv's latency between the two GPUs"},
			{"latency_net", fmtT(t.LatencyNet), xfer, "an NCCL send/recv's latency between the two GPUs"},
		} {
			f.Measurements = append(f.Measurements, scenario.MeasurementSpec{Constant: d.constant, Value: d.value, Fit: d.how, Derived: d.from,
				Launch: mode, Command: f.Command, Date: f.Date, Machine: f.Machine})
		}
	}
}

// Merge keeps the measurements of old that the fit does not replace: a
// record is replaced by the fit's record of the same constant in the same
// launch mode (a record without a launch mode, from before records had
// one, by any of the fit's records of its constant).
func Merge(old []scenario.MeasurementSpec, f *Fit) []scenario.MeasurementSpec {
	type id struct{ constant, launch string }
	replaced := map[id]bool{}
	for _, m := range f.Measurements {
		replaced[id{m.Constant, m.Launch}] = true
		replaced[id{m.Constant, ""}] = true
	}
	var out []scenario.MeasurementSpec
	for _, m := range old {
		if !replaced[id{m.Constant, m.Launch}] {
			out = append(out, m)
		}
	}
	return append(out, f.Measurements...)
}

// constant is one value a measured preset writes.
type constant struct {
	Section string // its table below [topology]: "", "executor", "executor.one_process", "executor.per_gpu"
	Name    string // its key there; a ramp point is "ramp_extra(8MiB)"
	Value   string // as written, with its unit
	Ramp    int64  // a ramp point's size in bytes, else 0
}

// Key is the constant's name in a [[measurement]] record.
func (c constant) Key() string {
	if c.Section == "" {
		return c.Name
	}
	return c.Section + "." + c.Name
}

// constants lists, in the order a preset writes them, every constant of t
// that a measured preset sets.
func constants(t *topo.Topology) []constant {
	cs := []constant{
		{"", "nvlink", fmtBW(t.NVLink), 0}, {"", "nic_line", fmtBW(t.NICLine), 0}, {"", "nic", fmtBW(t.NIC), 0}, {"", "memory", fmtBW(t.Memory), 0},
		{"", "latency_nvlink", fmtT(t.LatencyNVLink), 0}, {"", "latency_net", fmtT(t.LatencyNet), 0}, {"", "latency_local", fmtT(t.LatencyLocal), 0},
	}
	x := &t.Executor
	for _, p := range []struct {
		name     string
		v        float64
		optional bool // 0: not measured, not written
	}{{"pack_long", x.PackLong, false}, {"pack_short", x.PackShort, false}, {"pack_stage", x.PackStage, false}, {"quantize", x.Quantize, false}, {"quantize_generic", x.QuantizeGeneric, true}, {"quantize_rows", x.QuantizeRows, true}, {"quantize_split", x.QuantizeSplit, true}, {"batch_shared", x.BatchShared, true}, {"copy_shared", x.CopyShared, true}, {"nccl_beside", x.NCCLBeside, true}, {"nccl_beside_batch", x.NCCLBesideBatch, true}} {
		if p.optional && p.v == 0 {
			continue
		}
		cs = append(cs, constant{"executor", p.name, fmt.Sprintf("%.3f", p.v), 0})
	}
	for l, c := range x.Costs {
		if c.IsZero() {
			continue
		}
		sec := "executor." + key(topo.Launch(l).String())
		for _, v := range []struct{ name, value string }{
			{"pair_rate", fmtBW(c.PairRate)}, {"duplex_rate", fmtBW(c.DuplexRate)}, {"xfer_latency", fmtT(c.XferLatency)},
			{"group_latency", fmtT(c.GroupLatency)}, {"host_group", fmtT(c.HostGroup)}, {"host_xfer", fmtT(c.HostXfer)},
			{"host_launch", fmtT(c.HostLaunch)}, {"host_event", fmtT(c.HostEvent)}, {"start_latency", fmtT(c.StartLatency)},
			{"box_latency", fmtT(c.BoxLatency)},
		} {
			cs = append(cs, constant{sec, v.name, v.value, 0})
		}
		if c.CopyRate > 0 { // 0: the links' own rate, not written
			cs = append(cs, constant{sec, "copy_rate", fmtBW(c.CopyRate), 0})
		}
		if c.DuplexStart > 0 { // 0: not measured (one size), not written
			cs = append(cs, constant{sec, "duplex_start", fmtT(c.DuplexStart), 0})
		}
		if c.DuplexStartSmall > 0 {
			cs = append(cs, constant{sec, "duplex_start_small", fmtT(c.DuplexStartSmall), 0})
		}
		if c.DuplexOpLatency > 0 {
			cs = append(cs, constant{sec, "duplex_op_latency", fmtT(c.DuplexOpLatency), 0})
		}
		if c.DuplexOpRate > 0 {
			cs = append(cs, constant{sec, "duplex_op_rate", fmtBW(c.DuplexOpRate), 0})
		}
		for _, p := range c.Ramp {
			cs = append(cs, constant{sec, "ramp_extra(" + sizeName(p.Bytes) + ")", fmtT(p.Extra), p.Bytes})
		}
	}
	return cs
}

// WritePreset writes a measured preset's document: its name, the base
// preset, every constant of t that a measured preset sets, and where each
// comes from.
func WritePreset(w io.Writer, name, description, base string, t *topo.Topology, ms []scenario.MeasurementSpec) error {
	var b strings.Builder
	q := strconv.Quote
	fmt.Fprintf(&b, "# Written by `m2n calibrate` (docs/calibration.md); each constant's\n# measurement is a [[measurement]] below.\nname = %s\ndescription = %s\n\n", q(name), q(description))
	fmt.Fprintf(&b, "[topology]\npreset = %s\n", q(base))
	section := ""
	var rampBytes, rampExtra []string
	flushRamp := func() {
		if len(rampBytes) > 0 {
			fmt.Fprintf(&b, "ramp_bytes = [%s]\nramp_extra = [%s]\n", strings.Join(rampBytes, ", "), strings.Join(rampExtra, ", "))
		}
		rampBytes, rampExtra = nil, nil
	}
	for _, c := range constants(t) {
		if c.Section != section {
			flushRamp()
			section = c.Section
			fmt.Fprintf(&b, "\n[topology.%s]\n", section)
		}
		switch {
		case c.Ramp > 0:
			rampBytes, rampExtra = append(rampBytes, q(sizeText(c.Ramp))), append(rampExtra, q(c.Value))
		case c.Section == "executor":
			fmt.Fprintf(&b, "%s = %s\n", c.Name, c.Value)
		default:
			fmt.Fprintf(&b, "%s = %s\n", c.Name, q(c.Value))
		}
	}
	flushRamp()
	for _, m := range ms {
		fmt.Fprintf(&b, "\n[[measurement]]\nconstant = %s\nvalue = %s\n", q(m.Constant), q(m.Value))
		if m.Min != "" || m.Max != "" {
			fmt.Fprintf(&b, "min = %s\nmax = %s\n", q(m.Min), q(m.Max))
		}
		fmt.Fprintf(&b, "samples = %d\nfit = %s\n", m.Samples, q(m.Fit))
		if m.Residual != 0 {
			fmt.Fprintf(&b, "residual = %g\n", m.Residual)
		}
		if m.Derived != "" {
			fmt.Fprintf(&b, "derived = %s\n", q(m.Derived))
		}
		if m.Launch != "" {
			fmt.Fprintf(&b, "launch = %s\n", q(m.Launch))
		}
		fmt.Fprintf(&b, "command = %s\ndate = %s\nmachine = %s\n", q(m.Command), q(m.Date), q(m.Machine))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Problem is one constant of a measured preset that its records do not
// account for.
type Problem struct {
	Constant string // the record key, e.g. "memory", "executor.per_gpu.host_group"
	Why      string
}

func (p Problem) String() string { return p.Constant + ": " + p.Why }

// Audit checks a measured preset's provenance: every constant it sets has
// a record of the launch mode that set it (for an executor cost, its own
// mode; for a machine constant, one process where a one-process record
// exists, else per GPU), whose value is the constant's as written; a
// derived constant's value is that of the constant it names; every record
// names a constant of the preset and has a launch mode, and no two
// records share a constant and a mode. It returns the problems in the
// order the preset writes its constants, then the stray records.
func Audit(t *topo.Topology, ms []scenario.MeasurementSpec) []Problem {
	type id struct{ constant, launch string }
	recs := map[id]scenario.MeasurementSpec{}
	var probs []Problem
	cs := constants(t)
	values := map[string]string{}
	for _, c := range cs {
		values[c.Key()] = c.Value
	}
	var strays []Problem
	for _, m := range ms {
		switch k := (id{m.Constant, m.Launch}); {
		case m.Launch == "":
			strays = append(strays, Problem{m.Constant, "a record without a launch mode"})
		case recs[k].Constant != "":
			strays = append(strays, Problem{m.Constant, "two records measured " + m.Launch})
		case values[m.Constant] == "":
			strays = append(strays, Problem{m.Constant, "a record of no constant of the preset"})
		default:
			recs[k] = m
		}
	}
	one, per := topo.OneProcess.String(), topo.PerGPU.String()
	for _, c := range cs {
		var r scenario.MeasurementSpec
		var ok bool
		switch c.Section {
		case "executor.one_process":
			r, ok = recs[id{c.Key(), one}]
		case "executor.per_gpu":
			r, ok = recs[id{c.Key(), per}]
		default:
			if r, ok = recs[id{c.Key(), one}]; !ok {
				r, ok = recs[id{c.Key(), per}]
			}
		}
		switch {
		case !ok:
			probs = append(probs, Problem{c.Key(), fmt.Sprintf("%s has no record", c.Value)})
		case r.Value != c.Value:
			probs = append(probs, Problem{c.Key(), fmt.Sprintf("%s, but its record (%s, %s) says %s", c.Value, r.Launch, r.Date, r.Value)})
		case r.Derived != "" && values[r.Derived] != "" && values[r.Derived] != c.Value:
			probs = append(probs, Problem{c.Key(), fmt.Sprintf("%s, derived from %s = %s", c.Value, r.Derived, values[r.Derived])})
		}
	}
	return append(probs, strays...)
}

// Provenance is Audit as an error: nil when every constant is accounted
// for.
func Provenance(t *topo.Topology, ms []scenario.MeasurementSpec) error {
	var errs []error
	for _, p := range Audit(t, ms) {
		errs = append(errs, errors.New(p.String()))
	}
	return errors.Join(errs...)
}

// sizeText writes a size as a preset keeps it: "8 MiB".
func sizeText(n int64) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
