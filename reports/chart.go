package reports

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Chart size, and the resolution of the PNG: 1350 x 750 pixels.
const (
	ChartWidth  = 9 * vg.Inch
	ChartHeight = 5 * vg.Inch
	PNGDPI      = 150
)

// ChartFormats are the formats the charts render to.
var ChartFormats = []string{"png", "svg"}

func checkFormat(format string) error {
	for _, f := range ChartFormats {
		if f == format {
			return nil
		}
	}
	return fmt.Errorf("chart format %q: want one of %s", format, strings.Join(ChartFormats, ", "))
}

// LatencyChart draws latency against the charted sweep (see
// [Report.ChartLayout]): one colour per route, the SOL bound as lines, the
// modeled time as filled marks, reference measurements as crosses. The time
// axis is logarithmic when the times span more than a decade. format is
// "png" or "svg" (with its fonts embedded).
func LatencyChart(r *Report, format string) ([]byte, error) {
	if err := checkFormat(format); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	c, err := latencyChart(r)
	if err != nil {
		return nil, err
	}
	return c.render(format)
}

// SpeedupChart draws the speedup of the best route ([Report.Best]) over
// each other route against the charted sweep: the other route's time over
// the best's, modeled as lines with marks, measured as crosses where both
// routes have a measurement, and a dotted line at 1. format is "png" or
// "svg".
func SpeedupChart(r *Report, format string) ([]byte, error) {
	if err := checkFormat(format); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	c, err := speedupChart(r)
	if err != nil {
		return nil, err
	}
	return c.render(format)
}

// chart is a plot with its legend, drawn to the right of the plot so that
// it never covers the data.
type chart struct {
	p        *plot.Plot
	title    string // first line, above the plot and the legend
	subtitle string // second line, smaller and grey; may be ""
	xLabel   string // the axis labels
	yLabel   string
	legend   plot.Legend
}

func sans(size vg.Length) font.Font {
	return font.Font{Typeface: "Liberation", Variant: "Sans", Size: size}
}

func newChart(title, subtitle string) *chart {
	p := plot.New()
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = sans(12)
		a.Tick.Label.Font = sans(10.5)
		a.Padding = vg.Points(4)
	}
	g := plotter.NewGrid()
	g.Horizontal.Color, g.Vertical.Color = gridColor, gridColor
	g.Horizontal.Width, g.Vertical.Width = vg.Points(0.6), vg.Points(0.6)
	p.Add(g)
	leg := plot.NewLegend()
	leg.TextStyle.Font = sans(11)
	leg.Top, leg.Left = true, true
	leg.ThumbnailWidth = vg.Points(26)
	leg.Padding = vg.Points(3)
	return &chart{p: p, title: title, subtitle: subtitle, legend: leg}
}

// render draws the chart in a format. A panic inside the plotting library
// (which it uses for some bad input) becomes an error.
func (c *chart) render(format string) (out []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, fmt.Errorf("chart %q: %v", c.title, v)
		}
	}()
	var buf bytes.Buffer
	switch format {
	case "png":
		cv := vgimg.NewWith(vgimg.UseWH(ChartWidth, ChartHeight), vgimg.UseDPI(PNGDPI))
		c.draw(draw.New(cv))
		if _, err := (vgimg.PngCanvas{Canvas: cv}).WriteTo(&buf); err != nil {
			return nil, fmt.Errorf("png: %w", err)
		}
	case "svg":
		cv := vgsvg.NewWith(vgsvg.UseWH(ChartWidth, ChartHeight), vgsvg.EmbedFonts(true))
		c.draw(draw.New(cv))
		if _, err := cv.WriteTo(&buf); err != nil {
			return nil, fmt.Errorf("svg: %w", err)
		}
	default:
		return nil, checkFormat(format)
	}
	return buf.Bytes(), nil
}

// draw lays the chart out: the title lines across the top, centred on the
// whole width; below them the plot, and the legend to its right, level with
// the top of the data area.
func (c *chart) draw(dc draw.Canvas) {
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	pad := vg.Points(12)
	top := pad
	for _, t := range []struct {
		text string
		size vg.Length
		col  color.Color
	}{{c.title, 14, color.Black}, {c.subtitle, 11, subtitleColor}} {
		if t.text == "" {
			continue
		}
		sty := text.Style{Color: t.col, Font: sans(t.size), XAlign: draw.XCenter, YAlign: draw.YTop, Handler: c.p.TextHandler}
		dc.FillText(sty, vg.Point{X: dc.Center().X, Y: dc.Max.Y - top}, t.text)
		top += sty.Rectangle(t.text).Size().Y + vg.Points(3)
	}
	top += vg.Points(8)
	// The legend's room has slack for a wider fallback font, where an SVG
	// viewer ignores the embedded one.
	legW := c.legend.Rectangle(dc).Size().X * 1.15
	pc := draw.Crop(dc, pad, -(legW + 2*pad), pad, -top)
	// The axis labels are drawn here rather than by the plot, which
	// misplaces the room it leaves for them on a log axis.
	sty := text.Style{Color: color.Black, Font: sans(12), XAlign: draw.XCenter, YAlign: draw.YBottom, Handler: c.p.TextHandler}
	h, descent := sty.Height("Ag"), sty.FontExtents().Descent
	if c.xLabel != "" {
		dc.FillText(sty, vg.Point{X: pc.Center().X + h/2, Y: pc.Min.Y + descent}, c.xLabel)
		pc.Min.Y += h + vg.Points(4)
	}
	if c.yLabel != "" {
		sty := sty
		sty.Rotation = math.Pi / 2
		dc.FillText(sty, vg.Point{X: pc.Min.X + h - descent, Y: pc.Center().Y}, c.yLabel)
		pc.Min.X += h + vg.Points(4)
	}
	c.p.Draw(pc)
	c.legend.Draw(draw.Crop(dc, dc.Size().X-legW-pad, 0, pad, -top))
}

// series is the data of one route and group, in chart coordinates, sorted
// by x.
type series struct {
	route    string
	group    int
	sol      plotter.XYs
	modeled  plotter.XYs
	measured plotter.XYs
}

// collect gathers each route's series per group. value picks a row's
// numbers (ok false leaves the row out).
func collect(r *Report, l Layout, routes []string) []*series {
	var out []*series
	for _, rt := range routes {
		for gi := range l.Groups {
			s := &series{route: rt, group: gi}
			for _, row := range r.Rows {
				if row.Route != rt || l.groupIndex(row.Point) != gi {
					continue
				}
				x := l.x(row.Point)
				if math.IsNaN(x) {
					continue
				}
				s.sol = append(s.sol, plotter.XY{X: x, Y: row.SOL.Seconds()})
				s.modeled = append(s.modeled, plotter.XY{X: x, Y: row.Modeled.Seconds()})
				if row.HasMeasured() {
					s.measured = append(s.measured, plotter.XY{X: x, Y: row.Measured.Seconds()})
				}
			}
			if len(s.modeled) == 0 {
				continue
			}
			for _, xys := range []plotter.XYs{s.sol, s.modeled, s.measured} {
				sort.SliceStable(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
			}
			out = append(out, s)
		}
	}
	return out
}

// latencyValues lists every time the latency chart plots, in seconds.
func latencyValues(ss []*series) []float64 {
	var all []float64
	for _, s := range ss {
		for _, xys := range []plotter.XYs{s.sol, s.modeled, s.measured} {
			for _, q := range xys {
				all = append(all, q.Y)
			}
		}
	}
	return all
}

// valueScale is how the vertical axis shows its values: linear in a unit,
// or logarithmic.
type valueScale struct {
	log   bool
	div   float64 // data are divided by this (linear only)
	unit  string  // the unit of the linear axis, e.g. "ms"
	min   float64 // axis range, in plotted units
	max   float64
	label func(float64) string // tick label of a plotted value (log only)
	// linearLabel writes a tick label of a linear axis.
	linearLabel func(v float64, decimals int) string
}

// chooseScale picks the vertical axis for positive values vs: log when they
// span more than a decade, else linear from 0.
func chooseScale(vs []float64, timeAxis bool, extra ...float64) valueScale {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range append(append([]float64(nil), vs...), extra...) {
		if v > 0 && !math.IsInf(v, 0) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if math.IsInf(lo, 1) { // nothing positive
		lo, hi = 1, 1
	}
	if hi/lo > 10 {
		pad := math.Pow(hi/lo, 0.05)
		s := valueScale{log: true, min: lo / pad, max: hi * pad, div: 1}
		s.label = func(v float64) string { return trimFloat(v) + "x" }
		if timeAxis {
			s.label = formatTick
		}
		return s
	}
	s := valueScale{div: 1, linearLabel: plainNumber}
	if timeAxis {
		s.div, s.unit = timeUnit(hi)
	} else {
		s.linearLabel = func(v float64, d int) string { return plainNumber(v, d) + "x" }
	}
	s.min, s.max = 0, hi/s.div*1.08
	return s
}

// apply sets the axis range and ticks.
func (s valueScale) apply(a *plot.Axis) {
	a.Min, a.Max = s.min, s.max
	if s.log {
		a.Scale = plot.LogScale{}
		a.Tick.Marker = logTicks{label: s.label}
		return
	}
	a.Tick.Marker = linearTicks{format: s.linearLabel}
}

// plotted returns xys in the axis's units, leaving out values that a log
// axis cannot show (<= 0); skipped counts them.
func (s valueScale) plotted(xys plotter.XYs, skipped *int) plotter.XYs {
	var out plotter.XYs
	for _, p := range xys {
		if s.log && !(p.Y > 0) {
			*skipped++
			continue
		}
		out = append(out, plotter.XY{X: p.X, Y: p.Y / s.div})
	}
	return out
}

// logTicks marks every 1-9 x 10^k step, labelling the powers of ten (and
// the 2s and 5s when the axis spans less than 2.5 decades). It never
// panics: a range that is not positive gets no ticks.
type logTicks struct{ label func(float64) string }

func (t logTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max > min) || math.IsInf(max, 0) {
		return nil
	}
	span := math.Log10(max / min)
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		base := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * base
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			tk := plot.Tick{Value: v}
			if m == 1 || (span <= 2.5 && (m == 2 || m == 5)) {
				tk.Label = t.label(v)
			}
			ticks = append(ticks, tk)
		}
	}
	return ticks
}

// linearTicks marks round steps (1, 2, 2.5 or 5 x 10^k) giving 4 to 8
// labelled ticks, with one unlabelled tick between each two. format writes
// a value with a number of decimals.
type linearTicks struct {
	format func(v float64, decimals int) string
}

func (t linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return nil
	}
	mag := math.Pow(10, math.Floor(math.Log10((hi-lo)/6)))
	step, decimals := mag, 0
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		step = m * mag
		if (hi-lo)/step <= 8 {
			break
		}
	}
	exp := int(math.Floor(math.Log10(step) + 1e-9))
	decimals = max(0, -exp)
	if r := step / math.Pow(10, float64(exp)); math.Abs(r-2.5) < 1e-9 && exp <= 0 {
		decimals++ // 2.5, 0.25: one more digit
	}
	var ticks []plot.Tick
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		v := k * step
		if v == 0 {
			v = 0 // not -0
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: t.format(v, decimals)})
		if half := v + step/2; half <= hi {
			ticks = append(ticks, plot.Tick{Value: half})
		}
	}
	return ticks
}

func plainNumber(v float64, decimals int) string { return strconv.FormatFloat(v, 'f', decimals, 64) }

// binaryLogTicks marks powers of two, labelling enough of them to read the
// axis (at most about 8).
type binaryLogTicks struct{ label func(float64) string }

func (t binaryLogTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max > min) || math.IsInf(max, 0) {
		return nil
	}
	lo, hi := int(math.Ceil(math.Log2(min))), int(math.Floor(math.Log2(max)))
	step := 1
	for (hi-lo)/step > 8 {
		step *= 2
	}
	var ticks []plot.Tick
	for k := lo; k <= hi; k++ {
		tk := plot.Tick{Value: math.Ldexp(1, k)}
		if k%step == 0 {
			tk.Label = t.label(tk.Value)
		}
		ticks = append(ticks, tk)
	}
	return ticks
}

// formatTicks relabels another ticker's ticks.
type formatTicks struct {
	plot.Ticker
	label func(float64) string
}

func (t formatTicks) Ticks(min, max float64) []plot.Tick {
	ticks := t.Ticker.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = t.label(ticks[i].Value)
		}
	}
	return ticks
}

// setX sets the horizontal axis for the layout: ticks at the swept values,
// labelled as the scenario writes them, when there are few enough to read;
// else ticks in the values' unit.
func setX(c *chart, l Layout) {
	p := c.p
	a := l.Axis
	xs := append([]float64(nil), a.X...)
	sort.Float64s(xs)
	lo, hi := xs[0], xs[len(xs)-1]
	// The title; the ticks carry the unit (the scenario's own text, or
	// the unit's), and a log axis says so.
	label := cmp.Or(a.Title, a.Name)
	if a.Log {
		label += ", log scale"
	}
	c.xLabel = label
	if a.Categorical || lo == hi {
		p.X.Min, p.X.Max = lo-0.5, hi+0.5
		p.X.Tick.Marker = valueTicks(a)
		return
	}
	norm := func(x float64) float64 { return (x - lo) / (hi - lo) }
	if a.Log {
		p.X.Scale = plot.LogScale{}
		pad := math.Pow(hi/lo, 0.05)
		p.X.Min, p.X.Max = lo/pad, hi*pad
		norm = func(x float64) float64 { return math.Log(x/lo) / math.Log(hi/lo) }
	} else {
		pad := (hi - lo) * 0.05
		p.X.Min, p.X.Max = lo-pad, hi+pad
	}
	readable := len(xs) <= 12
	for i := 1; i < len(xs) && readable; i++ {
		if xs[i] != xs[i-1] && norm(xs[i])-norm(xs[i-1]) < 0.06 {
			readable = false
		}
	}
	if readable {
		p.X.Tick.Marker = valueTicks(a)
		return
	}
	unitLabel := map[string]func(float64) string{"B": formatBytesTick, "B/s": formatRateTick, "s": formatTick, "": trimFloat}[a.Unit]
	switch {
	case a.Log && a.Unit == "B":
		p.X.Tick.Marker = binaryLogTicks{label: unitLabel}
	case a.Log:
		p.X.Tick.Marker = logTicks{label: unitLabel}
	case a.Unit == "":
		p.X.Tick.Marker = linearTicks{format: plainNumber}
	default:
		p.X.Tick.Marker = formatTicks{Ticker: linearTicks{format: plainNumber}, label: unitLabel}
	}
}

// valueTicks marks each swept value, labelled as written.
func valueTicks(a Axis) plot.ConstantTicks {
	var ticks plot.ConstantTicks
	seen := map[float64]bool{}
	for i, x := range a.X {
		if seen[x] {
			continue
		}
		seen[x] = true
		ticks = append(ticks, plot.Tick{Value: x, Label: a.Labels[i]})
	}
	return ticks
}

func latencyChart(r *Report) (*chart, error) {
	l := r.ChartLayout()
	routes := r.routes()
	ss := collect(r, l, routes)
	title := r.Scenario + ": reshard latency by route"
	if l.Sweep >= 0 {
		title = r.Scenario + ": reshard latency vs " + l.Axis.Name
	}
	c := newChart(title, shorten(r.Description, 130))
	p := c.p
	setX(c, l)

	vs := chooseScale(latencyValues(ss), true)
	vs.apply(&p.Y)
	if vs.log {
		c.yLabel = "latency (log scale)"
	} else {
		c.yLabel = "latency (" + vs.unit + ")"
	}

	skipped, err := addLatency(p, ss, vs, l.Axis.Categorical)
	if err != nil {
		return nil, err
	}
	vs.apply(&p.Y) // Add widened the range to the data; keep ours.

	// Legend: routes by colour, then what lines, marks and crosses mean,
	// then the groups.
	for _, rt := range routes {
		col := routeColor(rt).RGBA
		c.legend.Add(rt, thumb{
			line:  &draw.LineStyle{Color: col, Width: lineWidth},
			glyph: &draw.GlyphStyle{Color: col, Radius: markRadius, Shape: draw.CircleGlyph{}},
		})
	}
	c.legend.Add("")
	solKey, markKey := "SOL bound", "modeled (simulated)"
	if r.Ideal {
		markKey = "modeled (ideal rates)"
	}
	if len(l.Groups) > 1 {
		solKey, markKey = solKey+": lines", markKey+": marks"
	}
	c.legend.Add(solKey, thumb{line: &draw.LineStyle{Color: keyColor, Width: lineWidth}})
	c.legend.Add(markKey, thumb{glyph: &draw.GlyphStyle{Color: keyColor, Radius: markRadius, Shape: draw.CircleGlyph{}}})
	if lbl := r.measuredLabel(); lbl != "" {
		c.legend.Add("measured: "+shorten(lbl, 28), thumb{glyph: &draw.GlyphStyle{Color: keyColor, Radius: measuredRadius, Shape: crossGlyph{width: measuredWidth}}})
	}
	addGroupKeys(c, l)
	if skipped > 0 {
		c.legend.Add("")
		c.legend.Add(fmt.Sprintf("%d value(s) <= 0 not shown", skipped))
	}
	return c, nil
}

// addGroupKeys adds a legend key per group, when there are several.
func addGroupKeys(c *chart, l Layout) {
	if len(l.Groups) < 2 {
		return
	}
	c.legend.Add("")
	for gi, g := range l.Groups {
		st := styleOf(gi)
		c.legend.Add(shorten(g, 30), thumb{
			line:  &draw.LineStyle{Color: keyColor, Width: lineWidth, Dashes: st.dashes},
			glyph: &draw.GlyphStyle{Color: keyColor, Radius: markRadius, Shape: st.glyph},
		})
	}
}

func speedupChart(r *Report) (*chart, error) {
	best := r.Best()
	l := r.ChartLayout()
	if best == "" {
		c := newChart(r.Scenario+": no speedup to show", "the speedup compares routes, and this report has one")
		c.p.HideAxes()
		return c, nil
	}
	var baselines []string
	for _, rt := range r.routes() {
		if rt != best {
			baselines = append(baselines, rt)
		}
	}
	bestSeries := map[int]*series{}
	for _, s := range collect(r, l, []string{best}) {
		bestSeries[s.group] = s
	}
	// ratio divides a baseline's values by the best route's at the same x.
	ratio := func(num, den plotter.XYs) plotter.XYs {
		var out plotter.XYs
		for _, a := range num {
			for _, b := range den {
				if a.X == b.X && b.Y > 0 && a.Y > 0 {
					out = append(out, plotter.XY{X: a.X, Y: a.Y / b.Y})
					break
				}
			}
		}
		return out
	}
	type sp struct {
		route           string
		group           int
		modeled, measur plotter.XYs
	}
	var sps []sp
	var all []float64
	for _, s := range collect(r, l, baselines) {
		bs := bestSeries[s.group]
		if bs == nil {
			continue
		}
		q := sp{route: s.route, group: s.group, modeled: ratio(s.modeled, bs.modeled), measur: ratio(s.measured, bs.measured)}
		for _, xys := range []plotter.XYs{q.modeled, q.measur} {
			for _, v := range xys {
				all = append(all, v.Y)
			}
		}
		sps = append(sps, q)
	}
	title := fmt.Sprintf("%s: speedup of %s over each other route", r.Scenario, best)
	if l.Sweep >= 0 {
		title += " vs " + l.Axis.Name
	}
	c := newChart(title, fmt.Sprintf("the other route's time / %s's time: above 1, %s is faster", best, best))
	p := c.p
	setX(c, l)
	vs := chooseScale(all, false, 1)
	vs.apply(&p.Y)
	c.yLabel = "speedup"
	if vs.log {
		c.yLabel = "speedup (log scale)"
	}

	one, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: 1}, {X: p.X.Max, Y: 1}})
	if err != nil {
		return nil, fmt.Errorf("speedup chart: %w", err)
	}
	one.LineStyle = draw.LineStyle{Color: unitColor, Width: vg.Points(1.2), Dashes: []vg.Length{vg.Points(2), vg.Points(3)}}
	p.Add(one)
	skipped := 0
	for _, q := range sps {
		col := routeColor(q.route).RGBA
		st := styleOf(q.group)
		m := vs.plotted(q.modeled, &skipped)
		if len(m) > 1 && !l.Axis.Categorical {
			ln, err := plotter.NewLine(m)
			if err != nil {
				return nil, fmt.Errorf("speedup chart, %s: %w", q.route, err)
			}
			ln.LineStyle = draw.LineStyle{Color: col, Width: lineWidth, Dashes: st.dashes}
			p.Add(ln)
		}
		sc, err := plotter.NewScatter(m)
		if err != nil {
			return nil, fmt.Errorf("speedup chart, %s: %w", q.route, err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: markRadius, Shape: st.glyph}
		p.Add(sc)
	}
	hasMeasured := false
	for _, q := range sps {
		m := vs.plotted(q.measur, &skipped)
		if len(m) == 0 {
			continue
		}
		hasMeasured = true
		sc, err := plotter.NewScatter(m)
		if err != nil {
			return nil, fmt.Errorf("speedup chart, measured %s: %w", q.route, err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: routeColor(q.route).RGBA, Radius: measuredRadius, Shape: crossGlyph{width: measuredWidth}}
		p.Add(sc)
	}
	vs.apply(&p.Y)

	for _, rt := range baselines {
		col := routeColor(rt).RGBA
		c.legend.Add("over "+rt, thumb{
			line:  &draw.LineStyle{Color: col, Width: lineWidth},
			glyph: &draw.GlyphStyle{Color: col, Radius: markRadius, Shape: draw.CircleGlyph{}},
		})
	}
	c.legend.Add("")
	mode := "modeled"
	if r.Ideal {
		mode = "modeled (ideal rates)"
	}
	c.legend.Add(mode, thumb{
		line:  &draw.LineStyle{Color: keyColor, Width: lineWidth},
		glyph: &draw.GlyphStyle{Color: keyColor, Radius: markRadius, Shape: draw.CircleGlyph{}},
	})
	if hasMeasured {
		c.legend.Add("measured: "+shorten(r.measuredLabel(), 28), thumb{glyph: &draw.GlyphStyle{Color: keyColor, Radius: measuredRadius, Shape: crossGlyph{width: measuredWidth}}})
	}
	c.legend.Add("1 = equal", thumb{line: &one.LineStyle})
	addGroupKeys(c, l)
	if skipped > 0 {
		c.legend.Add("")
		c.legend.Add(fmt.Sprintf("%d value(s) <= 0 not shown", skipped))
	}
	return c, nil
}

// shorten cuts s to at most n runes, marking the cut.
func shorten(s string, n int) string {
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	return string(rs[:n-3]) + "..."
}

// addLatency draws series on a latency chart: SOL lines underneath (a bar
// per point where the axis has categories or one point), then modeled
// marks, then measurements on top, each in its route's colour and its
// group's style (series.group). It returns how many values <= 0 the log
// scale could not show.
func addLatency(p *plot.Plot, ss []*series, vs valueScale, categorical bool) (int, error) {
	skipped := 0
	// SOL lines underneath, then modeled marks, then measurements on top.
	// A SOL line that coincides with one drawn before it (agbcast's and
	// nemo-legacy's bound are often equal) is drawn dashed over it, so
	// both colours show.
	var drawn []plotter.XYs
	for _, s := range ss {
		col := routeColor(s.route).RGBA
		st := styleOf(s.group)
		sol := vs.plotted(s.sol, &skipped)
		if len(st.dashes) == 0 && coincides(sol, drawn) {
			st.dashes = []vg.Length{vg.Points(7), vg.Points(5)}
		}
		drawn = append(drawn, sol)
		if len(sol) == 1 || categorical {
			sc, err := plotter.NewScatter(sol)
			if err != nil {
				return 0, fmt.Errorf("latency chart, SOL of %s: %w", s.route, err)
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(11), Shape: barGlyph{dashes: st.dashes}}
			p.Add(sc)
		}
		if len(sol) > 1 && !categorical { // no line between categories
			ln, err := plotter.NewLine(sol)
			if err != nil {
				return 0, fmt.Errorf("latency chart, SOL of %s: %w", s.route, err)
			}
			ln.LineStyle = draw.LineStyle{Color: col, Width: lineWidth, Dashes: st.dashes}
			p.Add(ln)
		}
	}
	for _, s := range ss {
		sc, err := plotter.NewScatter(vs.plotted(s.modeled, &skipped))
		if err != nil {
			return 0, fmt.Errorf("latency chart, modeled %s: %w", s.route, err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: routeColor(s.route).RGBA, Radius: markRadius, Shape: styleOf(s.group).glyph}
		p.Add(sc)
	}
	for _, s := range ss {
		m := vs.plotted(s.measured, &skipped)
		if len(m) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(m)
		if err != nil {
			return 0, fmt.Errorf("latency chart, measured %s: %w", s.route, err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: routeColor(s.route).RGBA, Radius: measuredRadius, Shape: crossGlyph{width: measuredWidth}}
		p.Add(sc)
	}
	return skipped, nil
}

// coincides reports whether a line's points all lie within 0.5% of one of
// the lines drawn (same x, y within 0.5%).
func coincides(line plotter.XYs, drawn []plotter.XYs) bool {
	for _, d := range drawn {
		if len(d) != len(line) || len(d) == 0 {
			continue
		}
		same := true
		for i := range d {
			if d[i].X != line[i].X || math.Abs(d[i].Y-line[i].Y) > 0.005*math.Abs(d[i].Y) {
				same = false
				break
			}
		}
		if same {
			return true
		}
	}
	return false
}
