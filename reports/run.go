package reports

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/m2n-project/m2n/model/units"
)

// The views of `m2n run`: its text table and JSON records (docs/cli.md).

// runRecord is one record of `m2n run --json`: the GPU's measurements
// beside the evaluation of the same schedule.
type runRecord struct {
	Point        map[string]any `json:"point"`
	Route        string         `json:"route"`
	Backend      string         `json:"backend"`
	Launch       string         `json:"launch"`
	Mode         string         `json:"mode"`
	Transport    string         `json:"transport"`
	Device       string         `json:"device"`
	UniqueBytes  int64          `json:"unique_bytes"`
	Measured     float64        `json:"measured_s"`
	MeasuredMin  float64        `json:"measured_min_s"`
	MeasuredMax  float64        `json:"measured_max_s"`
	Modeled      float64        `json:"modeled_s"`
	ModelError   float64        `json:"model_error"` // modeled / measured - 1
	ModeledOn    string         `json:"modeled_on"`
	SOL          float64        `json:"sol_s"`
	Verified     bool           `json:"verified"`
	CheckedBytes int64          `json:"checked_bytes"`
	WrongElems   int64          `json:"wrong_elements"`
	Ops          int            `json:"ops"`
	Groups       int            `json:"nccl_groups"`
	GroupCap     int64          `json:"group_cap_bytes"`
	HostIssue    float64        `json:"host_issue_s"`
	ModelIssue   float64        `json:"modeled_host_issue_s"`
	PeakDevice   int64          `json:"peak_device_bytes"`
	Staging      int64          `json:"staging_bytes"`
	Iterations   int            `json:"iterations"`
	StreamEnds   []streamEnd    `json:"stream_ends,omitempty"`          // with --profile
	GroupEnds    []float64      `json:"group_ends_s,omitempty"`         // with --profile, NCCL groups
	ModelGroups  []float64      `json:"modeled_group_ends_s,omitempty"` // with --profile, the model's
	ProfileError string         `json:"profile_error,omitempty"`        // with --profile, why there is no profile
	Error        string         `json:"error,omitempty"`                // why the run did not happen, or could not be modeled
}

// streamEnd is when one GPU stream finished its part of an iteration,
// and when the model's stream of the same GPU and lane did.
type streamEnd struct {
	Device     int      `json:"device"`
	Lane       int      `json:"lane"`
	Stream     string   `json:"stream"`
	End        float64  `json:"end_s"`
	ModeledEnd *float64 `json:"modeled_end_s,omitempty"`
}

// modeledEnd is the model's end of the stream on GPU dev and lane, if it
// has one.
func modeledEnd(r *Row, dev, lane int) (units.Time, bool) {
	for _, m := range r.ModeledStreamEnds {
		if m.GPU == dev && m.Lane == lane {
			return m.End, true
		}
	}
	return 0, false
}

func runJSON(r *Row) runRecord {
	run := r.Run
	rec := runRecord{Point: map[string]any{}, Route: r.Route, Backend: run.Backend, Launch: run.Launch, Iterations: run.Iterations}
	if r.Point != nil {
		rec.Point = r.Point.Map()
	}
	if run.Ran() {
		rec.Measured, rec.MeasuredMin, rec.MeasuredMax = run.Median().Seconds(), run.Times[0].Seconds(), run.Times[len(run.Times)-1].Seconds()
		rec.Mode, rec.Device, rec.Verified, rec.CheckedBytes, rec.WrongElems = run.Mode, run.Device, run.Verified, run.CheckedBytes, run.WrongElems
		rec.Transport = run.Transport
		rec.Groups, rec.GroupCap, rec.HostIssue = run.Groups, run.GroupCapBytes, run.HostIssue.Seconds()
		rec.PeakDevice, rec.Staging, rec.Ops = run.PeakDeviceBytes, run.StagingBytes, r.Ops
		rec.ProfileError = run.ProfileErr
		for _, se := range run.StreamEnds {
			j := streamEnd{Device: se.Device, Lane: se.Lane, Stream: se.Stream, End: se.End.Seconds()}
			if m, ok := modeledEnd(r, se.Device, se.Lane); ok && run.Err == nil {
				v := m.Seconds()
				j.ModeledEnd = &v
			}
			rec.StreamEnds = append(rec.StreamEnds, j)
		}
		for _, ge := range run.GroupEnds {
			rec.GroupEnds = append(rec.GroupEnds, ge.Seconds())
		}
	}
	if run.Err != nil {
		rec.Error = run.Err.Error()
		return rec
	}
	rec.UniqueBytes, rec.Modeled, rec.ModeledOn, rec.SOL = r.UniqueBytes, r.Modeled.Seconds(), r.ModeledOn, r.SOL.Seconds()
	rec.ModelError = r.RunError()
	rec.ModelIssue = r.ModeledHostIssue.Seconds()
	for _, ge := range r.ModeledGroupEnds {
		rec.ModelGroups = append(rec.ModelGroups, ge.Seconds())
	}
	return rec
}

// RunJSON is the document `m2n run --json` prints: the scenario and one
// record per row that has a Run.
func RunJSON(scenario string, rows []Row) any {
	recs := []runRecord{}
	for i := range rows {
		if rows[i].Run != nil {
			recs = append(recs, runJSON(&rows[i]))
		}
	}
	return struct {
		Scenario string      `json:"scenario"`
		Records  []runRecord `json:"records"`
	}{scenario, recs}
}

// WriteRunTable prints `m2n run`'s table: per row, the measured time beside
// the model and the bound, the check, the host's issue time and memory.
func WriteRunTable(w io.Writer, scenario, backend string, rows []Row) error {
	fmt.Fprintf(w, "scenario %s, backend %s\n\n", scenario, backend)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "point\troute\tmeasured (median)\tmin .. max\tmodeled\terror\tmodeled on\tSOL (cluster)\tverified\thost issue\tpeak memory/GPU\tmode")
	for i := range rows {
		r, run := &rows[i], rows[i].Run
		if run == nil {
			continue
		}
		if !run.Ran() {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\tnot run: see the error above\t\t\t\n", r.Label(), r.Route)
			continue
		}
		v := fmt.Sprintf("ok, %s", units.Bytes(run.CheckedBytes).Human())
		if !run.Verified {
			v = fmt.Sprintf("%d WRONG elements", run.WrongElems)
		}
		modeled, errS, on, sol := r.Modeled.String(), fmt.Sprintf("%+.1f%%", 100*r.RunError()), r.ModeledOn, r.SOL.String()
		if run.Err != nil { // ran, but could not be modeled: see the error above
			modeled, errS, on, sol = "-", "-", "", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s .. %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Label(), r.Route, run.Median(), run.Times[0], run.Times[len(run.Times)-1],
			modeled, errS, on, sol, v, run.HostIssue, units.Bytes(run.PeakDeviceBytes).Human(), strings.TrimSpace(run.Mode))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeProfiles(w, rows)
}

// writeProfiles prints, for each profiled run, when each stream finished
// its part of an iteration.
func writeProfiles(w io.Writer, rows []Row) error {
	for i := range rows {
		r, run := &rows[i], rows[i].Run
		if run == nil || !run.Ran() || len(run.StreamEnds) == 0 && run.ProfileErr == "" {
			continue
		}
		fmt.Fprintf(w, "\nprofile of point %s, route %s (median iteration %s): when each stream finished\n", r.Label(), r.Route, run.Median())
		if run.ProfileErr != "" {
			fmt.Fprintf(w, "no profile: %s\n", run.ProfileErr)
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		modeled := len(r.ModeledStreamEnds) > 0 && run.Err == nil
		if modeled {
			fmt.Fprintln(tw, "GPU\tstream\tfinished\tmodeled\terror")
		} else {
			fmt.Fprintln(tw, "GPU\tstream\tfinished")
		}
		for _, se := range run.StreamEnds {
			fmt.Fprintf(tw, "%d\t%s\t%s", se.Device, se.Stream, se.End)
			if modeled {
				if m, ok := modeledEnd(r, se.Device, se.Lane); ok && se.End > 0 {
					fmt.Fprintf(tw, "\t%s\t%+.1f%%", m, 100*(float64(m)/float64(se.End)-1))
				} else {
					fmt.Fprint(tw, "\t-\t-")
				}
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(run.GroupEnds) > 0 {
			fmt.Fprint(w, "NCCL groups ended at (the first GPU):")
			for _, ge := range run.GroupEnds {
				fmt.Fprintf(w, " %s", ge)
			}
			fmt.Fprintln(w)
		}
		if len(r.ModeledGroupEnds) > 0 {
			fmt.Fprint(w, "modeled (error of each group's length):")
			for k, ge := range r.ModeledGroupEnds {
				fmt.Fprintf(w, " %s", ge)
				if k < len(run.GroupEnds) {
					fmt.Fprintf(w, " (%s)", groupError(r.ModeledGroupEnds, run.GroupEnds, k))
				}
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

// groupError is the model's error on group k's length (its end less the
// previous group's): modeled / measured - 1, as a signed percentage.
func groupError(modeled, measured []units.Time, k int) string {
	length := func(ends []units.Time) units.Time {
		if k == 0 {
			return ends[0]
		}
		return ends[k] - ends[k-1]
	}
	m := length(measured)
	if m <= 0 {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", (length(modeled).Seconds()/m.Seconds()-1)*100)
}
