package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/reports"
	"github.com/m2n-project/m2n/sim"
)

// renderReport renders a report in memory; a variable so that tests can
// make it fail.
var renderReport = reports.Files

func runReport(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "report", "[flags] [SCENARIO] -o DIR",
		`Simulate every route at every sweep point and write a report into DIR
(created if missing): report.md (SOL, modeled and measured time per point
and route, with the topology constants used), results.csv (the same data,
exact), and the charts latency.png/.svg and speedup.png/.svg.
Everything is rendered before any file is written, and the files replace
their old versions together.`)
	asJSON := fs.Bool("json", false, "print the simulation records as JSON on stdout, as m2n sim --json does")
	ideal := fs.Bool("ideal", false, "line rates and zero latencies: the conditions of the SOL bound")
	outDir := fs.String("o", "", "the folder to write the report into (required; created if missing)")
	var sel selection
	sel.register(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if *outDir == "" {
		return usagef("report: -o DIR is required: the folder to write the report into")
	}
	sc, points, err := sel.load(pos)
	if err != nil {
		return err
	}
	out := simOutput{Scenario: sc.Name}
	jobs, tpName, err := simJobs(sc, points, &sel)
	if err != nil {
		return err
	}
	out.Topology = tpName
	// A progress line on a terminal, rewritten in place and cleared at the
	// end; nothing when stderr is a file or a pipe.
	var progress func(done, total int, j simJob)
	if isTerminal(e.stderr) {
		progress = func(done, total int, j simJob) {
			fmt.Fprintf(e.stderr, "\r\x1b[Km2n report: simulated %d of %d (%s, %s)", done, total, j.point.Label(), j.route)
		}
	}
	recs, err := simulateAll(ctx, jobs, &sel, sim.Options{Ideal: *ideal}, progress)
	if progress != nil {
		fmt.Fprint(e.stderr, "\r\x1b[K")
	}
	if err != nil {
		return err
	}
	out.Records = recs
	rep := buildReport(sc, jobs, recs, *ideal, &sel)
	files, err := renderReport(rep)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := writeReport(*outDir, files); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, out)
	}
	fmt.Fprintf(e.stdout, "report of %s (%d simulations) written to %s:\n", sc.Name, len(recs), *outDir)
	for _, f := range files {
		fmt.Fprintf(e.stdout, "  %s\n", filepath.Join(*outDir, f.Name))
	}
	return nil
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// simulateAll runs the jobs on as many workers as there are CPUs and
// returns their records in job order. On a failure it starts no more jobs
// and returns the error of the first failed job in job order, which does
// not depend on timing: every job before it was started, and ran to its
// end. progress, if set, is called after each job, never concurrently.
func simulateAll(ctx context.Context, jobs []simJob, sel *selection, opt sim.Options, progress func(done, total int, j simJob)) ([]simRecord, error) {
	recs := make([]simRecord, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var mu sync.Mutex
	done, failed := 0, false
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rec, _, _, err := jobs[i].run(sel, opt)
				mu.Lock()
				recs[i], errs[i] = rec, err
				failed = failed || err != nil
				done++
				if progress != nil && err == nil {
					progress(done, len(jobs), jobs[i])
				}
				mu.Unlock()
			}
		}()
	}
	var ctxErr error
	for i := range jobs {
		mu.Lock()
		stop := failed
		mu.Unlock()
		if stop {
			break
		}
		if ctxErr = ctx.Err(); ctxErr != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if ctxErr != nil {
		return nil, ctxErr
	}
	return recs, nil
}

// buildReport turns the simulation records into a report: one row per
// record, the sweeps cut to the values of the points simulated, and notes
// naming any selection flags.
func buildReport(sc *scenario.Scenario, jobs []simJob, recs []simRecord, ideal bool, sel *selection) *reports.Report {
	rep := &reports.Report{Scenario: sc.Name, Description: sc.Description, Ideal: ideal}
	for i, rec := range recs {
		j := jobs[i]
		row := reports.Row{
			Point:                 j.point,
			Route:                 rec.Route,
			UniqueBytes:           rec.UniqueBytes,
			SOLSeconds:            rec.SOLSeconds,
			SOLTerm:               rec.SOLTerm,
			ModeledSeconds:        rec.Modeled,
			Bottleneck:            rec.Bottleneck.Resource,
			BottleneckUtilization: rec.Bottleneck.Utilization,
		}
		if rec.Measured != nil {
			row.MeasuredSeconds, row.MeasuredSource = *rec.Measured, rec.Source
			for _, ref := range j.refs { // as simJob.run: the last match is the one shown
				if ref.Route == j.route && ref.Matches(j.point) {
					row.MeasuredNote = ref.Note
				}
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	for k, sw := range sc.Sweeps {
		kept := sw
		kept.Values = nil
		for _, v := range sw.Values {
			for _, j := range jobs {
				if scenario.ValueEqual(j.point.Params[k].Value, v) {
					kept.Values = append(kept.Values, v)
					break
				}
			}
		}
		rep.Sweeps = append(rep.Sweeps, kept)
	}
	var flags []string
	if ideal {
		flags = append(flags, "--ideal")
	}
	if sel.routes != "" {
		flags = append(flags, "--route "+sel.routes)
	}
	for _, p := range sel.points {
		flags = append(flags, "--point "+p)
	}
	if sel.chunk != "" {
		flags = append(flags, fmt.Sprintf("--chunk %q", sel.chunk))
	}
	if sel.stagingCap != "" {
		flags = append(flags, fmt.Sprintf("--staging-cap %q", sel.stagingCap))
	}
	if sel.scale != 1 {
		flags = append(flags, fmt.Sprintf("--scale %g", sel.scale))
		rep.Notes = append(rep.Notes, fmt.Sprintf("Tensors scaled down (--scale %g: dim 0 of every tensor multiplied by %g, rounded up), so the reference measurements, made at full size, are not shown.", sel.scale, sel.scale))
	}
	if len(flags) > 0 {
		rep.Notes = append(rep.Notes, "Made with "+strings.Join(flags, ", ")+".")
	}
	return rep
}

// writeReport writes the files into dir, creating it if needed. Every file
// is first written in full to a temporary name beside its place; only when
// all are written are they renamed into place, so a failure leaves the old
// files (if any) as they were and nothing half written.
func writeReport(dir string, files []reports.File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-o %s: cannot create the folder: %w", dir, err)
	}
	for _, f := range files {
		if fi, err := os.Lstat(filepath.Join(dir, f.Name)); err == nil && fi.IsDir() {
			return fmt.Errorf("-o %s: cannot write %s there: a folder of that name is in the way", dir, f.Name)
		}
	}
	var tmps []string
	cleanup := func() {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	for _, f := range files {
		tmp, err := stageFile(dir, f.Name, f.Data)
		if err != nil {
			cleanup()
			return fmt.Errorf("-o %s: cannot write %s there: %w", dir, f.Name, err)
		}
		tmps = append(tmps, tmp)
	}
	for i, f := range files {
		if err := os.Rename(tmps[i], filepath.Join(dir, f.Name)); err != nil {
			cleanup()
			return fmt.Errorf("-o %s: cannot write %s there: %w", dir, f.Name, err)
		}
	}
	return nil
}
