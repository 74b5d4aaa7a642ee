package reports

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
)

// Report is one scenario's simulated results: every route at every sweep
// point, with the SOL bound and, where the scenario has one, the reference
// measurement. Callers fill it from the simulator; the functions of this
// package render it.
type Report struct {
	Scenario    string           // the scenario's name
	Description string           // the scenario's description
	Ideal       bool             // simulated at line rates with zero latencies (`--ideal`)
	Sweeps      []scenario.Sweep // the swept parameters, in scenario order
	Rows        []Row            // one per point and route, points in sweep order
	Notes       []string         // remarks printed at the end of the Markdown report
}

// Row is one route at one sweep point, as the evaluation fills it.
type Row = evaluate.Record

// New makes the report of a scenario's evaluated rows, in the order given:
// the sweeps keep only the values of the points evaluated.
func New(sc *scenario.Scenario, rows []Row, ideal bool) *Report {
	rep := &Report{Scenario: sc.Name, Description: sc.Description, Ideal: ideal, Rows: rows}
	for k, sw := range sc.Sweeps {
		kept := sw
		kept.Values = nil
		for _, v := range sw.Values {
			for _, row := range rows {
				if scenario.ValueEqual(row.Point.Params[k].Value, v) {
					kept.Values = append(kept.Values, v)
					break
				}
			}
		}
		rep.Sweeps = append(rep.Sweeps, kept)
	}
	return rep
}

// File is one rendered output: a file name and its bytes.
type File struct {
	Name string
	Data []byte
}

// Output file names, in the order Files returns them.
const (
	MarkdownFile   = "report.md"
	CSVFile        = "results.csv"
	LatencyPNGFile = "latency.png"
	LatencySVGFile = "latency.svg"
	SpeedupPNGFile = "speedup.png"
	SpeedupSVGFile = "speedup.svg"
)

// Files renders the whole report in memory: the Markdown report, the CSV,
// and both charts as PNG and SVG, in that order. It fails, having produced
// nothing, if any of them fails.
func Files(r *Report) ([]File, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	md, err := Markdown(r)
	if err != nil {
		return nil, err
	}
	csv, err := CSV(r)
	if err != nil {
		return nil, err
	}
	out := []File{{MarkdownFile, md}, {CSVFile, csv}}
	for _, c := range []struct {
		name   string
		chart  func(*Report, string) ([]byte, error)
		format string
	}{
		{LatencyPNGFile, LatencyChart, "png"},
		{LatencySVGFile, LatencyChart, "svg"},
		{SpeedupPNGFile, SpeedupChart, "png"},
		{SpeedupSVGFile, SpeedupChart, "svg"},
	} {
		b, err := c.chart(r, c.format)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		out = append(out, File{c.name, b})
	}
	return out, nil
}

// Validate checks that the report can be rendered: at least one row, every
// row at a point with a route, and every time finite and not negative.
func (r *Report) Validate() error {
	if len(r.Rows) == 0 {
		return errors.New("report: no rows; nothing was simulated")
	}
	for i, row := range r.Rows {
		at := fmt.Sprintf("report row %d", i)
		if row.Point == nil {
			return fmt.Errorf("%s: no point", at)
		}
		at = fmt.Sprintf("report row %d (point %s, route %q)", i, row.Point.Label(), row.Route)
		if row.Route == "" {
			return fmt.Errorf("%s: no route", at)
		}
		for _, v := range []struct {
			name string
			v    units.Time
		}{{"sol_s", row.SOL}, {"modeled_s", row.Modeled}, {"measured_s", row.Measured}} {
			if v.v < 0 {
				return fmt.Errorf("%s: %s = %v: want a time of at least 0", at, v.name, v.v.Seconds())
			}
		}
		if len(row.Point.Params) != len(r.Sweeps) {
			return fmt.Errorf("%s: %d coordinates but the report has %d sweeps", at, len(row.Point.Params), len(r.Sweeps))
		}
	}
	return nil
}

// routes lists the report's routes: the known ones in scenario.RouteNames
// order (the planner's),
// then any others in order of first appearance.
func (r *Report) routes() []string {
	seen := map[string]bool{}
	for _, row := range r.Rows {
		seen[row.Route] = true
	}
	var out []string
	for _, k := range scenario.RouteNames {
		if seen[k] {
			out = append(out, k)
			delete(seen, k)
		}
	}
	for _, row := range r.Rows {
		if seen[row.Route] {
			out = append(out, row.Route)
			delete(seen, row.Route)
		}
	}
	return out
}

// points lists the report's distinct points in row order.
func (r *Report) points() []*scenario.Point {
	var out []*scenario.Point
	seen := map[*scenario.Point]bool{}
	for _, row := range r.Rows {
		if !seen[row.Point] {
			seen[row.Point] = true
			out = append(out, row.Point)
		}
	}
	return out
}

// row returns the row of a route at a point, if any.
func (r *Report) row(p *scenario.Point, route string) (Row, bool) {
	for _, row := range r.Rows {
		if row.Point == p && row.Route == route {
			return row, true
		}
	}
	return Row{}, false
}

// Best is the route with the smallest modeled time over the report's
// points, by geometric mean over the points where every route has a
// positive time (ties go to the earlier route); "" with fewer than two
// routes.
func (r *Report) Best() string {
	routes := r.routes()
	if len(routes) < 2 {
		return ""
	}
	sum := make([]float64, len(routes))
	n := 0
	for _, p := range r.points() {
		logs := make([]float64, len(routes))
		ok := true
		for i, rt := range routes {
			row, has := r.row(p, rt)
			if !has || row.Modeled.Seconds() <= 0 {
				ok = false
				break
			}
			logs[i] = math.Log(row.Modeled.Seconds())
		}
		if !ok {
			continue
		}
		n++
		for i := range logs {
			sum[i] += logs[i]
		}
	}
	if n == 0 {
		return ""
	}
	best := 0
	for i := range routes {
		if sum[i] < sum[best] {
			best = i
		}
	}
	return routes[best]
}

// measuredSources lists the distinct sources of the report's measurements,
// in row order.
func (r *Report) measuredSources() []string {
	var out []string
	seen := map[string]bool{}
	for _, row := range r.Rows {
		if row.HasMeasured() && !seen[row.MeasuredSource] {
			seen[row.MeasuredSource] = true
			out = append(out, row.MeasuredSource)
		}
	}
	return out
}

// measuredLabel names the measurements briefly, for chart legends: the one
// source; or the text before the first comma that all sources share
// ("NCCL M2N paper"); or "reference".
func (r *Report) measuredLabel() string {
	srcs := r.measuredSources()
	switch len(srcs) {
	case 0:
		return ""
	case 1:
		if srcs[0] != "" {
			return srcs[0]
		}
		return "reference"
	}
	head, _, _ := strings.Cut(srcs[0], ",")
	for _, s := range srcs[1:] {
		h, _, _ := strings.Cut(s, ",")
		if h != head {
			return "reference"
		}
	}
	if head == "" {
		return "reference"
	}
	return head
}

// Axis is a swept parameter as charted: its values as positions on the
// horizontal axis, with the unit those positions are in.
type Axis struct {
	Name  string // the sweep's name, e.g. "rho"
	Title string // the axis's title in charts: the sweep's label, else Name
	// Unit is the unit of X: "B" (bytes), "B/s" (bytes per second), "s"
	// (seconds), or "" for plain numbers and categories.
	Unit string
	// Categorical: the values are not numbers; X is 1, 2, 3, ... in sweep
	// order.
	Categorical bool
	Values      []any     // the sweep's values, in sweep order
	X           []float64 // the position of each value, in Unit
	Labels      []string  // each value as the scenario writes it
	Log         bool      // charted on a log scale: positive values spanning more than a decade
}

// AxisOf reads a sweep's values as an axis. Numbers are numbers; strings
// that all parse as sizes ("1 MiB"), bandwidths ("400 Gb/s") or times
// ("10us") are numbers in bytes, bytes per second or seconds; anything else
// (lists, names) is a category.
func AxisOf(sw scenario.Sweep) Axis {
	a := Axis{Name: sw.Name, Title: cmp.Or(sw.Label, sw.Name), Values: sw.Values}
	for _, v := range sw.Values {
		a.Labels = append(a.Labels, scenario.FormatValue(v))
	}
	if xs, ok := numbers(sw.Values); ok {
		a.X = xs
	} else if xs, unit, ok := quantities(sw.Values); ok {
		a.X, a.Unit = xs, unit
	} else {
		a.Categorical = true
		for i := range sw.Values {
			a.X = append(a.X, float64(i+1))
		}
	}
	if !a.Categorical {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range a.X {
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
		a.Log = lo > 0 && (hi/lo > 10 || doubling(a.X))
	}
	return a
}

// doubling reports whether positive values, sorted, nearly double (at least
// 1.9x) from each to the next over three or more of them (GPU counts that
// double, a chunk size swept by powers of two): they read best on a log
// axis.
func doubling(xs []float64) bool {
	v := append([]float64(nil), xs...)
	sort.Float64s(v)
	v = slices.Compact(v)
	if len(v) < 3 || v[0] <= 0 {
		return false
	}
	for i := 1; i < len(v); i++ {
		if v[i] < 1.9*v[i-1] {
			return false
		}
	}
	return true
}

// distinct reports how many distinct positions the axis has.
func (a Axis) distinct() int {
	xs := append([]float64(nil), a.X...)
	sort.Float64s(xs)
	n := 0
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			n++
		}
	}
	return n
}

func numbers(vs []any) ([]float64, bool) {
	var out []float64
	for _, v := range vs {
		switch x := v.(type) {
		case int64:
			out = append(out, float64(x))
		case int:
			out = append(out, float64(x))
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, false
			}
			out = append(out, x)
		default:
			return nil, false
		}
	}
	return out, len(out) > 0
}

func quantities(vs []any) ([]float64, string, bool) {
	strs := make([]string, len(vs))
	for i, v := range vs {
		s, ok := v.(string)
		if !ok {
			return nil, "", false
		}
		strs[i] = s
	}
	parsers := []struct {
		unit  string
		parse func(string) (float64, error)
	}{
		{"B", func(s string) (float64, error) { b, err := units.ParseBytes(s); return float64(b), err }},
		{"B/s", func(s string) (float64, error) { w, err := units.ParseBandwidth(s); return float64(w), err }},
		{"s", func(s string) (float64, error) { t, err := units.ParseTime(s); return t.Seconds(), err }},
	}
	for _, p := range parsers {
		var xs []float64
		for _, s := range strs {
			x, err := p.parse(s)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				xs = nil
				break
			}
			xs = append(xs, x)
		}
		if xs != nil {
			return xs, p.unit, true
		}
	}
	return nil, "", false
}

// Layout is how the charts read the report: the axis they chart against,
// and the groups the other sweeps form.
type Layout struct {
	Axis  Axis
	Sweep int // index of the charted sweep in Report.Sweeps; -1 without sweeps
	// Groups are the combinations of the other sweeps' values, in point
	// order; one group (named "") when there are no other sweeps.
	Groups []string
}

// ChartLayout picks the sweep to chart against: the first with numeric
// values and more than one distinct value, else the first with more than
// one value, else the first. The other sweeps form groups, one series per
// route and combination of their values.
func (r *Report) ChartLayout() Layout {
	l := Layout{Sweep: -1}
	axes := make([]Axis, len(r.Sweeps))
	for i, sw := range r.Sweeps {
		axes[i] = AxisOf(sw)
	}
	for i, a := range axes {
		if !a.Categorical && a.distinct() > 1 {
			l.Sweep = i
			break
		}
	}
	if l.Sweep < 0 {
		for i, a := range axes {
			if len(a.Values) > 1 {
				l.Sweep = i
				break
			}
		}
	}
	if l.Sweep < 0 && len(axes) > 0 {
		l.Sweep = 0
	}
	if l.Sweep >= 0 {
		l.Axis = axes[l.Sweep]
	} else {
		l.Axis = Axis{Name: "no sweep: one point", Categorical: true, Values: []any{"-"}, X: []float64{1}, Labels: []string{r.Scenario}}
	}
	seen := map[string]bool{}
	for _, p := range r.points() {
		g := l.group(p)
		if !seen[g] {
			seen[g] = true
			l.Groups = append(l.Groups, g)
		}
	}
	return l
}

// group names a point's group: its coordinates other than the charted
// sweep's, as "nic=400 Gb/s, chunk=4 MiB".
func (l Layout) group(p *scenario.Point) string {
	var parts []string
	for i, q := range p.Params {
		if i != l.Sweep {
			parts = append(parts, q.Name+"="+scenario.FormatValue(q.Value))
		}
	}
	return strings.Join(parts, ", ")
}

// x is a point's position on the chart's axis.
func (l Layout) x(p *scenario.Point) float64 {
	if l.Sweep < 0 || l.Sweep >= len(p.Params) {
		return 1
	}
	v := p.Params[l.Sweep].Value
	for i, w := range l.Axis.Values {
		if scenario.ValueEqual(v, w) {
			return l.Axis.X[i]
		}
	}
	return math.NaN()
}

// groupIndex is the index of a point's group in l.Groups.
func (l Layout) groupIndex(p *scenario.Point) int {
	g := l.group(p)
	for i, h := range l.Groups {
		if h == g {
			return i
		}
	}
	return -1
}
