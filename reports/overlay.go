package reports

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot/vg/draw"
)

// OverlayLatencyChart renders several scenarios' latency charts on one
// set of axes ("png" or "svg"): each route in its colour, each scenario
// in its own line dash and mark, for example DeepSeek-V3's and Qwen3's
// scaling sweeps. The scenarios must chart the same numeric sweep (by
// name and unit), one group each.
func OverlayLatencyChart(reps []*Report, format string) ([]byte, error) {
	if err := checkFormat(format); err != nil {
		return nil, err
	}
	c, err := overlayChart(reps)
	if err != nil {
		return nil, err
	}
	return c.render(format)
}

func overlayChart(reps []*Report) (*chart, error) {
	if len(reps) < 2 {
		return nil, errors.New("an overlay needs two reports or more")
	}
	var axis Axis
	type scen struct {
		name string
		ss   []*series
	}
	var all []scen
	var routes, names []string
	for i, r := range reps {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		l := r.ChartLayout()
		switch {
		case l.Sweep < 0 || l.Axis.Categorical:
			return nil, fmt.Errorf("overlay: %s sweeps nothing numeric to chart against", r.Scenario)
		case len(l.Groups) > 1:
			return nil, fmt.Errorf("overlay: %s charts %d groups; select one point of its other sweeps with --point", r.Scenario, len(l.Groups))
		case i == 0:
			axis = l.Axis
			axis.X, axis.Labels, axis.Values = nil, nil, nil
		case l.Axis.Name != axis.Name || l.Axis.Unit != axis.Unit:
			return nil, fmt.Errorf("overlay: %s charts %q (%s) but %s charts %q (%s): the axes differ", reps[0].Scenario, axis.Name, axis.Unit, r.Scenario, l.Axis.Name, l.Axis.Unit)
		}
		for k, x := range l.Axis.X {
			if !slices.Contains(axis.X, x) {
				axis.X, axis.Labels, axis.Values = append(axis.X, x), append(axis.Labels, l.Axis.Labels[k]), append(axis.Values, l.Axis.Values[k])
			}
		}
		rs := r.routes()
		for _, rt := range rs {
			if !slices.Contains(routes, rt) {
				routes = append(routes, rt)
			}
		}
		names = append(names, r.Scenario)
		all = append(all, scen{r.Scenario, collect(r, l, rs)})
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range axis.X {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	axis.Log = lo > 0 && (hi/lo > 10 || doubling(axis.X))
	c := newChart("reshard latency vs "+axis.Name+": "+strings.Join(names, ", "), "each route in its colour, each scenario in its own dash and mark")
	p := c.p
	setX(c, Layout{Axis: axis, Sweep: 0, Groups: []string{""}})
	var values []float64
	for _, s := range all {
		values = append(values, latencyValues(s.ss)...)
	}
	vs := chooseScale(values, true)
	vs.apply(&p.Y)
	if vs.log {
		c.yLabel = "latency (log scale)"
	} else {
		c.yLabel = "latency (" + vs.unit + ")"
	}
	var ss []*series
	for i, sc := range all {
		for _, se := range sc.ss {
			se.group = i // a scenario's style
			ss = append(ss, se)
		}
	}
	skipped, err := addLatency(p, ss, vs, false)
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	vs.apply(&p.Y)
	for _, rt := range routes {
		col := routeColor(rt).RGBA
		c.legend.Add(rt, thumb{line: &draw.LineStyle{Color: col, Width: lineWidth}, glyph: &draw.GlyphStyle{Color: col, Radius: markRadius, Shape: draw.CircleGlyph{}}})
	}
	c.legend.Add("")
	c.legend.Add("SOL bound: lines; modeled: marks")
	c.legend.Add("")
	for i, n := range names {
		st := styleOf(i)
		c.legend.Add(shorten(n, 30), thumb{
			line:  &draw.LineStyle{Color: keyColor, Width: lineWidth, Dashes: st.dashes},
			glyph: &draw.GlyphStyle{Color: keyColor, Radius: markRadius, Shape: st.glyph},
		})
	}
	if skipped > 0 {
		c.legend.Add("")
		c.legend.Add(fmt.Sprintf("%d value(s) <= 0 not shown", skipped))
	}
	return c, nil
}
