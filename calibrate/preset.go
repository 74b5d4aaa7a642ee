package calibrate

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
)

// Apply sets a fit's constants on a measured preset's topology. A fit in
// one process sets the machine's constants (memory, NVLink, pack rates,
// latencies) and its launch mode's costs; a fit per GPU sets that mode's
// costs only, so that both modes can be measured into one preset.
func Apply(t *topo.Topology, f *Fit) {
	t.Executor.Costs[f.Launch] = f.Costs
	if f.Launch != topo.OneProcess && t.Memory > 0 && !t.Executor.IsZero() {
		return
	}
	t.Memory = f.Memory
	t.LatencyLocal = f.LatencyLocal
	t.Executor.PackLong, t.Executor.PackShort, t.Executor.PackStage, t.Executor.Quantize = f.PackLong, f.PackShort, f.PackStage, f.Quantize
	if f.NVLink > 0 {
		// Scenarios with one GPU per virtual domain model NVLink between
		// the two GPUs as their network: both carry the pair's values.
		t.NVLink, t.NIC, t.NICLine = f.NVLink, f.NVLink, t.NVLinkLine
		t.LatencyNVLink, t.LatencyNet = f.Costs.XferLatency, f.Costs.XferLatency
	}
}

// Merge keeps the measurements of old that the fit does not replace.
func Merge(old []scenario.MeasurementSpec, f *Fit) []scenario.MeasurementSpec {
	replaced := map[string]bool{}
	for _, m := range f.Measurements {
		replaced[m.Constant] = true
	}
	var out []scenario.MeasurementSpec
	for _, m := range old {
		if !replaced[m.Constant] {
			out = append(out, m)
		}
	}
	return append(out, f.Measurements...)
}

// WritePreset writes a measured preset's document: its name, the base
// preset, every constant of t that a measured preset sets, and where each
// comes from.
func WritePreset(w io.Writer, name, description, base string, t *topo.Topology, ms []scenario.MeasurementSpec) error {
	var b strings.Builder
	q := strconv.Quote
	fmt.Fprintf(&b, "# Written by `m2n calibrate` (docs/calibration.md); each constant's\n# measurement is a [[measurement]] below.\nname = %s\ndescription = %s\n\n", q(name), q(description))
	fmt.Fprintf(&b, "[topology]\npreset = %s\n", q(base))
	fmt.Fprintf(&b, "nvlink = %s\nnic_line = %s\nnic = %s\nmemory = %s\n", q(fmtBW(t.NVLink)), q(fmtBW(t.NICLine)), q(fmtBW(t.NIC)), q(fmtBW(t.Memory)))
	fmt.Fprintf(&b, "latency_nvlink = %s\nlatency_net = %s\nlatency_local = %s\n", q(fmtT(t.LatencyNVLink)), q(fmtT(t.LatencyNet)), q(fmtT(t.LatencyLocal)))
	x := &t.Executor
	fmt.Fprintf(&b, "\n[topology.executor]\npack_long = %.3f\npack_short = %.3f\npack_stage = %.3f\nquantize = %.3f\n", x.PackLong, x.PackShort, x.PackStage, x.Quantize)
	for l, c := range x.Costs {
		if c.IsZero() {
			continue
		}
		fmt.Fprintf(&b, "\n[topology.executor.%s]\npair_rate = %s\nduplex_rate = %s\nxfer_latency = %s\ngroup_latency = %s\nhost_group = %s\nhost_xfer = %s\nhost_launch = %s\nhost_event = %s\nstart_latency = %s\nbox_latency = %s\n",
			key(topo.Launch(l).String()), q(fmtBW(c.PairRate)), q(fmtBW(c.DuplexRate)), q(fmtT(c.XferLatency)), q(fmtT(c.GroupLatency)), q(fmtT(c.HostGroup)), q(fmtT(c.HostXfer)), q(fmtT(c.HostLaunch)), q(fmtT(c.HostEvent)), q(fmtT(c.StartLatency)), q(fmtT(c.BoxLatency)))
		if len(c.Ramp) > 0 {
			var bs, es []string
			for _, p := range c.Ramp {
				bs, es = append(bs, q(sizeText(p.Bytes))), append(es, q(fmtT(p.Extra)))
			}
			fmt.Fprintf(&b, "ramp_bytes = [%s]\nramp_extra = [%s]\n", strings.Join(bs, ", "), strings.Join(es, ", "))
		}
	}
	for _, m := range ms {
		fmt.Fprintf(&b, "\n[[measurement]]\nconstant = %s\nvalue = %s\n", q(m.Constant), q(m.Value))
		if m.Min != "" || m.Max != "" {
			fmt.Fprintf(&b, "min = %s\nmax = %s\n", q(m.Min), q(m.Max))
		}
		fmt.Fprintf(&b, "samples = %d\nfit = %s\n", m.Samples, q(m.Fit))
		if m.Residual != 0 {
			fmt.Fprintf(&b, "residual = %g\n", m.Residual)
		}
		fmt.Fprintf(&b, "command = %s\ndate = %s\nmachine = %s\n", q(m.Command), q(m.Date), q(m.Machine))
	}
	_, err := io.WriteString(w, b.String())
	return err
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
