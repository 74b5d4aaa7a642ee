package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/plan/hostexec"
	"github.com/m2n-project/m2n/plan/ir"
)

// planRegionRecord is the regions summary of one tensor at one sweep point.
// docs/cli.md documents every field.
type planRegionRecord struct {
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
}

// classBytes is a byte count per path class.
type classBytes struct {
	Network int64 `json:"network"`
	NVLink  int64 `json:"nvlink"`
	Local   int64 `json:"local"`
}

func byClass(v [3]int64) classBytes {
	return classBytes{Network: v[ir.Net], NVLink: v[ir.NVLink], Local: v[ir.Local]}
}

// planRouteRecord is the schedule summary of one route at one sweep point.
type planRouteRecord struct {
	Point           map[string]any `json:"point"`
	Route           string         `json:"route"`
	ChunkBytes      int64          `json:"chunk_bytes"`
	UniqueBytes     int64          `json:"unique_bytes"`
	Ops             int            `json:"ops"`
	Transfers       int            `json:"transfers"`
	Bytes           classBytes     `json:"bytes"`
	MaxEgress       classBytes     `json:"max_egress_bytes"`
	MaxIngress      classBytes     `json:"max_ingress_bytes"`
	StagingBytesMax int64          `json:"staging_bytes_max"`
	Verified        *bool          `json:"verified,omitempty"`
	CheckedBytes    int64          `json:"checked_bytes,omitempty"`
	WrongBytes      int64          `json:"wrong_bytes,omitempty"`

	label string
}

type planOutput struct {
	Scenario string             `json:"scenario"`
	Tensors  []planRegionRecord `json:"tensors"`
	Routes   []planRouteRecord  `json:"routes"`
}

// checkFailed is the error of a --check that found wrong bytes: exit 3.
type checkFailed struct{ msg string }

func (e checkFailed) Error() string { return e.msg }
func (checkFailed) ExitCode() int   { return exitMismatch }

func runPlan(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "plan", "[flags] [SCENARIO]",
		`Derive, for every tensor and sweep point, the exact regions each destination
rank needs and which source rank supplies each; build and verify the schedule
of each route; print a summary of both.`)
	asJSON := fs.Bool("json", false, "print JSON on stdout (fields in docs/cli.md)")
	irFile := fs.String("ir", "", "write the schedule IR as JSON to this file (needs one route and one point)")
	check := fs.Bool("check", false, "run each schedule on the host reference executor and check every destination byte")
	var sel selection
	sel.register(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	sc, points, err := sel.load(pos)
	if err != nil {
		return err
	}
	if *irFile != "" {
		n := 0
		for _, p := range points {
			rs, err := sel.routesOf(p)
			if err != nil {
				return err
			}
			n += len(rs)
		}
		if n != 1 {
			return usagef("--ir writes one schedule, but %d would be planned; pick one with --route and --point", n)
		}
	}
	out := planOutput{Scenario: sc.Name, Tensors: []planRegionRecord{}, Routes: []planRouteRecord{}}
	var labels []string
	var irSchedules []*ir.Schedule
	failed := 0
	for _, p := range points {
		for _, t := range p.Tensors {
			r, err := plan.Derive(t.Src, t.Dst)
			if err != nil {
				return fmt.Errorf("point %s, tensor %s: %w", p.Label(), t.Name, err)
			}
			st := r.Stats()
			d := r.Digest()
			out.Tensors = append(out.Tensors, planRegionRecord{
				Point: p.Map(), Tensor: t.Name, Src: t.Src.String(), Dst: t.Dst.String(),
				UniqueBytes: st.UniqueBytes, NeedBytesMin: st.NeedMin, NeedBytesMax: st.NeedMax,
				Regions: st.Contributions, Transfers: st.Transfers, LocalCopies: st.LocalCopies,
				TransferBytes: st.TransferBytes, LocalBytes: st.LocalBytes,
				EgressBytesMin: st.EgressMin, EgressBytesMax: st.EgressMax,
				Digest: hex.EncodeToString(d[:]),
			})
			labels = append(labels, p.Label())
		}
		routes, err := sel.routesOf(p)
		if err != nil {
			return err
		}
		var unique int64
		for _, t := range p.Tensors {
			unique += t.Src.Bytes()
		}
		for _, route := range routes {
			if err := ctx.Err(); err != nil {
				return err
			}
			s, err := sel.build(p, route)
			if err != nil {
				return err
			}
			st := s.Stats()
			rec := planRouteRecord{
				Point: p.Map(), Route: route, ChunkBytes: s.ChunkBytes, UniqueBytes: unique,
				Ops: st.Ops, Transfers: st.Transfers,
				Bytes: byClass(st.Bytes), MaxEgress: byClass(st.MaxEgress), MaxIngress: byClass(st.MaxIngress),
				StagingBytesMax: st.MaxStaging, label: p.Label(),
			}
			if *check {
				res, err := hostexec.Run(s, hostexec.Options{Seed: 1})
				if err != nil {
					return fmt.Errorf("point %s, route %s: --check: %w", p.Label(), route, err)
				}
				ok := res.Wrong == 0
				rec.Verified, rec.CheckedBytes, rec.WrongBytes = &ok, res.Bytes, res.Wrong
				if !ok {
					failed++
					fmt.Fprintf(e.stderr, "m2n: point %s, route %s: %d wrong bytes; first: %s\n", p.Label(), route, res.Wrong, res.FirstWrong)
				}
			}
			out.Routes = append(out.Routes, rec)
			if *irFile != "" {
				irSchedules = append(irSchedules, s)
			}
		}
	}
	if *irFile != "" {
		if err := encodeFileAtomic("--ir", *irFile, func(w io.Writer) error { return ir.Encode(w, irSchedules[0]) }); err != nil {
			return err
		}
	}
	if *asJSON {
		if err := printJSON(e.stdout, out); err != nil {
			return err
		}
	} else if err := printPlan(e, sc.Name, sc.Description, out, labels, *check); err != nil {
		return err
	}
	if failed > 0 {
		return checkFailed{fmt.Sprintf("--check: %d schedules delivered wrong bytes", failed)}
	}
	return nil
}

func printPlan(e *env, name, desc string, out planOutput, labels []string, check bool) error {
	fmt.Fprintf(e.stdout, "scenario %s: %s\n\nregions\n", name, desc)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "point\ttensor\tunique\tneed/dst rank\tregions\ttransfers\tlocal\tegress/src rank\tdigest")
	for i, rec := range out.Tensors {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n",
			labels[i], rec.Tensor, units.Bytes(rec.UniqueBytes).Human(),
			span(rec.NeedBytesMin, rec.NeedBytesMax), rec.Regions, rec.Transfers, rec.LocalCopies,
			span(rec.EgressBytesMin, rec.EgressBytesMax), rec.Digest[:12])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nschedules (bytes by path: network / NVLink / local copies)\n")
	tw = tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	head := "point\troute\tops\ttransfers\tnetwork\tnvlink\tlocal\tmax net egress\tmax net ingress\tmax nvlink egress\tmax staging"
	if check {
		head += "\tcheck"
	}
	fmt.Fprintln(tw, head)
	for _, r := range out.Routes {
		h := func(v int64) string { return units.Bytes(v).Human() }
		line := fmt.Sprintf("%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s", r.label, r.Route, r.Ops, r.Transfers,
			h(r.Bytes.Network), h(r.Bytes.NVLink), h(r.Bytes.Local),
			h(r.MaxEgress.Network), h(r.MaxIngress.Network), h(r.MaxEgress.NVLink), h(r.StagingBytesMax))
		if r.Verified != nil {
			if *r.Verified {
				line += fmt.Sprintf("\tok, %s exact", h(r.CheckedBytes))
			} else {
				line += fmt.Sprintf("\t%d WRONG bytes", r.WrongBytes)
			}
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// span writes a min..max byte range, or one value when they are equal.
func span(lo, hi int64) string {
	if lo == hi {
		return units.Bytes(lo).Human()
	}
	return units.Bytes(lo).Human() + " .. " + units.Bytes(hi).Human()
}
