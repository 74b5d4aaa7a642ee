package main

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/internal/atomicfile"
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
	var from multiFlag
	fs.Var(&from, "from", "make the report from this file of m2n sim --json records of the same scenario and selection, instead of simulating again (repeatable: a sweep's records split over several files, each point and route in one of them)")
	workers := jobsFlag(fs)
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
	nworkers, err := workersOf(*workers)
	if err != nil {
		return err
	}
	if *outDir == "" {
		return usagef("report: -o DIR is required: the folder to write the report into")
	}
	if *outDir == atomicfile.Stdout {
		return usagef("report: -o -: a report is several files, so it needs a folder, not the standard output")
	}
	if len(pos) > 1 {
		if len(from) > 0 || *asJSON {
			return usagef("report: several scenarios (an overlay) take neither --from nor --json")
		}
		return overlayReport(ctx, e, pos, &sel, *ideal, *outDir, *progressMode, nworkers)
	}
	sc, points, err := sel.load(pos)
	if err != nil {
		return err
	}
	jobs, tpName, err := simJobs(sc, points, &sel)
	if err != nil {
		return err
	}
	if len(from) > 0 {
		recs, skips, err := recordsFrom(from, sc.Name, points, jobs)
		if err != nil {
			return err
		}
		return finishReport(e, sc, recs, skips, tpName, *ideal, &sel, *outDir, *asJSON)
	}
	// A counter of the simulations and a line per running one on a
	// terminal; nothing when stderr is a file or a pipe, or with --json.
	pr := newProgress(e, "report", "simulations", len(jobs), *asJSON, *progressMode)
	defer pr.close()
	recs, skips, err := simulateAll(ctx, jobs, &sel, sim.Options{Ideal: *ideal}, pr, nworkers)
	pr.close()
	if err != nil {
		return err
	}
	return finishReport(e, sc, recs, skips, tpName, *ideal, &sel, *outDir, *asJSON)
}

// recordsFrom reads the records of the selection (jobs: its points and
// routes) from files of m2n sim --json output, each (point, route) in one
// file at most, in the order a simulation of the selection gives them;
// the files' records of other routes are left out.
func recordsFrom(files []string, scenarioName string, points []*scenario.Point, jobs []simJob) ([]evaluate.Record, []evaluate.Skip, error) {
	type key struct {
		point int
		route string
	}
	order := map[key]int{}
	for i, j := range jobs {
		if j.point != nil {
			order[key{j.point.Index, j.route}] = i
		}
	}
	in := map[key]string{} // where each (point, route) was read
	var recs []evaluate.Record
	var skips []evaluate.Skip
	for _, f := range files {
		data, err := readCapped(f, maxSimJSONBytes, "m2n sim --json output")
		if err != nil {
			return nil, nil, fmt.Errorf("--from: %w", err)
		}
		rs, ks, err := reports.RecordsFromJSON(data, scenarioName, points)
		if err != nil {
			return nil, nil, fmt.Errorf("--from %s: %w", f, err)
		}
		// take reports whether the selection holds (p, route), and
		// refuses it read before.
		take := func(p *scenario.Point, route string) (bool, error) {
			k := key{p.Index, route}
			if _, ok := order[k]; !ok {
				return false, nil
			}
			if g, ok := in[k]; ok {
				return false, fmt.Errorf("--from %s: point %s, route %s: in %s too", f, p.Label(), route, g)
			}
			in[k] = f
			return true, nil
		}
		if recs, err = appendTaken(recs, rs, recordAt, take); err != nil {
			return nil, nil, err
		}
		if skips, err = appendTaken(skips, ks, skipAt, take); err != nil {
			return nil, nil, err
		}
	}
	if len(recs) == 0 {
		return nil, nil, fmt.Errorf("--from: no record of the selected routes")
	}
	rank := func(p *scenario.Point, route string) int { return order[key{p.Index, route}] }
	sortBy(recs, recordAt, rank)
	sortBy(skips, skipAt, rank)
	return recs, skips, nil
}

func recordAt(r evaluate.Record) (*scenario.Point, string) { return r.Point, r.Route }
func skipAt(k evaluate.Skip) (*scenario.Point, string)     { return k.Point, k.Route }

// appendTaken appends to out the items of xs that take takes, by their
// point and route (at).
func appendTaken[T any](out, xs []T, at func(T) (*scenario.Point, string), take func(*scenario.Point, string) (bool, error)) ([]T, error) {
	for _, x := range xs {
		ok, err := take(at(x))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, x)
		}
	}
	return out, nil
}

// sortBy sorts xs by the rank of their point and route (at), stably.
func sortBy[T any](xs []T, at func(T) (*scenario.Point, string), rank func(*scenario.Point, string) int) {
	slices.SortStableFunc(xs, func(a, b T) int { return cmp.Compare(rank(at(a)), rank(at(b))) })
}

// finishReport renders and writes the report of the records.
func finishReport(e *env, sc *scenario.Scenario, recs []evaluate.Record, skips []evaluate.Skip, tpName string, ideal bool, sel *selection, outDir string, asJSON bool) error {
	_, files, err := reportFiles(sc, recs, skips, ideal, sel)
	if err != nil {
		return err
	}
	if err := writeReport(outDir, files); err != nil {
		return err
	}
	if asJSON {
		return printJSON(e.stdout, reports.SimJSON(sc.Name, tpName, recs, skips, nil))
	}
	fmt.Fprintf(e.stdout, "report of %s (%d simulations) written to %s:\n", sc.Name, len(recs), outDir)
	for _, f := range files {
		fmt.Fprintf(e.stdout, "  %s\n", filepath.Join(outDir, f.Name))
	}
	return nil
}

// buildReport turns the records into a report, with notes naming any
// selection flags.
func buildReport(sc *scenario.Scenario, recs []evaluate.Record, ideal bool, sel *selection) *reports.Report {
	rep := reports.New(sc, recs, ideal)
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

// writeReport writes the files into dir, creating it if needed, all or
// none of them (atomicfile.WriteAll).
func writeReport(dir string, files []reports.File) error {
	fs := make([]atomicfile.File, len(files))
	for i, f := range files {
		fs[i] = atomicfile.File{Name: f.Name, Data: f.Data}
	}
	if err := atomicfile.WriteAll(dir, fs); err != nil {
		return fmt.Errorf("-o %s: %w", dir, err)
	}
	return nil
}

// reportFiles builds a scenario's report of its records, with a note for
// each route not evaluated, and renders its files.
func reportFiles(sc *scenario.Scenario, recs []evaluate.Record, skips []evaluate.Skip, ideal bool, sel *selection) (*reports.Report, []reports.File, error) {
	rep := buildReport(sc, recs, ideal, sel)
	for _, k := range skips {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Not evaluated: point %s, route %s: %s.", k.Label(), k.Route, k.Reason))
	}
	files, err := renderReport(rep)
	if err != nil {
		return nil, nil, fmt.Errorf("report: %w", err)
	}
	return rep, files, nil
}

// overlayReport reports several scenarios: each one's report in its own
// folder DIR/NAME, and their latency charts on one set of axes in
// DIR/overlay-latency.png and .svg. Everything is simulated and rendered
// before anything is written.
func overlayReport(ctx context.Context, e *env, args []string, sel *selection, ideal bool, outDir, progressMode string, workers int) error {
	type one struct {
		name  string
		files []reports.File
	}
	var all []one
	var reps []*reports.Report
	seen := map[string]bool{}
	for _, arg := range args {
		sc, points, err := sel.load([]string{arg})
		if err != nil {
			return fmt.Errorf("%s: %w", arg, err)
		}
		if seen[sc.Name] {
			return usagef("report: scenario %s given twice", sc.Name)
		}
		seen[sc.Name] = true
		jobs, _, err := simJobs(sc, points, sel)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.Name, err)
		}
		pr := newProgress(e, "report "+sc.Name, "simulations", len(jobs), false, progressMode)
		recs, skips, err := simulateAll(ctx, jobs, sel, sim.Options{Ideal: ideal}, pr, workers)
		pr.close()
		if err != nil {
			return fmt.Errorf("%s: %w", sc.Name, err)
		}
		rep, files, err := reportFiles(sc, recs, skips, ideal, sel)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.Name, err)
		}
		all = append(all, one{sc.Name, files})
		reps = append(reps, rep)
	}
	var overlay []reports.File
	for _, f := range []struct{ name, format string }{{"overlay-latency.png", "png"}, {"overlay-latency.svg", "svg"}} {
		b, err := reports.OverlayLatencyChart(reps, f.format)
		if err != nil {
			return err
		}
		overlay = append(overlay, reports.File{Name: f.name, Data: b})
	}
	for _, o := range all {
		if err := writeReport(filepath.Join(outDir, o.name), o.files); err != nil {
			return err
		}
	}
	if err := writeReport(outDir, overlay); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "reports of %d scenarios written to %s:\n", len(all), outDir)
	for _, o := range all {
		fmt.Fprintf(e.stdout, "  %s/\n", filepath.Join(outDir, o.name))
	}
	for _, f := range overlay {
		fmt.Fprintf(e.stdout, "  %s\n", filepath.Join(outDir, f.Name))
	}
	return nil
}
