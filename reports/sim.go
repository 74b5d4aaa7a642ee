package reports

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/model/units"
)

// The command line's views of evaluated rows: the text tables and the JSON
// records of `m2n sim` (docs/cli.md).

// simRecord is one record of `m2n sim --json` and `m2n report --json`:
// the JSON view of an evaluated row; docs/cli.md documents it.
type simRecord struct {
	Point         map[string]any   `json:"point"`
	Route         string           `json:"route"`
	Ideal         bool             `json:"ideal"`
	UniqueBytes   int64            `json:"unique_bytes"`
	SOLSeconds    float64          `json:"sol_s"`
	SOLTerm       string           `json:"sol_term"`
	Modeled       float64          `json:"modeled_s"`
	HostIssue     float64          `json:"modeled_host_issue_s,omitempty"` // the executor model's host issue time
	GroupEnds     []float64        `json:"modeled_group_ends_s,omitempty"` // with --group-ends: each NCCL group's end on its first GPU
	Ratio         float64          `json:"modeled_over_sol"`
	Bottleneck    bottleneckJSON   `json:"bottleneck"`
	Measured      *float64         `json:"measured_s,omitempty"`
	Error         *float64         `json:"error,omitempty"`
	Source        string           `json:"measured_source,omitempty"`
	Note          string           `json:"measured_note,omitempty"` // the reference's note, e.g. "approximate"
	Ops           int              `json:"ops"`
	Flows         int              `json:"flows"`
	FlowClasses   int              `json:"flow_classes,omitempty"`
	Events        int64            `json:"events"`
	Resources     []resourceJSON   `json:"resources"`
	TensorClasses []evaluate.Class `json:"tensor_classes,omitempty"`
	Models        string           `json:"models"`
	Excludes      string           `json:"excludes"`
	Memory        memoryJSON       `json:"memory"`
	Framework     *frameworkJSON   `json:"framework,omitempty"` // with [workload.framework]
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

func simJSON(r *Row) simRecord {
	j := simRecord{
		Point: map[string]any{}, Route: r.Route, Ideal: r.Ideal, UniqueBytes: r.UniqueBytes,
		SOLSeconds: r.SOL.Seconds(), SOLTerm: r.SOLTerm, Modeled: r.Modeled.Seconds(), Ratio: r.Ratio(),
		Bottleneck: bottleneckJSON{r.Bottleneck.Name, r.Bottleneck.Class, r.Bottleneck.Utilization},
		Ops:        r.Ops, Flows: r.Flows, FlowClasses: r.FlowClasses, Events: r.Events, TensorClasses: r.TensorClasses,
		HostIssue: r.ModeledHostIssue.Seconds(),
		Models:    r.Models, Excludes: evaluate.Excludes, Memory: memJSON(r.Memory),
	}
	for _, ge := range r.ModeledGroupEnds {
		j.GroupEnds = append(j.GroupEnds, ge.Seconds())
	}
	if f := r.Framework; f != nil {
		j.Framework = &frameworkJSON{f.Export.Seconds(), f.Load.Seconds(), (f.Export + r.Modeled + f.Load).Seconds()}
	}
	if r.Point != nil {
		j.Point = r.Point.Map()
	}
	if r.HasMeasured() {
		m, e := r.Measured.Seconds(), r.MeasuredError()
		j.Measured, j.Error, j.Source, j.Note = &m, &e, r.MeasuredSource, r.MeasuredNote
	}
	for _, c := range r.Resources {
		j.Resources = append(j.Resources, resourceJSON{c.Class, c.Bytes, c.Busy.Seconds(), c.Utilization})
	}
	return j
}

// frameworkJSON is the user's framework costs charged to a record.
type frameworkJSON struct {
	ExportSeconds float64 `json:"export_s"`
	LoadSeconds   float64 `json:"load_s"`
	RefitSeconds  float64 `json:"refit_s"` // export + modeled + load
}

// firstClasses is the first row's tensor classes that has any.
func firstClasses(rows []Row) []evaluate.Class {
	for i := range rows {
		if len(rows[i].TensorClasses) > 0 {
			return rows[i].TensorClasses
		}
	}
	return nil
}

// memoryJSON is evaluate.Memory in a record: the busiest GPU's.
type memoryJSON struct {
	GPU           int   `json:"gpu"`
	ResidentBytes int64 `json:"resident_bytes"`
	StagingBytes  int64 `json:"staging_bytes"`
	TotalBytes    int64 `json:"total_bytes"`
	CapacityBytes int64 `json:"capacity_bytes,omitempty"` // absent: unknown
	Fits          *bool `json:"fits,omitempty"`           // absent: capacity unknown
}

func memJSON(m evaluate.Memory) memoryJSON {
	out := memoryJSON{GPU: m.GPU, ResidentBytes: m.ResidentBytes, StagingBytes: m.StagingBytes, TotalBytes: m.TotalBytes}
	if m.CapacityKnown {
		fits := m.Fits
		out.CapacityBytes, out.Fits = m.CapacityBytes, &fits
	}
	return out
}

type simOutput struct {
	Scenario string      `json:"scenario"`
	Topology string      `json:"topology"`
	Records  []simRecord `json:"records"`
	Skipped  []skipJSON  `json:"skipped,omitempty"`
	// Recommendations, with --recommend.
	Recommendations []Recommendation `json:"recommendations,omitempty"`
}

// skipJSON is a route at a point not evaluated, and why.
type skipJSON struct {
	Point  map[string]any `json:"point"`
	Route  string         `json:"route"`
	Reason string         `json:"reason"`
}

// SimJSON is the JSON output of `m2n sim --json` (docs/cli.md): the
// scenario, the topology and a record per row.
func SimJSON(scenario, topology string, rows []Row, skips []evaluate.Skip, recs []Recommendation) any {
	out := simOutput{Scenario: scenario, Topology: topology, Recommendations: recs}
	for i := range rows {
		out.Records = append(out.Records, simJSON(&rows[i]))
	}
	for _, k := range skips {
		j := skipJSON{Point: map[string]any{}, Route: k.Route, Reason: k.Reason}
		if k.Point != nil {
			j.Point = k.Point.Map()
		}
		out.Skipped = append(out.Skipped, j)
	}
	return out
}

// WriteSimTable writes the text tables of `m2n sim`: per row the SOL, the
// modeled time, the bottleneck and any reference; a workload's tensors by
// class; the resources by class.
func WriteSimTable(w io.Writer, scenario, topology string, rows []Row, skips []evaluate.Skip, ideal bool) error {
	mode := "achievable rates, op latencies"
	for i := range rows {
		if x := rows[i].ExecutorModel; x != "" {
			mode = "achievable rates, executor model " + x + " (docs/calibration.md)"
			break
		}
	}
	if ideal {
		mode = "ideal: line rates, no latency"
	}
	fmt.Fprintf(w, "scenario %s on %s (%s); bytes counted exactly, rates decimal\n\n", scenario, topology, mode)
	// Ideal times are not what a measurement compares with: under --ideal
	// the table leaves the measured and error columns out.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	names := []string{"point", "route", "sol", "modeled", "ratio"}
	if hasFramework(rows) {
		names = append(names, "framework", "refit")
	}
	names = append(names, "bottleneck", "memory", "fits")
	if !ideal {
		names = append(names, "measured", "error")
	}
	t := &results{ideal: ideal}
	cols := t.layout(asText, names...)
	fmt.Fprintln(tw, strings.Join(heads(cols, asText), "\t"))
	measured := 0
	for i := range rows {
		if rows[i].HasMeasured() && ideal {
			measured++
		}
		fmt.Fprintln(tw, strings.Join(t.cells(cols, &rows[i], asText), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if measured > 0 {
		fmt.Fprintf(w, "\n%d reference measurements left out: they compare with the achievable rates, not --ideal's\n", measured)
	}
	if len(skips) > 0 {
		fmt.Fprintln(w)
	}
	for _, k := range skips {
		fmt.Fprintf(w, "not evaluated: %s %s: %s\n", k.Label(), k.Route, k.Reason)
	}
	if len(rows) > 0 {
		fmt.Fprintf(w, "\nmodeled: %s; not modeled: %s (docs/sim.md)\n", rows[0].Models, evaluate.Excludes)
		fmt.Fprintf(w, "memory/GPU: the busiest GPU's weights in the refit (source shards, destination weights with FP8 scales) plus staging, against its memory; not optimizer state, activations or KV cache\n")
	}
	if err := writeClasses(w, rows); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nresources by class (bytes carried; the busiest port's busy time and utilization)\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "point\troute\tclass\tbytes\tbusy max\tutilization max")
	for i := range rows {
		r := &rows[i]
		for _, c := range r.Resources {
			if c.Bytes == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.0f%%\n", r.Label(), r.Route, c.Class, units.Bytes(c.Bytes).Human(), c.Busy, 100*c.Utilization)
		}
	}
	return tw.Flush()
}

// writeClasses writes each point's tensor classes once.
func writeClasses(w io.Writer, rows []Row) error {
	// Once when every point has the same classes (a sweep of the cluster,
	// the NICs or the staging cap), else once per point.
	same, points := true, map[string]bool{}
	for i := range rows {
		if len(rows[i].TensorClasses) == 0 {
			continue
		}
		points[rows[i].Label()] = true
		if !slices.Equal(rows[i].TensorClasses, firstClasses(rows)) {
			same = false
		}
	}
	seen := map[string]bool{}
	for i := range rows {
		r := &rows[i]
		if len(r.TensorClasses) == 0 || seen[r.Label()] || same && len(seen) > 0 {
			continue
		}
		seen[r.Label()] = true
		var total int64
		for _, c := range r.TensorClasses {
			total += c.UniqueBytes
		}
		at := "at point " + r.Label()
		if same && len(points) > 1 {
			at = "at every point"
		}
		fmt.Fprintf(w, "\nworkload %s: %s in all, by class (weights: parameters as the frameworks store them)\n", at, units.Bytes(total).Human())
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "class\tweights\tbytes\tshare")
		for _, c := range r.TensorClasses {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f%%\n", c.Class, c.Weights, units.Bytes(c.UniqueBytes).Human(), 100*float64(c.UniqueBytes)/float64(max(total, 1)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
