package reports

import (
	"bytes"
	"encoding/csv"
	"fmt"

	"github.com/m2n-project/m2n/model/scenario"
)

// csvLayout is the CSV's columns after the sweeps' (the results table's,
// reports/table.go).
var csvLayout = []string{"route", "bytes", "sol", "sol_term", "modeled", "ratio",
	"measured", "error", "measured_source", "bottleneck", "bottleneck_utilization", "ideal",
	"memory", "capacity", "fits", "framework", "refit"}

// CSVColumns are the fixed columns of the CSV, after one column per sweep
// (named by the sweep; "point." + name where it would clash with these).
// Times are seconds and numbers are exact (the shortest text that reads
// back equal); an absent measurement leaves measured_s, error and
// measured_source empty. docs/cli.md documents each.
var CSVColumns = csvHeads()

func csvHeads() []string {
	var out []string
	for _, n := range csvLayout {
		out = append(out, columns[n].head[asCSV])
	}
	return out
}

// CSVHeader is the CSV's header row for a report's sweeps.
func CSVHeader(sweeps []scenario.Sweep) []string {
	t := &results{sweeps: sweeps}
	return heads(t.layout(asCSV, csvLayout...), asCSV)
}

// CSV renders the report as comma-separated values (RFC 4180), a header
// and one record per point and route, in the order of the rows.
func CSV(r *Report) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	t := &results{sweeps: r.Sweeps, ideal: r.Ideal}
	cols := t.layout(asCSV, csvLayout...)
	if err := w.Write(heads(cols, asCSV)); err != nil {
		return nil, fmt.Errorf("csv: %w", err)
	}
	for i := range r.Rows {
		if err := w.Write(t.cells(cols, &r.Rows[i], asCSV)); err != nil {
			return nil, fmt.Errorf("csv: %w", err)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, fmt.Errorf("csv: %w", err)
	}
	return b.Bytes(), nil
}
