package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/reports"
	"github.com/m2n-project/m2n/scenarios"
)

// The committed headline assets that `make report` regenerates.
var (
	figuresDir = filepath.Join("..", "..", "docs", "figures")
	readme     = filepath.Join("..", "..", "README.md")
	// figures maps each committed file to the report file it copies.
	figures = map[string]string{
		"paper-results.csv": reports.CSVFile,
		"paper-report.md":   reports.MarkdownFile,
		"paper-latency.png": reports.LatencyPNGFile,
		"paper-latency.svg": reports.LatencySVGFile,
	}
)

func readCSV(t *testing.T, path string) (map[string]int, [][]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	cols := map[string]int{}
	for i, h := range recs[0] {
		cols[h] = i
	}
	return cols, recs[1:]
}

// checkImage decodes a PNG and checks its pixel size, or parses an SVG as
// XML; pixels are never compared (they differ between architectures).
func checkImage(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch filepath.Ext(path) {
	case ".png":
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		w := int(math.Round(float64(reports.ChartWidth) / 72 * reports.PNGDPI))
		h := int(math.Round(float64(reports.ChartHeight) / 72 * reports.PNGDPI))
		if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
			t.Errorf("%s: %dx%d pixels, want %dx%d", path, b.Dx(), b.Dy(), w, h)
		}
	case ".svg":
		d := xml.NewDecoder(bytes.NewReader(data))
		for {
			_, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed XML: %v", path, err)
			}
		}
		if !bytes.Contains(data, []byte("@font-face")) {
			t.Errorf("%s: fonts not embedded", path)
		}
	}
}

// resultsBlock returns the results table of a Markdown document, markers
// included.
func resultsBlock(s string) (string, bool) {
	i := strings.Index(s, reports.ResultsBegin)
	j := strings.Index(s, reports.ResultsEnd)
	if i < 0 || j < i {
		return "", false
	}
	return s[i : j+len(reports.ResultsEnd)], true
}

// TestReportPaper runs `m2n report` on the paper scenario: the SOL column is
// the paper case of docs/sim.md's SOL model under m2n's byte convention,
// the measured column holds the paper's numbers, every file is there and
// sound, and the committed headline assets (docs/figures, the README's
// table) are up to date.
func TestReportPaper(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "paper")
	stdout, stderr, code := run(t, "report", "paper-ffn-moe", "-o", dir)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	for _, name := range []string{reports.MarkdownFile, reports.CSVFile, reports.LatencyPNGFile, reports.LatencySVGFile, reports.SpeedupPNGFile, reports.SpeedupSVGFile} {
		if !strings.Contains(stdout, filepath.Join(dir, name)) {
			t.Errorf("stdout does not name %s:\n%s", name, stdout)
		}
	}

	t.Run("SOL and measured", func(t *testing.T) {
		// The paper's SOL figures (docs/sim.md: flat rho B / (16 B_N),
		// hierarchical B / (16 B_N), agbcast B / B_N), which count 7168 MB
		// as 7.168e9 bytes; m2n counts the 7168 MiB exactly, 1.048576 times
		// more (docs/sim.md, byte convention).
		const mib = 1.048576
		paperSOL := map[string]map[string]float64{
			"flat":         {"2": 17.92e-3, "4": 35.84e-3, "8": 71.68e-3},
			"hierarchical": {"2": 8.96e-3, "4": 8.96e-3, "8": 8.96e-3},
			"agbcast":      {"2": 143.36e-3, "4": 143.36e-3, "8": 143.36e-3},
		}
		paper := map[string]map[string]string{
			"flat":         {"2": "0.020859", "4": "0.0394", "8": "0.077258"},
			"hierarchical": {"2": "0.010251", "4": "0.013834", "8": "0.009775"},
			"agbcast":      {"2": "0.222065", "4": "0.239649", "8": ""},
		}
		cols, recs := readCSV(t, filepath.Join(dir, reports.CSVFile))
		if len(recs) != 9 {
			t.Fatalf("%d records, want 9", len(recs))
		}
		for _, rec := range recs {
			rho, route := rec[cols["rho"]], rec[cols["route"]]
			sol, err := strconv.ParseFloat(rec[cols["sol_s"]], 64)
			if err != nil {
				t.Fatal(err)
			}
			if want := paperSOL[route][rho] * mib; math.Abs(sol/want-1) > 1e-9 {
				t.Errorf("rho %s %s: SOL %v s, want the paper's %v s x 1.048576 = %v s", rho, route, sol, paperSOL[route][rho], want)
			}
			if got, want := rec[cols["measured_s"]], paper[route][rho]; got != want {
				t.Errorf("rho %s %s: measured_s %q, want the paper's %q", rho, route, got, want)
			}
		}
		md, err := os.ReadFile(filepath.Join(dir, reports.MarkdownFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"| 2 | hierarchical | 9.395 ms |", "| 10.251 ms [1] |", "| 39.4 ms [1] |", "| 222.065 ms [2] |",
			"| 8 | flat | 75.16 ms |", "| 2 | agbcast | 150.3 ms |", "8.96 ms", "9.40 ms",
			"| NIC per direction (achievable / line) | 48 GB/s / 50 GB/s |",
		} {
			if !bytes.Contains(md, []byte(want)) {
				t.Errorf("report.md lacks %q", want)
			}
		}
	})

	t.Run("images", func(t *testing.T) {
		for _, name := range []string{reports.LatencyPNGFile, reports.LatencySVGFile, reports.SpeedupPNGFile, reports.SpeedupSVGFile} {
			checkImage(t, filepath.Join(dir, name))
		}
	})

	// The README's headline assets are what `make report` would write now.
	t.Run("committed figures are fresh", func(t *testing.T) {
		for _, fig := range sortedNames(figures) {
			committed := filepath.Join(figuresDir, fig)
			if _, err := os.Stat(committed); err != nil {
				t.Errorf("%v: run make report", err)
				continue
			}
			switch filepath.Ext(fig) {
			case ".png", ".svg":
				checkImage(t, committed)
			default:
				got, _ := os.ReadFile(filepath.Join(dir, figures[fig]))
				want, _ := os.ReadFile(committed)
				if !bytes.Equal(got, want) {
					t.Errorf("%s is stale: run make report (it differs from m2n report's %s)", committed, figures[fig])
				}
			}
		}
		md, _ := os.ReadFile(filepath.Join(dir, reports.MarkdownFile))
		want, ok := resultsBlock(string(md))
		if !ok {
			t.Fatal("report.md has no results table")
		}
		rd, err := os.ReadFile(readme)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := resultsBlock(string(rd))
		if !ok {
			t.Fatalf("README.md has no results table between %s and %s: run make report", reports.ResultsBegin, reports.ResultsEnd)
		}
		if got != want {
			t.Errorf("README.md's results table is stale: run make report\n--- README ---\n%s\n--- m2n report ---\n%s", got, want)
		}
	})
}

func TestReportJSON(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := run(t, "report", "--json", "--route", "flat,hierarchical", "--point", "rho=2", "paper-ffn-moe", "-o", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out struct {
		Scenario string `json:"scenario"`
		Records  []struct {
			Route    string   `json:"route"`
			Measured *float64 `json:"measured_s"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("stdout is not the JSON of m2n sim --json: %v\n%s", err, stdout)
	}
	if out.Scenario != "paper-ffn-moe" || len(out.Records) != 2 || out.Records[1].Route != "hierarchical" || out.Records[1].Measured == nil {
		t.Errorf("records %+v", out)
	}
	// The same records as m2n sim prints.
	simOut, _, _ := run(t, "sim", "--json", "--route", "flat,hierarchical", "--point", "rho=2", "paper-ffn-moe")
	if simOut != stdout {
		t.Errorf("m2n report --json differs from m2n sim --json")
	}
	md, _ := os.ReadFile(filepath.Join(dir, reports.MarkdownFile))
	if !bytes.Contains(md, []byte("Made with --route flat,hierarchical, --point rho=2.")) {
		t.Errorf("report.md does not name the selection:\n%s", md)
	}
	if stderr != "" {
		t.Errorf("stderr not quiet on a non-terminal: %q", stderr)
	}
}

// A failed report writes nothing: not when the input is bad, not when
// rendering fails, not when one file cannot be put in place.
func TestReportNothingWritten(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"sweep over a missing key", []string{"testdata/scenarios/sweep-bad-key.toml"}, 1, `no key "nic_speed" here`},
		{"sweep value of the wrong type", []string{"testdata/scenarios/sweep-bad-type.toml"}, 1, "incompatible types"},
		{"sweep value without a unit", []string{"testdata/scenarios/sweep-bad-unit.toml"}, 1, `bandwidth "50": unknown unit`},
		{"no such point", []string{"--point", "rho=3", "paper-ffn-moe"}, 2, "matches no sweep point"},
		{"bad scale", []string{"--scale", "2", "paper-ffn-moe"}, 2, "--scale"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			_, stderr, code := run(t, append([]string{"report", "-o", dir}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.code, tc.want)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists after a failure (%v)", dir, err)
			}
		})
	}

	t.Run("rendering fails", func(t *testing.T) {
		defer func(f func(*reports.Report) ([]reports.File, error)) { renderReport = f }(renderReport)
		renderReport = func(*reports.Report) ([]reports.File, error) { return nil, errors.New("the chart broke") }
		dir := filepath.Join(t.TempDir(), "out")
		_, stderr, code := run(t, "report", "--point", "rho=2", "--route", "flat", "paper-ffn-moe", "-o", dir)
		if code != 1 || !strings.Contains(stderr, "report: the chart broke") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after a failure (%v)", dir, err)
		}
	})

	t.Run("folder is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		os.WriteFile(file, []byte("x"), 0o644)
		for _, dir := range []string{file, filepath.Join(file, "sub")} {
			_, stderr, code := run(t, "report", "--point", "rho=2", "--route", "flat", "paper-ffn-moe", "-o", dir)
			if code != 1 || !strings.Contains(stderr, "-o "+dir+": cannot create the folder") {
				t.Errorf("-o %s: exit %d, stderr %q", dir, code, stderr)
			}
		}
		if b, _ := os.ReadFile(file); string(b) != "x" {
			t.Errorf("the file was changed")
		}
	})

	t.Run("one file cannot be replaced", func(t *testing.T) {
		dir := t.TempDir()
		old := filepath.Join(dir, reports.MarkdownFile)
		os.WriteFile(old, []byte("old report"), 0o644)
		os.Mkdir(filepath.Join(dir, reports.SpeedupSVGFile), 0o755) // a folder where a file goes
		_, stderr, code := run(t, "report", "--point", "rho=2", "--route", "flat", "paper-ffn-moe", "-o", dir)
		if code != 1 || !strings.Contains(stderr, reports.SpeedupSVGFile) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if strings.Join(names, " ") != reports.MarkdownFile+" "+reports.SpeedupSVGFile {
			t.Errorf("the folder holds %v; want only what was there", names)
		}
		if b, _ := os.ReadFile(old); string(b) != "old report" {
			t.Errorf("report.md was replaced: %q", b)
		}
	})
}

func TestReportCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var o, e bytes.Buffer
	dir := filepath.Join(t.TempDir(), "out")
	if code := Main(ctx, []string{"report", "paper-ffn-moe", "-o", dir}, &o, &e); code != 1 || !strings.Contains(e.String(), "context canceled") {
		t.Errorf("exit %d: %s", code, e.String())
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists after a failure", dir)
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) || isTerminal(&bytes.Buffer{}) {
		t.Errorf("a file or a buffer taken for a terminal")
	}
}

// Every scenario shipped for the report charts has a report, quickly.
func TestReportShippedSweeps(t *testing.T) {
	for _, name := range []string{"nvl72-domains", "tensor-size", "nic-400g-800g", "paper-hgx-h200"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			// Scaled down to keep the test fast; the full run is `make` work.
			_, stderr, code := run(t, "report", "--scale", "0.0625", "--chunk", "16 MiB", name, "-o", dir)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			checkImage(t, filepath.Join(dir, reports.LatencyPNGFile))
			md, _ := os.ReadFile(filepath.Join(dir, reports.MarkdownFile))
			if !bytes.Contains(md, []byte("Tensors scaled down (--scale 0.0625")) {
				t.Errorf("report.md does not say the tensors were scaled")
			}
		})
	}
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// A report made from m2n sim --json's records is the report m2n report
// makes by simulating: the same report.md, results.csv and charts.
func TestReportFromSimJSON(t *testing.T) {
	dir := t.TempDir()
	simOut, stderr, code := run(t, "sim", "--json", "paper-ffn-moe")
	if code != 0 {
		t.Fatalf("sim: exit %d: %s", code, stderr)
	}
	recs := filepath.Join(dir, "sim.json")
	if err := os.WriteFile(recs, []byte(simOut), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if _, stderr, code := run(t, "report", "--from", recs, "-o", a, "paper-ffn-moe"); code != 0 {
		t.Fatalf("report --from: exit %d: %s", code, stderr)
	}
	if _, stderr, code := run(t, "report", "-o", b, "paper-ffn-moe"); code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	sameReport(t, a, b, "report --from and report")
	if _, stderr, code := run(t, "report", "--from", recs, "-o", filepath.Join(dir, "c"), "tensor-size"); code == 0 || !strings.Contains(stderr, `of scenario "paper-ffn-moe", not "tensor-size"`) {
		t.Errorf("records of another scenario: exit %d: %s", code, stderr)
	}
	// The records split over files, by route and point, in another order:
	// the same report.
	var parts []string
	for i, sel := range [][]string{
		{"--route", "hierarchical,agbcast", "--point", "rho=8"},
		{"--route", "flat,nemo-legacy"}, // nemo-legacy: not the scenario's, left out
		{"--route", "agbcast,hierarchical", "--point", "rho=2", "--point", "rho=4"},
	} {
		out, stderr, code := run(t, append(append([]string{"sim", "--json"}, sel...), "paper-ffn-moe")...)
		if code != 0 {
			t.Fatalf("sim %v: exit %d: %s", sel, code, stderr)
		}
		parts = append(parts, filepath.Join(dir, fmt.Sprintf("part%d.json", i)))
		if err := os.WriteFile(parts[i], []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := filepath.Join(dir, "d")
	if _, stderr, code := run(t, "report", "--from", parts[0], "--from", parts[1], "--from", parts[2], "-o", d, "paper-ffn-moe"); code != 0 {
		t.Fatalf("report --from x3: exit %d: %s", code, stderr)
	}
	sameReport(t, d, b, "report --from three files and report")
	// A point and route in two files is an error naming both.
	if _, stderr, code := run(t, "report", "--from", parts[0], "--from", recs, "-o", filepath.Join(dir, "e"), "paper-ffn-moe"); code == 0 || !strings.Contains(stderr, "point rho=8, route agbcast: in "+parts[0]+" too") {
		t.Errorf("a record twice: exit %d: %s", code, stderr)
	}
}

// sameReport fails t where the reports in folders a and b differ.
func sameReport(t *testing.T, a, b, what string) {
	t.Helper()
	for _, f := range []string{"report.md", "results.csv", "latency.svg", "speedup.svg"} {
		x, err1 := os.ReadFile(filepath.Join(a, f))
		y, err2 := os.ReadFile(filepath.Join(b, f))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between %s (%v, %v)", f, what, err1, err2)
		}
	}
}

// Several scenarios: each one's report in its own folder, and their
// latency charts on one set of axes; axes that differ are an error.
func TestReportOverlay(t *testing.T) {
	dir := t.TempDir()
	data, ok := scenarios.Lookup("paper-ffn-moe")
	if !ok {
		t.Fatal("no paper-ffn-moe")
	}
	other := filepath.Join(dir, "other.toml")
	if err := os.WriteFile(other, bytes.Replace(data, []byte(`name = "paper-ffn-moe"`), []byte(`name = "other"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if _, stderr, code := run(t, "report", "--scale", "0.01", "--route", "flat,hierarchical", "-o", out, "paper-ffn-moe", other); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	checkImage(t, filepath.Join(out, "overlay-latency.png"))
	for _, f := range []string{"overlay-latency.svg", "paper-ffn-moe/report.md", "other/latency.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if _, stderr, code := run(t, "report", "--scale", "0.01", "-o", filepath.Join(dir, "bad"), "paper-ffn-moe", "tensor-size"); code == 0 || !strings.Contains(stderr, "the axes differ") {
		t.Errorf("axes that differ: exit %d: %s", code, stderr)
	}
}
