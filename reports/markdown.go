package reports

import (
	"bytes"
	"fmt"
	"github.com/m2n-project/m2n/evaluate"
	"strings"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
)

// Markers around the results table in the Markdown report, so that other
// documents (the README) can carry the same table and be checked against it.
const (
	ResultsBegin = "<!-- m2n:results:begin -->"
	ResultsEnd   = "<!-- m2n:results:end -->"
)

// ByteConvention explains why m2n's SOL differs from figures quoted with
// decimal sizes.
const ByteConvention = `m2n counts exact bytes (1 MiB = 2^20 bytes) and decimal link rates
(1 GB/s = 10^9 bytes/s). A source that quotes a binary size in decimal units
quotes smaller times: the NCCL M2N paper takes its [256, 2048, 7168] bf16
tensor (7168 MiB = 7,516,192,768 bytes) as 7168 MB and gives its
hierarchical SOL as 8.96 ms; with exact bytes it is 9.40 ms (x 1.048576).
Reference measurements are printed as their source quotes them.`

// Markdown renders the report as a Markdown document: the results per point
// and route (SOL, modeled, reference measurement, error), the speedup of
// the best route, what the charts show, the scenario, the topology
// constants used, the byte convention, and notes.
func Markdown(r *Report) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	routes := r.routes()
	pts := r.points()
	fmt.Fprintf(&b, "# %s\n\n", r.Scenario)
	if r.Description != "" {
		fmt.Fprintf(&b, "%s\n\n", r.Description)
	}
	mode := "achievable rates and op start latencies"
	if r.Ideal {
		mode = "line rates and zero latencies (`--ideal`)"
	}
	fmt.Fprintf(&b, "m2n simulated %d route(s) at %d sweep point(s) with %s; the SOL bound uses line rates. "+
		"Times are rounded to 4 significant digits; %s has them exact.\n\n", len(routes), len(pts), mode, CSVFile)

	b.WriteString("## Results\n\n")
	b.WriteString(ResultsTable(r))
	b.WriteString("\n")

	if best := r.Best(); best != "" {
		fmt.Fprintf(&b, "## Speedup of %s\n\n", best)
		b.WriteString(speedupTable(r, best))
		b.WriteString("\n")
	}

	b.WriteString("## Charts\n\n")
	b.WriteString(chartsSection(r))
	b.WriteString("\n")

	b.WriteString("## Scenario\n\n")
	b.WriteString(scenarioSection(r))
	b.WriteString("\n")

	b.WriteString("## Topology\n\n")
	b.WriteString(topologyTable(r))
	b.WriteString("\n")

	b.WriteString("## Byte convention\n\n")
	b.WriteString(ByteConvention)
	b.WriteString(" See docs/sim.md.\n")

	var notes []string
	notes = append(notes, r.Notes...)
	for _, row := range r.Rows {
		if row.HasMeasured() && row.MeasuredNote != "" {
			notes = append(notes, fmt.Sprintf("Measured %s at %s: %s.", row.Route, row.Point.Label(), strings.TrimSuffix(row.MeasuredNote, ".")))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", mdEscape(n))
		}
	}
	return b.Bytes(), nil
}

// ResultsTable renders the results table, with its measurement sources
// below it, between ResultsBegin and ResultsEnd: per point and route, the
// SOL bound, the modeled time, modeled / SOL, the reference measurement, the
// error (modeled / measured - 1) and the bottleneck resource.
func ResultsTable(r *Report) string {
	var b strings.Builder
	srcs := r.measuredSources()
	hasMeasured := len(srcs) > 0
	showBytes := false
	for _, row := range r.Rows {
		showBytes = showBytes || row.UniqueBytes != r.Rows[0].UniqueBytes
	}
	t := &results{sweeps: r.Sweeps, ideal: r.Ideal, sources: srcs}
	names := []string{"route"}
	if showBytes {
		names = append(names, "bytes")
	}
	names = append(names, "sol", "modeled", "ratio")
	if hasFramework(r.Rows) {
		names = append(names, "framework", "refit")
	}
	if hasMeasured {
		names = append(names, "measured", "error")
	}
	cols := t.layout(asMarkdown, append(names, "bottleneck", "memory", "fits")...)
	align := make([]string, len(cols))
	for i, c := range cols {
		align[i] = c.align
	}
	b.WriteString(ResultsBegin + "\n")
	b.WriteString("| " + strings.Join(heads(cols, asMarkdown), " | ") + " |\n")
	b.WriteString("|" + strings.Join(align, "|") + "|\n")
	for i := range r.Rows {
		b.WriteString("| " + strings.Join(t.cells(cols, &r.Rows[i], asMarkdown), " | ") + " |\n")
	}
	if hasMeasured {
		b.WriteString("\nmodeled / SOL: how far the simulation is from the bound; error = modeled / measured - 1. Measured: ")
		if len(srcs) == 1 {
			b.WriteString(mdEscape(srcs[0]) + ".\n")
		} else {
			for i, s := range srcs {
				if i > 0 {
					b.WriteString("; ")
				}
				fmt.Fprintf(&b, "[%d] %s", i+1, mdEscape(s))
			}
			b.WriteString(".\n")
		}
	} else {
		b.WriteString("\nmodeled / SOL: how far the simulation is from the bound. The scenario has no reference measurements.\n")
	}
	if len(r.Rows) > 0 {
		fmt.Fprintf(&b, "\nModeled: %s; not modeled: %s. memory / GPU: the busiest GPU's weights in the refit (source shards, destination weights with FP8 scales) plus staging, against its memory (fits); not optimizer state, activations or KV cache.\n", mdEscape(r.Rows[0].Models), mdEscape(evaluate.Excludes))
	}
	b.WriteString(ResultsEnd + "\n")
	return b.String()
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// speedupTable renders, per point, each baseline route's time over the
// best route's, modeled and (in parentheses) measured.
func speedupTable(r *Report, best string) string {
	var b strings.Builder
	var baselines []string
	for _, rt := range r.routes() {
		if rt != best {
			baselines = append(baselines, rt)
		}
	}
	fmt.Fprintf(&b, "Each baseline route's time divided by %s's: above 1, %s is faster. Modeled; in parentheses, measured, where both routes have a measurement.\n\n", best, best)
	var head, align []string
	for _, sw := range r.Sweeps {
		head = append(head, mdEscape(sw.Name))
		align = append(align, "---")
	}
	for _, bl := range baselines {
		head = append(head, "over "+mdEscape(bl))
		align = append(align, "---:")
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Join(align, "|") + "|\n")
	for _, p := range r.points() {
		var cells []string
		for _, q := range p.Params {
			cells = append(cells, mdEscape(scenario.FormatValue(q.Value)))
		}
		br, hasBest := r.row(p, best)
		for _, bl := range baselines {
			row, ok := r.row(p, bl)
			if !ok || !hasBest || br.Modeled.Seconds() <= 0 {
				cells = append(cells, "-")
				continue
			}
			c := fmt.Sprintf("%.2fx", row.Modeled.Seconds()/br.Modeled.Seconds())
			if row.HasMeasured() && br.HasMeasured() {
				c += fmt.Sprintf(" (%.2fx)", row.Measured.Seconds()/br.Measured.Seconds())
			}
			cells = append(cells, c)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// chartsSection says what each chart shows and how the sweeps map onto it.
func chartsSection(r *Report) string {
	var b strings.Builder
	l := r.ChartLayout()
	along := "the scenario's single point"
	if l.Sweep >= 0 {
		along = l.Axis.Name
	}
	scale := ""
	if l.Axis.Log {
		scale = " (log scale)"
	}
	fmt.Fprintf(&b, "- `%s`, `%s`: latency against %s%s, one colour per route (%s): the SOL bound as lines, the modeled time as filled marks",
		LatencyPNGFile, LatencySVGFile, along, scale, routeColours(r.routes()))
	if lbl := r.measuredLabel(); lbl != "" {
		fmt.Fprintf(&b, ", the reference measurements (%s) as crosses", lbl)
	}
	if chooseScale(latencyValues(collect(r, l, r.routes())), true).log {
		b.WriteString(". The time axis is logarithmic: the times span more than a decade.\n")
	} else {
		b.WriteString(". The time axis is linear, from 0.\n")
	}
	if best := r.Best(); best != "" {
		fmt.Fprintf(&b, "- `%s`, `%s`: the speedup of %s (the fastest route overall, by geometric mean of its modeled times) over each other route: that route's time divided by %s's, modeled as lines with marks", SpeedupPNGFile, SpeedupSVGFile, best, best)
		if r.measuredLabel() != "" {
			b.WriteString(", and measured as crosses where both routes have a measurement")
		}
		b.WriteString("; 1 means equal.\n")
	} else {
		fmt.Fprintf(&b, "- `%s`, `%s`: empty: the speedup needs at least two routes.\n", SpeedupPNGFile, SpeedupSVGFile)
	}
	var others []string
	for i, sw := range r.Sweeps {
		if i != l.Sweep {
			others = append(others, sw.Name)
		}
	}
	if len(others) > 0 {
		fmt.Fprintf(&b, "\nThe scenario sweeps %d parameters; the charts run along %s, with one series per route and combination of %s (told apart by line dash and mark shape: %d groups).\n",
			len(r.Sweeps), l.Axis.Name, strings.Join(others, " and "), len(l.Groups))
		if len(l.Groups) > len(groupStyles) {
			fmt.Fprintf(&b, "There are more groups than distinct styles (%d); styles repeat, so read the values from %s.\n", len(groupStyles), CSVFile)
		}
	}
	return b.String()
}

func routeColours(routes []string) string {
	parts := make([]string, len(routes))
	for i, rt := range routes {
		parts[i] = rt + " " + routeColor(rt).name
	}
	return strings.Join(parts, ", ")
}

// maxTensorRows bounds the tensors listed; a whole model has thousands.
const maxTensorRows = 12

// scenarioSection lists the sweeps and the tensors.
func scenarioSection(r *Report) string {
	var b strings.Builder
	if len(r.Sweeps) > 0 {
		b.WriteString("Sweeps (points ordered with the last sweep varying fastest):\n\n")
		for _, sw := range r.Sweeps {
			vals := make([]string, len(sw.Values))
			for i, v := range sw.Values {
				vals[i] = scenario.FormatValue(v)
			}
			fmt.Fprintf(&b, "- %s = %s (sets %s)\n", mdEscape(sw.Name), mdEscape(strings.Join(vals, ", ")), mdEscape(strings.Join(sw.Keys, ", ")))
		}
		b.WriteString("\n")
	}
	p := r.Rows[0].Point
	if len(r.Sweeps) > 0 {
		fmt.Fprintf(&b, "Tensors at %s:\n\n", mdEscape(p.Label()))
	} else {
		b.WriteString("Tensors:\n\n")
	}
	b.WriteString("| tensor | bytes | source layout | destination layout |\n|---|---:|---|---|\n")
	var total int64
	for i, t := range p.Tensors {
		total += t.Src.Bytes()
		if i < maxTensorRows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdEscape(t.Name), units.Bytes(t.Src.Bytes()).Human(), mdEscape(t.Src.String()), mdEscape(t.Dst.String()))
		}
	}
	if n := len(p.Tensors); n > maxTensorRows {
		fmt.Fprintf(&b, "| ... %d more | | | |\n| all %d tensors | %s | | |\n", n-maxTensorRows, n, units.Bytes(total).Human())
	}
	return b.String()
}

// topologyConstants are the rows of the topology table.
var topologyConstants = []struct {
	name  string
	value func(t *topo.Topology) string
	omit  string // leave the row out when this is its only value
}{
	{"preset", func(t *topo.Topology) string {
		if t.Preset == "" {
			return "custom"
		}
		return t.Preset
	}, ""},
	{"NVLink domains x GPUs per domain", func(t *topo.Topology) string { return fmt.Sprintf("%d x %d", t.Domains, t.GPUsPerDomain) }, ""},
	{"NVLink per GPU per direction (achievable / line)", func(t *topo.Topology) string { return fmt.Sprintf("%v / %v", t.NVLink, t.NVLinkLine) }, ""},
	{"NICs per GPU", func(t *topo.Topology) string { return fmt.Sprint(t.NICsPerGPU) }, ""},
	{"NIC per direction (achievable / line)", func(t *topo.Topology) string { return fmt.Sprintf("%v / %v", t.NIC, t.NICLine) }, ""},
	{"memory per GPU, read + write", func(t *topo.Topology) string { return t.Memory.String() }, ""},
	{"fabric", func(t *topo.Topology) string {
		if t.Oversubscription > 1 {
			return fmt.Sprintf("%g:1 oversubscribed", t.Oversubscription)
		}
		return "non-blocking"
	}, ""},
	{"op start latency: NVLink / network / local", func(t *topo.Topology) string {
		return fmt.Sprintf("%v / %v / %v", t.LatencyNVLink, t.LatencyNet, t.LatencyLocal)
	}, ""},
	{"ranks placed explicitly (`[topology.placement]`)", func(t *topo.Topology) string { return fmt.Sprint(len(t.RankGPU)) }, "0"},
}

// topologyTable lists the constants used. A constant that differs between
// points lists each value with where it applies: by the values of the first
// sweep that determines it, else by point.
func topologyTable(r *Report) string {
	var b strings.Builder
	b.WriteString("| constant | value |\n|---|---|\n")
	pts := r.points()
	for _, c := range topologyConstants {
		vals := make([]string, len(pts))
		for i, p := range pts {
			vals[i] = c.value(p.Topology)
		}
		distinct := uniq(vals)
		if len(distinct) == 1 && c.omit != "" && distinct[0] == c.omit {
			continue
		}
		cell := distinct[0]
		if len(distinct) > 1 {
			cell = whereEach(r, pts, vals, distinct)
		}
		fmt.Fprintf(&b, "| %s | %s |\n", c.name, mdEscape(cell))
	}
	b.WriteString("\nThe simulation uses the achievable rates (the line rates with `--ideal`); the SOL bound uses the line rates. docs/topology.md gives the source of every preset constant.\n")
	return b.String()
}

// uniq lists the distinct strings in order of first appearance.
func uniq(xs []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// whereEach writes "V1 at nic=400 Gb/s; V2 at nic=800 Gb/s": each distinct
// value with the coordinates of the points that have it, using the first
// sweep whose value alone determines the constant, else whole points
// ("V1 at [rho=2, nic=400 Gb/s], [rho=4, nic=400 Gb/s]; ...").
func whereEach(r *Report, pts []*scenario.Point, vals, distinct []string) string {
	label := func(p *scenario.Point) string { return "[" + p.Label() + "]" }
	for k, sw := range r.Sweeps {
		by := map[string]string{}
		ok := true
		for i, p := range pts {
			key := scenario.FormatValue(p.Params[k].Value)
			if v, seen := by[key]; seen && v != vals[i] {
				ok = false
				break
			}
			by[key] = vals[i]
		}
		if ok {
			name := sw.Name
			label = func(p *scenario.Point) string {
				for _, q := range p.Params {
					if q.Name == name {
						return name + "=" + scenario.FormatValue(q.Value)
					}
				}
				return p.Label()
			}
			break
		}
	}
	parts := make([]string, len(distinct))
	for j, v := range distinct {
		var where []string
		for i, p := range pts {
			if vals[i] == v {
				where = append(where, label(p))
			}
		}
		parts[j] = v + " at " + strings.Join(uniq(where), ", ")
	}
	return strings.Join(parts, "; ")
}
