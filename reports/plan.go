package reports

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
)

// The command line's views of plans: the text tables and the JSON records
// of `m2n plan` (docs/cli.md).

// PlanTensor is the regions summary of one tensor at one sweep point.
// docs/cli.md documents every field.
type PlanTensor struct {
	Point          map[string]any `json:"point"`
	Tensor         string         `json:"tensor"`
	Src            string         `json:"src"`
	Dst            string         `json:"dst"`
	UniqueBytes    int64          `json:"unique_bytes"`
	NeedBytesMin   int64          `json:"need_bytes_min"`
	NeedBytesMax   int64          `json:"need_bytes_max"`
	Regions        int            `json:"regions"`
	Transfers      int            `json:"transfers"`
	LocalCopies    int            `json:"local_copies"`
	TransferBytes  int64          `json:"transfer_bytes"`
	LocalBytes     int64          `json:"local_bytes"`
	EgressBytesMin int64          `json:"src_egress_bytes_min"`
	EgressBytesMax int64          `json:"src_egress_bytes_max"`
	Digest         string         `json:"digest"`

	Label string `json:"-"` // the point's label
}

// ClassBytes is a byte count per path class (docs/cli.md).
type ClassBytes struct {
	Network int64 `json:"network"`
	NVLink  int64 `json:"nvlink"`
	Local   int64 `json:"local"`
}

func ByClass(v [3]int64) ClassBytes {
	return ClassBytes{Network: v[ir.Net], NVLink: v[ir.NVLink], Local: v[ir.Local]}
}

// PlanRoute is the schedule summary of one route at one sweep point.
type PlanRoute struct {
	Point           map[string]any `json:"point"`
	Route           string         `json:"route"`
	ChunkBytes      int64          `json:"chunk_bytes"`
	UniqueBytes     int64          `json:"unique_bytes"`
	Ops             int            `json:"ops"`
	Transfers       int            `json:"transfers"`
	Bytes           ClassBytes     `json:"bytes"`
	MaxEgress       ClassBytes     `json:"max_egress_bytes"`
	MaxIngress      ClassBytes     `json:"max_ingress_bytes"`
	StagingBytesMax int64          `json:"staging_bytes_max"`
	// With --check: verified, checked_bytes and wrong_bytes where the
	// check ran; skipped, why not, where it did not.
	Verified     *bool  `json:"verified,omitempty"`
	CheckedBytes *int64 `json:"checked_bytes,omitempty"`
	WrongBytes   *int64 `json:"wrong_bytes,omitempty"`
	Skipped      string `json:"skipped,omitempty"`

	Label string `json:"-"` // the point's label
}

// PlanOutput is the output of `m2n plan`: its JSON form is `--json`'s.
type PlanOutput struct {
	Scenario    string `json:"scenario"`
	Description string `json:"-"`
	// Summary: the text regions table has a line per point (its tensors
	// summed) instead of a line per tensor (`m2n plan --summary`).
	Summary bool         `json:"-"`
	Tensors []PlanTensor `json:"tensors"`
	Routes  []PlanRoute  `json:"routes"`
}

// NewPlanRoute summarizes the schedule of one route at a point.
func NewPlanRoute(p *scenario.Point, s *ir.Schedule) PlanRoute {
	var unique int64
	for _, t := range p.Tensors {
		unique += t.Src.Bytes()
	}
	st := s.Stats()
	return PlanRoute{
		Point: p.Map(), Route: s.Route, ChunkBytes: s.ChunkBytes, UniqueBytes: unique,
		Ops: st.Ops, Transfers: st.Transfers,
		Bytes: ByClass(st.Bytes), MaxEgress: ByClass(st.MaxEgress), MaxIngress: ByClass(st.MaxIngress),
		StagingBytesMax: st.MaxStaging, Label: p.Label(),
	}
}

// WritePlanTable writes the text tables of `m2n plan`: the regions of each
// tensor, and the schedule of each route, with the host check when one ran.
func WritePlanTable(w io.Writer, out PlanOutput, check bool) error {
	if err := WritePlanRegions(w, out); err != nil {
		return err
	}
	head, rows := PlanScheduleRows(out, check)
	if check {
		head += "check"
	}
	if _, err := fmt.Fprintln(w, head); err != nil {
		return err
	}
	for i, row := range rows {
		if check {
			row += PlanCheckCell(out.Routes[i])
		}
		if _, err := fmt.Fprintln(w, row); err != nil {
			return err
		}
	}
	return nil
}

// WritePlanRegions writes what `m2n plan` prints before the rows of its
// schedules table: the regions table, and the title of the schedules.
func WritePlanRegions(w io.Writer, out PlanOutput) error {
	fmt.Fprintf(w, "scenario %s: %s\n\nregions\n", out.Scenario, out.Description)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if out.Summary {
		// A line per point: its tensors summed.
		fmt.Fprintln(tw, "point\ttensors\tunique\tregions\ttransfers\tlocal")
		var order []string
		sum := map[string]*[5]int64{}
		for _, rec := range out.Tensors {
			a := sum[rec.Label]
			if a == nil {
				a = &[5]int64{}
				sum[rec.Label] = a
				order = append(order, rec.Label)
			}
			a[0]++
			a[1] += rec.UniqueBytes
			a[2] += int64(rec.Regions)
			a[3] += int64(rec.Transfers)
			a[4] += int64(rec.LocalCopies)
		}
		for _, l := range order {
			a := sum[l]
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\n", l, a[0], units.Bytes(a[1]).Human(), a[2], a[3], a[4])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprintf(w, "(a line per tensor: m2n plan without --summary)\n\nschedules (bytes by path: network / NVLink / local copies)\n")
		return err
	}
	fmt.Fprintln(tw, "point\ttensor\tunique\tneed/dst rank\tregions\ttransfers\tlocal\tegress/src rank\tdigest")
	for _, rec := range out.Tensors {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n",
			rec.Label, rec.Tensor, units.Bytes(rec.UniqueBytes).Human(),
			span(rec.NeedBytesMin, rec.NeedBytesMax), rec.Regions, rec.Transfers, rec.LocalCopies,
			span(rec.EgressBytesMin, rec.EgressBytesMax), rec.Digest[:12])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nschedules (bytes by path: network / NVLink / local copies)\n")
	return err
}

// PlanScheduleRows renders the schedules table of `m2n plan`, aligned,
// without its check column: the header and one row per route, without
// newlines. With check, each ends padded to where the check column starts,
// so that a caller can print a row as its check ends, followed by
// [PlanCheckCell].
func PlanScheduleRows(out PlanOutput, check bool) (head string, rows []string) {
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	end := "\n"
	if check {
		end = "\t\n" // an empty last cell pads the one before it
	}
	fmt.Fprint(tw, "point\troute\tops\ttransfers\tnetwork\tnvlink\tlocal\tmax net egress\tmax net ingress\tmax nvlink egress\tmax staging"+end)
	h := func(v int64) string { return units.Bytes(v).Human() }
	for _, r := range out.Routes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s"+end, r.Label, r.Route, r.Ops, r.Transfers,
			h(r.Bytes.Network), h(r.Bytes.NVLink), h(r.Bytes.Local),
			h(r.MaxEgress.Network), h(r.MaxIngress.Network), h(r.MaxEgress.NVLink), h(r.StagingBytesMax))
	}
	tw.Flush() // a strings.Builder does not fail
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	return lines[0], lines[1:]
}

// PlanCheckCell is the check column of a route: the bytes checked, the
// wrong bytes, or why the check was skipped; "" when none ran.
func PlanCheckCell(r PlanRoute) string {
	switch {
	case r.Skipped != "":
		return "skipped: " + r.Skipped
	case r.Verified == nil:
		return ""
	case *r.Verified:
		return fmt.Sprintf("ok, %s exact", units.Bytes(*r.CheckedBytes).Human())
	}
	return fmt.Sprintf("%d WRONG bytes", *r.WrongBytes)
}

// span writes a min..max byte range, or one value when they are equal.
func span(lo, hi int64) string {
	if lo == hi {
		return units.Bytes(lo).Human()
	}
	return units.Bytes(lo).Human() + " .. " + units.Bytes(hi).Human()
}
