package reports

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/sim"
)

// RecordsFromJSON reads back the records `m2n sim --json` printed for a
// scenario whose selected points are points: each record is matched to the
// point of equal coordinates (a record of a point not selected is left
// out: a report of some of the run's points), and its numbers come back as
// they were (the JSON's seconds to integer picoseconds). Records of
// another scenario, or none of the selected points, are an error.
func RecordsFromJSON(data []byte, scenarioName string, points []*scenario.Point) ([]Row, []evaluate.Skip, error) {
	var doc simOutput
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("not the JSON of m2n sim --json: %w", err)
	}
	if doc.Scenario != scenarioName {
		return nil, nil, fmt.Errorf("the records are of scenario %q, not %q", doc.Scenario, scenarioName)
	}
	// Coordinates compared as JSON writes them.
	key := func(m map[string]any) (string, error) {
		b, err := json.Marshal(m)
		return string(b), err
	}
	byKey := map[string]*scenario.Point{}
	for _, p := range points {
		k, err := key(p.Map())
		if err != nil {
			return nil, nil, err
		}
		// A point's values through JSON and back, as the records hold them.
		var back map[string]any
		if err := json.Unmarshal([]byte(k), &back); err != nil {
			return nil, nil, err
		}
		k, _ = key(back)
		byKey[k] = p
	}
	pointOf := func(m map[string]any, i int) (*scenario.Point, error) {
		k, err := key(m)
		if err != nil {
			return nil, err
		}
		return byKey[k], nil
	}
	ps := func(s float64) units.Time { return units.Time(math.Round(s * float64(units.Second))) }
	var rows []Row
	for i, j := range doc.Records {
		p, err := pointOf(j.Point, i)
		if err != nil {
			return nil, nil, err
		}
		if p == nil {
			continue // not selected
		}
		r := Row{Route: j.Route, Point: p, Ideal: j.Ideal, UniqueBytes: j.UniqueBytes, SOL: ps(j.SOLSeconds), SOLTerm: j.SOLTerm,
			Modeled: ps(j.Modeled), ModeledHostIssue: ps(j.HostIssue), Ops: j.Ops, Flows: j.Flows, Events: j.Events,
			TensorClasses: j.TensorClasses, Models: j.Models}
		for _, ge := range j.GroupEnds {
			r.ModeledGroupEnds = append(r.ModeledGroupEnds, ps(ge))
		}
		r.Bottleneck = sim.ResourceStat{Resource: sim.Resource{Name: j.Bottleneck.Resource, Class: j.Bottleneck.Class}, Utilization: j.Bottleneck.Utilization}
		for _, c := range j.Resources {
			r.Resources = append(r.Resources, sim.ResourceStat{Resource: sim.Resource{Name: c.Class, Class: c.Class, GPU: -1, Domain: -1},
				Bytes: c.Bytes, Busy: ps(c.BusyMaxSeconds), Utilization: c.Utilization})
		}
		if j.Measured != nil {
			r.Measured, r.MeasuredSource, r.MeasuredNote = ps(*j.Measured), j.Source, j.Note
		}
		m := j.Memory
		r.Memory = evaluate.Memory{GPU: m.GPU, ResidentBytes: m.ResidentBytes, StagingBytes: m.StagingBytes, TotalBytes: m.TotalBytes,
			CapacityBytes: m.CapacityBytes, CapacityKnown: m.Fits != nil}
		if m.Fits != nil {
			r.Memory.Fits = *m.Fits
		}
		if f := j.Framework; f != nil {
			r.Framework = &evaluate.FrameworkTime{Export: ps(f.ExportSeconds), Load: ps(f.LoadSeconds)}
		}
		rows = append(rows, r)
	}
	var skips []evaluate.Skip
	for i, k := range doc.Skipped {
		p, err := pointOf(k.Point, i)
		if err != nil {
			return nil, nil, fmt.Errorf("skipped %w", err)
		}
		if p == nil {
			continue
		}
		skips = append(skips, evaluate.Skip{Point: p, Route: k.Route, Reason: k.Reason})
	}
	if len(rows) == 0 {
		return nil, nil, fmt.Errorf("no record of the selected points (the file has %d records)", len(doc.Records))
	}
	return rows, skips, nil
}
