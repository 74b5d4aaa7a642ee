package reports

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"strconv"

	"github.com/m2n-project/m2n/model/scenario"
)

// CSVColumns are the fixed columns of the CSV, after one column per sweep
// (named by the sweep; "point." + name where it would clash with these).
// Times are seconds and numbers are exact (the shortest text that reads
// back equal); an absent measurement leaves measured_s, error and
// measured_source empty. docs/cli.md documents each.
var CSVColumns = []string{
	"route", "unique_bytes", "sol_s", "sol_term", "modeled_s", "modeled_over_sol",
	"measured_s", "error", "measured_source", "bottleneck", "bottleneck_utilization", "ideal",
}

// CSVHeader is the CSV's header row for a report's sweeps.
func CSVHeader(sweeps []scenario.Sweep) []string {
	fixed := map[string]bool{}
	for _, c := range CSVColumns {
		fixed[c] = true
	}
	var h []string
	for _, sw := range sweeps {
		name := sw.Name
		if fixed[name] {
			name = "point." + name
		}
		h = append(h, name)
	}
	return append(h, CSVColumns...)
}

// CSV renders the report as comma-separated values (RFC 4180), a header
// and one record per point and route, in the order of the rows.
func CSV(r *Report) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.Write(CSVHeader(r.Sweeps)); err != nil {
		return nil, fmt.Errorf("csv: %w", err)
	}
	for _, row := range r.Rows {
		var rec []string
		for _, q := range row.Point.Params {
			rec = append(rec, scenario.FormatValue(q.Value))
		}
		meas, errs := "", ""
		if row.HasMeasured() {
			meas, errs = formatFloat(row.Measured.Seconds()), formatFloat(row.MeasuredError())
		}
		ratio := ""
		if row.SOL.Seconds() > 0 {
			ratio = formatFloat(row.Ratio())
		}
		src := ""
		if row.HasMeasured() {
			src = row.MeasuredSource
		}
		rec = append(rec,
			row.Route,
			strconv.FormatInt(row.UniqueBytes, 10),
			formatFloat(row.SOL.Seconds()),
			row.SOLTerm,
			formatFloat(row.Modeled.Seconds()),
			ratio,
			meas, errs, src,
			row.Bottleneck.Name,
			formatFloat(row.Bottleneck.Utilization),
			strconv.FormatBool(r.Ideal),
		)
		if err := w.Write(rec); err != nil {
			return nil, fmt.Errorf("csv: %w", err)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, fmt.Errorf("csv: %w", err)
	}
	return b.Bytes(), nil
}
