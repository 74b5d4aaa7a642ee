package main

import (
	"context"
	"fmt"
	"io"

	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/plan/hostexec"
	"github.com/m2n-project/m2n/plan/ir"
	"github.com/m2n-project/m2n/reports"
)

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
	fileOnStdout, err := toStdout(*asJSON, "--ir", *irFile)
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
	out := reports.PlanOutput{Scenario: sc.Name, Description: sc.Description, Tensors: []reports.PlanTensor{}, Routes: []reports.PlanRoute{}}
	var irSchedules []*ir.Schedule
	failed := 0
	for _, p := range points {
		for _, t := range p.Tensors {
			r, err := plan.Derive(t.Src, t.Dst)
			if err != nil {
				return fmt.Errorf("point %s, tensor %s: %w", p.Label(), t.Name, err)
			}
			out.Tensors = append(out.Tensors, reports.NewPlanTensor(p, t.Name, r))
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
			rec := reports.NewPlanRoute(p, s)
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
		if err := encodeFileAtomic(e.stdout, "--ir", *irFile, func(w io.Writer) error { return ir.Encode(w, irSchedules[0]) }); err != nil {
			return err
		}
	}
	if fileOnStdout {
		// stdout holds the schedule alone
	} else if *asJSON {
		if err := printJSON(e.stdout, out); err != nil {
			return err
		}
	} else if err := reports.WritePlanTable(e.stdout, out, *check); err != nil {
		return err
	}
	if failed > 0 {
		return checkFailed{fmt.Sprintf("--check: %d schedules delivered wrong bytes", failed)}
	}
	return nil
}
