package reports

import (
	"fmt"
	"strconv"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
)

// The results table: one row per point and route, defined once here and
// rendered three ways, as m2n sim's text table, the report's Markdown
// table and its CSV. Each column says its header and its cell in every
// rendering; each rendering lists the columns it shows, in its order.

// format is a rendering of the results table.
type format int

const (
	asText format = iota
	asMarkdown
	asCSV
)

// results is what the cells of a results table read besides their row.
type results struct {
	sweeps  []scenario.Sweep
	ideal   bool
	sources []string // the rows' reference measurement sources, in order of appearance
}

// column is one column of the results table.
type column struct {
	head  [3]string // per format
	align string    // Markdown alignment row: "---" or "---:"
	cell  func(t *results, r *Row, f format) string
}

// sweepColumn is the column of sweep k: its value at the row's point.
func sweepColumn(k int, csvName string) column {
	return column{head: [3]string{"", mdEscape(csvName), csvName}, align: "---", cell: func(_ *results, r *Row, f format) string {
		v := scenario.FormatValue(r.Point.Params[k].Value)
		if f == asMarkdown {
			return mdEscape(v)
		}
		return v
	}}
}

// columns are the results table's columns by name.
var columns = map[string]column{
	"point": {head: [3]string{"point"}, cell: func(_ *results, r *Row, _ format) string { return r.Label() }},
	"route": {head: [3]string{"route", "route", "route"}, align: "---", cell: func(_ *results, r *Row, f format) string {
		if f == asMarkdown {
			return mdEscape(r.Route)
		}
		return r.Route
	}},
	"bytes": {head: [3]string{"", "bytes", "unique_bytes"}, align: "---:", cell: func(_ *results, r *Row, f format) string {
		if f == asCSV {
			return strconv.FormatInt(r.UniqueBytes, 10)
		}
		return units.Bytes(r.UniqueBytes).Human()
	}},
	"sol": {head: [3]string{"SOL", "SOL", "sol_s"}, align: "---:", cell: func(_ *results, r *Row, f format) string {
		return seconds(r.SOL, f)
	}},
	"sol_term": {head: [3]string{"", "", "sol_term"}, cell: func(_ *results, r *Row, _ format) string { return r.SOLTerm }},
	"modeled": {head: [3]string{"modeled", "modeled", "modeled_s"}, align: "---:", cell: func(_ *results, r *Row, f format) string {
		return seconds(r.Modeled, f)
	}},
	"ratio": {head: [3]string{"x SOL", "modeled / SOL", "modeled_over_sol"}, align: "---:", cell: func(_ *results, r *Row, f format) string {
		switch {
		case f == asText:
			return fmt.Sprintf("%.3f", r.Ratio())
		case r.SOL.Seconds() <= 0 && f == asMarkdown:
			return "-"
		case r.SOL.Seconds() <= 0:
			return ""
		case f == asMarkdown:
			return fmt.Sprintf("%.3f", r.Ratio())
		}
		return formatFloat(r.Ratio())
	}},
	"measured": {head: [3]string{"measured", "measured", "measured_s"}, align: "---:", cell: func(t *results, r *Row, f format) string {
		switch {
		case !r.HasMeasured() && f == asText:
			return "-"
		case !r.HasMeasured():
			return ""
		case f == asText:
			return r.Measured.String()
		case f == asCSV:
			return formatFloat(r.Measured.Seconds())
		}
		m := FormatMeasured(r.Measured.Seconds())
		if len(t.sources) > 1 {
			m += fmt.Sprintf(" [%d]", indexOf(t.sources, r.MeasuredSource)+1)
		}
		return m
	}},
	"error": {head: [3]string{"error", "error", "error"}, align: "---:", cell: func(_ *results, r *Row, f format) string {
		switch {
		case !r.HasMeasured() && f == asText:
			return "-"
		case !r.HasMeasured():
			return ""
		case f == asText:
			return fmt.Sprintf("%+.1f%%", r.MeasuredError()*100)
		case f == asCSV:
			return formatFloat(r.MeasuredError())
		}
		return signedPercent(r.MeasuredError())
	}},
	"measured_source": {head: [3]string{"", "", "measured_source"}, cell: func(_ *results, r *Row, _ format) string {
		if !r.HasMeasured() {
			return ""
		}
		return r.MeasuredSource
	}},
	"bottleneck": {head: [3]string{"bottleneck", "bottleneck", "bottleneck"}, align: "---", cell: func(_ *results, r *Row, f format) string {
		switch f {
		case asCSV:
			return r.Bottleneck.Name
		case asMarkdown:
			return fmt.Sprintf("%s (%.0f%%)", mdEscape(r.Bottleneck.Name), 100*r.Bottleneck.Utilization)
		}
		return fmt.Sprintf("%s (%.0f%%)", r.Bottleneck.Name, 100*r.Bottleneck.Utilization)
	}},
	"bottleneck_utilization": {head: [3]string{"", "", "bottleneck_utilization"}, cell: func(_ *results, r *Row, _ format) string {
		return formatFloat(r.Bottleneck.Utilization)
	}},
	"memory": {head: [3]string{"memory/GPU", "memory / GPU", "memory_per_gpu_bytes"}, align: "---:", cell: func(_ *results, r *Row, f format) string {
		if f == asCSV {
			return strconv.FormatInt(r.Memory.TotalBytes, 10)
		}
		return units.Bytes(r.Memory.TotalBytes).Human()
	}},
	"capacity": {head: [3]string{"", "", "gpu_memory_bytes"}, cell: func(_ *results, r *Row, _ format) string {
		if !r.Memory.CapacityKnown {
			return ""
		}
		return strconv.FormatInt(r.Memory.CapacityBytes, 10)
	}},
	"fits": {head: [3]string{"fits", "fits", "fits"}, align: "---", cell: func(_ *results, r *Row, f format) string {
		switch {
		case !r.Memory.CapacityKnown && f == asCSV:
			return ""
		case !r.Memory.CapacityKnown:
			return "-"
		case f == asCSV:
			return strconv.FormatBool(r.Memory.Fits)
		case r.Memory.Fits:
			return "yes"
		}
		return "NO (" + units.Bytes(r.Memory.CapacityBytes).Human() + ")"
	}},
	"framework": {head: [3]string{"framework", "framework", "framework_s"}, align: "---:", cell: func(_ *results, r *Row, f format) string {
		if r.Framework == nil {
			if f == asCSV {
				return ""
			}
			return "-"
		}
		return seconds(r.Framework.Export+r.Framework.Load, f)
	}},
	"refit": {head: [3]string{"with framework", "with framework", "refit_s"}, align: "---:", cell: func(_ *results, r *Row, f format) string {
		if r.Framework == nil {
			if f == asCSV {
				return ""
			}
			return "-"
		}
		return seconds(r.Framework.Export+r.Modeled+r.Framework.Load, f)
	}},
	"ideal": {head: [3]string{"", "", "ideal"}, cell: func(t *results, _ *Row, _ format) string { return strconv.FormatBool(t.ideal) }},
}

// seconds is a time cell: the time's own text, 4 significant digits in
// Markdown, exact seconds in CSV.
func seconds(v units.Time, f format) string {
	switch f {
	case asMarkdown:
		return FormatSeconds(v.Seconds(), 4)
	case asCSV:
		return formatFloat(v.Seconds())
	}
	return v.String()
}

// layout is the columns one rendering shows, in order: the sweep columns
// first where the rendering has them.
func (t *results) layout(f format, names ...string) []column {
	var out []column
	if f != asText {
		fixed := map[string]bool{}
		for _, c := range CSVColumns {
			fixed[c] = true
		}
		for k, sw := range t.sweeps {
			name := sw.Name
			if f == asCSV && fixed[name] {
				name = "point." + name
			}
			out = append(out, sweepColumn(k, name))
		}
	}
	for _, n := range names {
		c, ok := columns[n]
		if !ok {
			panic("reports: no results column " + n) // a bug in this package
		}
		out = append(out, c)
	}
	return out
}

// heads and cells render a layout's header and one row.
func heads(cols []column, f format) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.head[f]
	}
	return out
}

func (t *results) cells(cols []column, r *Row, f format) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.cell(t, r, f)
	}
	return out
}

// hasFramework reports whether any row has the user's framework costs.
func hasFramework(rows []Row) bool {
	for i := range rows {
		if rows[i].Framework != nil {
			return true
		}
	}
	return false
}
