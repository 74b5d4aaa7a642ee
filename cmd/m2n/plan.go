package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime/debug"

	"github.com/m2n-project/m2n/hostexec"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/reports"
)

// checkFailed is the error of a --check that found wrong bytes: exit 3.
type checkFailed struct{ msg string }

func (e checkFailed) Error() string { return e.msg }
func (checkFailed) ExitCode() int   { return exitMismatch }

// hostRun is hostexec.Run; a variable so that tests can watch the checks.
var hostRun = hostexec.Run

func runPlan(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "plan", "[flags] [SCENARIO]",
		`Derive, for every tensor and sweep point, the exact regions each destination
rank needs and which source rank supplies each; build and verify the schedule
of each route; print a summary of both.`)
	asJSON := fs.Bool("json", false, "print JSON on stdout (fields in docs/cli.md)")
	irFile := fs.String("ir", "", "write the schedule IR as JSON to this file (needs one route and one point)")
	check := fs.Bool("check", false, "run each schedule on the host reference executor and check every destination byte")
	summary := fs.Bool("summary", false, "regions: a line per point, its tensors summed, instead of a line per tensor")
	var sel selection
	sel.register(fs)
	progressMode := progressFlag(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := checkProgress(*progressMode); err != nil {
		return err
	}
	fileOnStdout, err := toStdout(*asJSON, "--ir", *irFile)
	if err != nil {
		return err
	}
	sc, points, err := sel.load(pos)
	if err != nil {
		return err
	}
	defer sel.showProgress(e, points, *asJSON || *check, *progressMode)()
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
	out := reports.PlanOutput{Scenario: sc.Name, Description: sc.Description, Tensors: []reports.PlanTensor{}, Routes: []reports.PlanRoute{}, Summary: *summary}
	// Every schedule is built (fast) before any is checked (slow), so that
	// the table's columns are known and each check's row can be printed as
	// it ends.
	var scheds []*ir.Schedule // with --check or --ir
	for _, p := range points {
		for _, t := range p.Tensors {
			dst := t.Dst
			dst.DType = t.Src.DType                                // a quantized destination: the regions of its elements
			r, err := plan.DeriveLimit(t.Src, dst, sel.opsLimit()) // --max-ops bounds the regions too
			if err != nil {
				return fmt.Errorf("point %s, tensor %s: %w", p.Label(), t.Name, err)
			}
			r.Dst.DType = t.Dst.DType // shown as asked: fp8_e4m3 where quantized
			rec := planTensor(p, t.Name, r)
			if t.Quant.On() {
				// What each destination holds is fp8: its need in the
				// destination dtype; and the scale tensor's own row.
				src, dstSize := t.Src.DType.Size(), t.Dst.DType.Size()
				rec.NeedBytesMin, rec.NeedBytesMax = rec.NeedBytesMin/src*dstSize, rec.NeedBytesMax/src*dstSize
				out.Tensors = append(out.Tensors, rec)
				srec, err := scaleRow(p, t)
				if err != nil {
					return fmt.Errorf("point %s, tensor %s: %w", p.Label(), t.Name, err)
				}
				out.Tensors = append(out.Tensors, srec)
				continue
			}
			out.Tensors = append(out.Tensors, rec)
		}
		routes, err := sel.routesOf(p)
		if err != nil {
			return err
		}
		for _, route := range routes {
			if err := ctx.Err(); err != nil {
				return err
			}
			s, err := sel.build(p, route)
			if err != nil {
				return err
			}
			out.Routes = append(out.Routes, reports.NewPlanRoute(p, s))
			if *check || *irFile != "" {
				scheds = append(scheds, s)
			}
		}
	}
	table := !fileOnStdout && !*asJSON
	failed := 0
	if *check {
		// A check holds up to the executor's limit in buffers; a soft
		// memory limit a little above it (unless GOMEMLIMIT sets one) keeps
		// the garbage of one check from doubling the peak.
		if prev := debug.SetMemoryLimit(-1); prev == math.MaxInt64 {
			debug.SetMemoryLimit(hostexec.DefaultMaxBytes + 512<<20)
			defer debug.SetMemoryLimit(prev)
		}
		var head string
		var rows []string
		if table {
			if err := reports.WritePlanRegions(e.stdout, out); err != nil {
				return err
			}
			head, rows = reports.PlanScheduleRows(out, true)
			fmt.Fprintln(e.stdout, head+"check")
		}
		for i := range out.Routes {
			if err := ctx.Err(); err != nil {
				return err
			}
			rec := &out.Routes[i]
			wrong, err := checkSchedule(rec, scheds[i])
			if err != nil {
				return fmt.Errorf("point %s, route %s: --check: %w", rec.Label, rec.Route, err)
			}
			if wrong != "" {
				failed++
				fmt.Fprintf(e.stderr, "m2n: point %s, route %s: %d wrong bytes; first: %s\n", rec.Label, rec.Route, *rec.WrongBytes, wrong)
			}
			if table {
				fmt.Fprintln(e.stdout, rows[i]+reports.PlanCheckCell(*rec))
			}
		}
	}
	if *irFile != "" {
		if err := encodeFileAtomic(e.stdout, "--ir", *irFile, func(w io.Writer) error { return ir.Encode(w, scheds[0]) }); err != nil {
			return err
		}
	}
	switch {
	case *asJSON:
		if err := printJSON(e.stdout, out); err != nil {
			return err
		}
	case table && !*check: // with --check, printed as the checks ran
		if err := reports.WritePlanTable(e.stdout, out, false); err != nil {
			return err
		}
	}
	if failed > 0 {
		return checkFailed{fmt.Sprintf("--check: %d schedules delivered wrong bytes", failed)}
	}
	return nil
}

// checkSchedule runs a schedule on the host reference executor and records
// the result in rec: verified, with the bytes checked and wrong, or skipped,
// with why, when its buffers exceed the executor's limit. It returns where
// the first wrong byte is, if any.
func checkSchedule(rec *reports.PlanRoute, s *ir.Schedule) (firstWrong string, err error) {
	res, err := hostRun(s, hostexec.Options{Seed: 1})
	var tl *hostexec.TooLargeError
	if errors.As(err, &tl) {
		rec.Skipped = fmt.Sprintf("buffers need %s, over the host executor's %s limit; shrink with --scale",
			units.Bytes(tl.Need).Human(), units.Bytes(tl.Limit).Human())
		return "", nil
	}
	if err != nil {
		return "", err
	}
	ok := res.Wrong == 0
	rec.Verified, rec.CheckedBytes, rec.WrongBytes = &ok, &res.Bytes, &res.Wrong
	return res.FirstWrong, nil
}

// planTensor summarizes the regions of one tensor at a point (here, not in
// reports, which never imports the planner).
func planTensor(p *scenario.Point, tensor string, r *plan.Regions) reports.PlanTensor {
	st := r.Stats()
	d := r.Digest()
	return reports.PlanTensor{
		Point: p.Map(), Tensor: tensor, Src: r.Src.String(), Dst: r.Dst.String(),
		UniqueBytes: st.UniqueBytes, NeedBytesMin: st.NeedMin, NeedBytesMax: st.NeedMax,
		Regions: st.Contributions, Transfers: st.Transfers, LocalCopies: st.LocalCopies,
		TransferBytes: st.TransferBytes, LocalBytes: st.LocalBytes,
		EgressBytesMin: st.EgressMin, EgressBytesMax: st.EgressMax,
		Digest: hex.EncodeToString(d[:]), Label: p.Label(),
	}
}

// scaleRow is the regions row of a quantized tensor's scale tensor: moved
// from the source's scales where the source holds whole blocks (quantized
// there), else computed where the destination needs them (nothing moves).
func scaleRow(p *scenario.Point, t scenario.Tensor) (reports.PlanTensor, error) {
	land, err := layout.LandingLayout(t.Dst, t.Quant)
	if err != nil {
		return reports.PlanTensor{}, err
	}
	dsl, err := layout.ScaleLayout(land, t.Quant)
	if err != nil {
		return reports.PlanTensor{}, err
	}
	ssl := dsl
	if l, err := layout.ScaleLayout(t.Src, t.Quant); err == nil {
		ssl = l
		ssl.DType = layout.FP32
	}
	r, err := plan.Derive(ssl, dsl)
	if err != nil {
		return reports.PlanTensor{}, err
	}
	return planTensor(p, plan.ScaleName(t.Name, t.Quant), r), nil
}
