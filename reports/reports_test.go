package reports

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/sim"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// scenarioOf parses a scenario held in the test.
func scenarioOf(t *testing.T, text string) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Parse("test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

const twoSweeps = `
name = "synthetic"
description = "two sweeps: size along the axis, nic as groups"

[topology]
preset = "gb200-nvl72"
domains = 2

[[tensors]]
name = "w"
shape = [16, 8, 4096]
dtype = "bf16"
src = { shape = [16], ranks = "0-15", placements = ["S(0)"] }
dst = { shape = [2, 8], first_rank = 72, placements = ["R", "S(1)"] }

[[sweep]]
name = "size"
values = ["1 MiB", "64 MiB", "4 GiB"]
[sweep.set]
"tensors[0].shape" = [[16, 8, 4096], [64, 128, 4096], [256, 2048, 4096]]

[[sweep]]
name = "nic"
values = ["400 Gb/s", "800 Gb/s"]
[sweep.set]
"topology.nic_line" = ["50 GB/s", "100 GB/s"]
`

// synthetic builds a report over every point of sc and the given routes,
// with made-up but plausible times: SOL = factor x bytes / NIC line rate,
// modeled 10% over it plus 20 us.
func synthetic(t *testing.T, sc *scenario.Scenario, routes ...string) *Report {
	t.Helper()
	pts, err := sc.Points()
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Scenario: sc.Name, Description: sc.Description, Sweeps: sc.Sweeps}
	factor := map[string]float64{"flat": 2, "agbcast": 16, "hierarchical": 1}
	for _, p := range pts {
		var bytes int64
		for _, tn := range p.Tensors {
			bytes += tn.Src.Bytes()
		}
		for _, rt := range routes {
			f := factor[rt]
			if f == 0 {
				f = 3
			}
			sol := f * float64(bytes) / 16 / float64(p.Topology.NICLine)
			rep.Rows = append(rep.Rows, Row{
				Point: p, Route: rt, UniqueBytes: bytes,
				SOL: secs(sol), SOLTerm: "network egress of rank 0",
				Modeled:    secs(sol*1.1 + 20e-6),
				Bottleneck: sim.ResourceStat{Resource: sim.Resource{Name: "gpu0/nic0-egress"}, Utilization: 0.9},
			})
		}
	}
	return rep
}

// secs is a time of v seconds, to the picosecond.
func secs(v float64) units.Time { return units.Time(v*float64(units.Second) + 0.5) }

// noSweep is twoSweeps without its sweeps.
var noSweep = strings.Split(twoSweeps, "[[sweep]]")[0]

// manyValues lists n sweep values, each fmt.Sprintf(format, v): with
// step > 0, v = step, 2 step, ...; else v = 64, 128, 256, ... (the KiB of
// manyShapes' tensors).
func manyValues(n int, format string, step int) string {
	var vs []string
	for i := range n {
		v := step * (i + 1)
		if step == 0 {
			v = 64 << i
		}
		vs = append(vs, fmt.Sprintf(format, v))
	}
	return strings.Join(vs, ", ")
}

// manyShapes lists n bf16 shapes [16, 2^i, 2048]: 64 KiB x 2^i.
func manyShapes(n int) string {
	var vs []string
	for i := range n {
		vs = append(vs, fmt.Sprintf("[16, %d, 2048]", 1<<i))
	}
	return strings.Join(vs, ", ")
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./reports -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./reports -update rewrites it)\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

func TestFormatSeconds(t *testing.T) {
	for _, tc := range []struct {
		s    float64
		sig  int
		want string
	}{
		{0.00939524096, 4, "9.395 ms"},
		{0.01879048192, 4, "18.79 ms"},
		{0.15032385536, 4, "150.3 ms"},
		{2.62144e-6, 4, "2.621 us"},
		{0.99996, 4, "1.000 s"},
		{12.5, 4, "12.50 s"},
		{4e-10, 4, "0.4000 ns"},
		{0, 4, "0 s"},
	} {
		if got := FormatSeconds(tc.s, tc.sig); got != tc.want {
			t.Errorf("FormatSeconds(%v, %d) = %q, want %q", tc.s, tc.sig, got, tc.want)
		}
	}
	for _, tc := range []struct {
		s    float64
		want string
	}{
		{0.010251, "10.251 ms"}, {0.0394, "39.4 ms"}, {0.222065, "222.065 ms"}, {1.5, "1.5 s"}, {0.000012, "12 us"},
	} {
		if got := FormatMeasured(tc.s); got != tc.want {
			t.Errorf("FormatMeasured(%v) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestAxisOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []any
		unit   string
		cat    bool
		log    bool
		x      []float64
	}{
		{"ints that double", []any{int64(2), int64(4), int64(8)}, "", false, true, []float64{2, 4, 8}},
		{"ints evenly spaced", []any{int64(2), int64(4), int64(6)}, "", false, false, []float64{2, 4, 6}},
		{"ints over a decade", []any{int64(1), int64(100)}, "", false, true, []float64{1, 100}},
		{"floats with zero", []any{0.0, 50.0}, "", false, false, []float64{0, 50}},
		{"sizes", []any{"1 MiB", "16 GiB"}, "B", false, true, []float64{1 << 20, 16 << 30}},
		{"bandwidths", []any{"400 Gb/s", "800 Gb/s"}, "B/s", false, false, []float64{50e9, 100e9}},
		{"times", []any{"10us", "1ms"}, "s", false, true, []float64{10e-6, 1e-3}},
		{"names", []any{"gb200-nvl72", "hgx-h200"}, "", true, false, []float64{1, 2}},
		{"mixed", []any{"1 MiB", "fast"}, "", true, false, []float64{1, 2}},
		{"lists", []any{[]any{int64(2), int64(8)}, []any{int64(4), int64(8)}}, "", true, false, []float64{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := AxisOf(scenario.Sweep{Name: "v", Values: tc.values})
			if a.Unit != tc.unit || a.Categorical != tc.cat || a.Log != tc.log {
				t.Errorf("unit %q categorical %v log %v, want %q %v %v", a.Unit, a.Categorical, a.Log, tc.unit, tc.cat, tc.log)
			}
			if len(a.X) != len(tc.x) {
				t.Fatalf("X = %v, want %v", a.X, tc.x)
			}
			for i := range a.X {
				if math.Abs(a.X[i]-tc.x[i]) > 1e-9*math.Abs(tc.x[i]) {
					t.Errorf("X = %v, want %v", a.X, tc.x)
				}
			}
			if len(a.Labels) != len(tc.values) {
				t.Errorf("labels %v", a.Labels)
			}
		})
	}
}

func TestChartLayout(t *testing.T) {
	sc := scenarioOf(t, twoSweeps)
	l := synthetic(t, sc, "flat").ChartLayout()
	if l.Sweep != 0 || l.Axis.Name != "size" || !l.Axis.Log || l.Axis.Unit != "B" {
		t.Errorf("charted along %d %q log %v unit %q; want size, log, B", l.Sweep, l.Axis.Name, l.Axis.Log, l.Axis.Unit)
	}
	if want := []string{"nic=400 Gb/s", "nic=800 Gb/s"}; strings.Join(l.Groups, "|") != strings.Join(want, "|") {
		t.Errorf("groups %q, want %q", l.Groups, want)
	}
	// A categorical first sweep gives way to a numeric second one.
	base := strings.Split(twoSweeps, "[[sweep]]")[0]
	sc2 := scenarioOf(t, base+`
[[sweep]]
key = "topology.preset"
values = ["gb200-nvl72", "gb300-nvl72"]

[[sweep]]
name = "rho"
values = [2, 4]
[sweep.set]
"tensors[0].dst.shape" = [[2, 8], [4, 8]]
`)
	l = synthetic(t, sc2, "flat").ChartLayout()
	if l.Sweep != 1 || l.Axis.Name != "rho" || l.Axis.Log {
		t.Errorf("charted along %d %q (log %v), want 1 rho, linear", l.Sweep, l.Axis.Name, l.Axis.Log)
	}
	if want := "topology.preset=gb200-nvl72|topology.preset=gb300-nvl72"; strings.Join(l.Groups, "|") != want {
		t.Errorf("groups %q, want %q", l.Groups, want)
	}
	// No sweeps: one point, one group.
	one := scenarioOf(t, strings.Split(twoSweeps, "[[sweep]]")[0])
	l = synthetic(t, one, "flat", "hierarchical").ChartLayout()
	if l.Sweep != -1 || len(l.Groups) != 1 || !l.Axis.Categorical {
		t.Errorf("no sweeps: %+v", l)
	}
}

func TestBest(t *testing.T) {
	sc := scenarioOf(t, twoSweeps)
	for _, tc := range []struct {
		routes []string
		want   string
	}{
		{[]string{"flat", "agbcast", "hierarchical"}, "hierarchical"},
		{[]string{"flat", "agbcast"}, "flat"},
		{[]string{"agbcast"}, ""},
	} {
		if got := synthetic(t, sc, tc.routes...).Best(); got != tc.want {
			t.Errorf("Best of %v = %q, want %q", tc.routes, got, tc.want)
		}
	}
}

// The Markdown report of a fixed report is stable; its results table sits
// between the markers.
func TestMarkdownGolden(t *testing.T) {
	rep := synthetic(t, scenarioOf(t, twoSweeps), "flat", "agbcast", "hierarchical")
	rep.Rows[2].Measured, rep.Rows[2].MeasuredSource, rep.Rows[2].MeasuredNote = secs(0.0001), "a bench, run 3", "approximate"
	rep.Rows[0].Measured, rep.Rows[0].MeasuredSource = secs(0.00005), "a bench, run 4"
	rep.Notes = []string{"Made with --chunk \"4 MiB\"."}
	md, err := Markdown(rep)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "synthetic.md", md)
	s := string(md)
	i, j := strings.Index(s, ResultsBegin), strings.Index(s, ResultsEnd)
	if i < 0 || j < i {
		t.Fatalf("results markers missing or out of order")
	}
	if got := strings.Count(s[i:j], "\n| "); got != 1+len(rep.Rows) {
		t.Errorf("results table has %d rows, want a header and %d", got, len(rep.Rows))
	}
	for _, want := range []string{"| 50 us [1] | -54.2% |", "| 100 us [2] | ", "[1] a bench, run 4; [2] a bench, run 3", "Measured hierarchical at size=1 MiB, nic=400 Gb/s: approximate.", "9.40 ms", "sets topology.nic_line", "48 GB/s / 50 GB/s at nic=400 Gb/s; 48 GB/s / 100 GB/s at nic=800 Gb/s"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestCSVRoundTrip(t *testing.T) {
	rep := synthetic(t, scenarioOf(t, twoSweeps), "flat", "hierarchical")
	rep.Rows[1].Measured, rep.Rows[1].MeasuredSource = secs(0.000123), `a "quoted", source`
	data, err := CSV(rep)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatalf("the CSV does not parse: %v", err)
	}
	head := recs[0]
	if want := append([]string{"size", "nic"}, CSVColumns...); strings.Join(head, ",") != strings.Join(want, ",") {
		t.Fatalf("header %v, want %v", head, want)
	}
	if len(recs) != 1+len(rep.Rows) {
		t.Fatalf("%d records, want %d", len(recs), 1+len(rep.Rows))
	}
	col := func(name string) int {
		for i, h := range head {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %q", name)
		return -1
	}
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return v
	}
	for i, row := range rep.Rows {
		rec := recs[i+1]
		if rec[col("size")] != scenario.FormatValue(row.Point.Params[0].Value) || rec[col("route")] != row.Route {
			t.Errorf("record %d: %v", i, rec)
		}
		// Times read back exactly.
		if num(rec[col("sol_s")]) != row.SOL.Seconds() || num(rec[col("modeled_s")]) != row.Modeled.Seconds() {
			t.Errorf("record %d: times %s %s do not read back as %v %v", i, rec[col("sol_s")], rec[col("modeled_s")], row.SOL.Seconds(), row.Modeled.Seconds())
		}
		if ub, _ := strconv.ParseInt(rec[col("unique_bytes")], 10, 64); ub != row.UniqueBytes {
			t.Errorf("record %d: unique_bytes %s", i, rec[col("unique_bytes")])
		}
		if row.HasMeasured() {
			if num(rec[col("measured_s")]) != row.Measured.Seconds() || num(rec[col("error")]) != row.MeasuredError() || rec[col("measured_source")] != row.MeasuredSource {
				t.Errorf("record %d: measured %v", i, rec)
			}
		} else if rec[col("measured_s")] != "" || rec[col("error")] != "" || rec[col("measured_source")] != "" {
			t.Errorf("record %d: measurement cells not empty: %v", i, rec)
		}
	}
	// A sweep named like a fixed column gets a prefix.
	if h := CSVHeader([]scenario.Sweep{{Name: "route"}}); h[0] != "point.route" {
		t.Errorf("header %v", h)
	}
}

// checkPNG decodes a PNG and checks its size.
func checkPNG(t *testing.T, name string, data []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: not a PNG: %v", name, err)
	}
	w := int(math.Round(float64(ChartWidth/vg.Inch) * PNGDPI))
	h := int(math.Round(float64(ChartHeight/vg.Inch) * PNGDPI))
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Errorf("%s: %dx%d pixels, want %dx%d", name, b.Dx(), b.Dy(), w, h)
	}
}

// checkSVG checks that an SVG is well-formed XML with an svg root and
// embedded fonts.
func checkSVG(t *testing.T, name string, data []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(data))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: not well-formed XML: %v", name, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("%s: root element %q, want svg", name, root)
	}
	if !bytes.Contains(data, []byte("@font-face")) {
		t.Errorf("%s: fonts not embedded", name)
	}
}

func TestFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		text   string
		routes []string
	}{
		{"two sweeps", twoSweeps, []string{"flat", "agbcast", "hierarchical"}},
		{"no sweep", strings.Split(twoSweeps, "[[sweep]]")[0], []string{"flat", "hierarchical"}},
		{"one route", twoSweeps, []string{"hierarchical"}},
		{"unknown route colour", twoSweeps, []string{"flat", "legacy"}},
		{"categories", noSweep + "[[sweep]]\nkey = \"topology.preset\"\nvalues = [\"gb200-nvl72\", \"gb300-nvl72\"]\n", []string{"flat", "hierarchical"}},
		{"many bandwidths", noSweep + "[[sweep]]\nkey = \"topology.nic_line\"\nvalues = [" + manyValues(20, `"%d GB/s"`, 10) + "]\n", []string{"flat", "hierarchical"}},
		{"many sizes", noSweep + "[[sweep]]\nname = \"rows\"\nvalues = [" + manyValues(14, "\"%d KiB\"", 0) + "]\n[sweep.set]\n\"tensors[0].shape\" = [" + manyShapes(14) + "]\n", []string{"flat", "hierarchical"}},
		{"many numbers", noSweep + "[[sweep]]\nname = \"rows\"\nvalues = [" + manyValues(14, "%d", 0) + "]\n[sweep.set]\n\"tensors[0].shape\" = [" + manyShapes(14) + "]\n", []string{"flat", "hierarchical"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := synthetic(t, scenarioOf(t, tc.text), tc.routes...)
			files, err := Files(rep)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, f := range files {
				names = append(names, f.Name)
				switch filepath.Ext(f.Name) {
				case ".png":
					checkPNG(t, f.Name, f.Data)
				case ".svg":
					checkSVG(t, f.Name, f.Data)
				}
			}
			want := []string{MarkdownFile, CSVFile, LatencyPNGFile, LatencySVGFile, SpeedupPNGFile, SpeedupSVGFile}
			if strings.Join(names, " ") != strings.Join(want, " ") {
				t.Errorf("files %v, want %v", names, want)
			}
			// Rendering is deterministic.
			again, err := Files(rep)
			if err != nil {
				t.Fatal(err)
			}
			for i := range files {
				if !bytes.Equal(files[i].Data, again[i].Data) {
					t.Errorf("%s differs between two renderings", files[i].Name)
				}
			}
		})
	}
}

// Values a log axis cannot show are left out, never passed to the plotting
// library (whose log scale panics on them).
func TestChartLogAxisZeros(t *testing.T) {
	rep := synthetic(t, scenarioOf(t, twoSweeps), "flat", "hierarchical")
	rep.Rows[0].SOL = 0
	rep.Rows[1].Modeled = 0
	for _, f := range []string{"png", "svg"} {
		if _, err := LatencyChart(rep, f); err != nil {
			t.Errorf("latency %s: %v", f, err)
		}
		if _, err := SpeedupChart(rep, f); err != nil {
			t.Errorf("speedup %s: %v", f, err)
		}
	}
}

func TestBadInput(t *testing.T) {
	good := synthetic(t, scenarioOf(t, twoSweeps), "flat")
	if _, err := LatencyChart(good, "bmp"); err == nil || !strings.Contains(err.Error(), `"bmp"`) {
		t.Errorf("format bmp: %v", err)
	}
	for _, tc := range []struct {
		name   string
		break_ func(r *Report)
		want   string
	}{
		{"no rows", func(r *Report) { r.Rows = nil }, "no rows"},
		{"negative modeled", func(r *Report) { r.Rows[3].Modeled = -units.Second }, "modeled_s = -1"},
		{"negative SOL", func(r *Report) { r.Rows[0].SOL = -units.Second / 2 }, "sol_s = -0.5"},
		{"negative measured", func(r *Report) { r.Rows[0].Measured = -units.Second }, "measured_s = -1"},
		{"no route", func(r *Report) { r.Rows[0].Route = "" }, "no route"},
		{"no point", func(r *Report) { r.Rows[0].Point = nil }, "no point"},
		{"sweeps", func(r *Report) { r.Sweeps = r.Sweeps[:1] }, "2 coordinates but the report has 1 sweeps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := synthetic(t, scenarioOf(t, twoSweeps), "flat")
			tc.break_(rep)
			files, err := Files(rep)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
			if files != nil {
				t.Errorf("files rendered despite the error")
			}
			for _, f := range []func(*Report) ([]byte, error){Markdown, CSV} {
				if b, err := f(rep); err == nil || b != nil {
					t.Errorf("rendered despite the error")
				}
			}
		})
	}
}

func TestTicks(t *testing.T) {
	lt := logTicks{label: formatTick}
	var labels []string
	for _, tk := range lt.Ticks(9e-3, 0.25) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, ","); got != "10 ms,20 ms,50 ms,100 ms,200 ms" {
		t.Errorf("log ticks %s", got)
	}
	for _, r := range [][2]float64{{0, 1}, {-1, 1}, {1, 1}, {2, 1}, {1, math.Inf(1)}} {
		if ts := lt.Ticks(r[0], r[1]); ts != nil {
			t.Errorf("log ticks over %v: %v", r, ts)
		}
	}
	for _, r := range [][2]float64{{1, 1}, {2, 1}, {0, math.Inf(1)}, {math.NaN(), 1}} {
		if ts := (linearTicks{format: plainNumber}).Ticks(r[0], r[1]); ts != nil {
			t.Errorf("linear ticks over %v: %v", r, ts)
		}
	}
	labels = nil
	for _, tk := range (linearTicks{format: plainNumber}).Ticks(0, 191) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, ","); got != "0,25,50,75,100,125,150,175" {
		t.Errorf("linear ticks %s", got)
	}
	labels = nil
	for _, tk := range (linearTicks{format: plainNumber}).Ticks(0, 1.9) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, ","); got != "0.00,0.25,0.50,0.75,1.00,1.25,1.50,1.75" {
		t.Errorf("linear ticks %s", got)
	}
}

// Swept values that double read on a log axis; evenly spaced ones do not.
func TestDoublingAxis(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want bool
	}{
		{[]float64{64, 128, 256, 512}, true},
		{[]float64{512, 64, 256, 128, 128}, true},
		{[]float64{2, 4, 8}, true},
		{[]float64{10, 19, 40}, true},
		{[]float64{10, 18, 40}, false},
		{[]float64{2, 4}, false},
		{[]float64{1, 2, 3}, false},
		{[]float64{100, 200, 300, 400}, false},
		{[]float64{0, 1, 2, 4}, false},
	} {
		if got := doubling(c.xs); got != c.want {
			t.Errorf("doubling(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// A profiled run prints the model's end of each NCCL group beside the
// measured one, with the error of each group's length, in text and JSON.
func TestRunProfileGroupEnds(t *testing.T) {
	ms := units.Millisecond
	row := Row{Route: "flat", Modeled: 3 * ms, ModeledGroupEnds: []units.Time{1 * ms, 3 * ms}, Run: &evaluate.Run{
		Backend: "nccl", Launch: "one-process", Times: []units.Time{4 * ms}, Verified: true, Groups: 2,
		StreamEnds: []evaluate.StreamEnd{{Device: 0, Lane: -1, Stream: "nccl 0", End: 4 * ms}, {Device: 0, Lane: 1, Stream: "lane 1 (batches)", End: 2 * ms}, {Device: 1, Lane: -1, Stream: "nccl 0", End: 4 * ms}},
		GroupEnds:  []units.Time{2 * ms, 4 * ms},
	}}
	var b strings.Builder
	if err := WriteRunTable(&b, "s", "nccl", []Row{row}); err != nil {
		t.Fatal(err)
	}
	// group 0: 1 ms modeled against 2 ms; group 1: 2 ms against 2 ms.
	if want := "modeled (error of each group's length): 1.00 ms (-50.0%) 3.00 ms (+0.0%)"; !strings.Contains(b.String(), want) {
		t.Errorf("the profile lacks %q:\n%s", want, b.String())
	}
	raw, err := json.Marshal(RunJSON("s", []Row{row}))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"group_ends_s":[0.002,0.004],"modeled_group_ends_s":[0.001,0.003]`; !strings.Contains(string(raw), want) {
		t.Errorf("the JSON lacks %s: %s", want, raw)
	}
}

// A profiled run prints the model's end of each stream beside the
// measured one, matched by GPU and lane, with its error; a stream the
// model lacks shows none.
func TestRunProfileStreamEnds(t *testing.T) {
	ms := units.Millisecond
	row := Row{Route: "flat", Modeled: 3 * ms,
		ModeledStreamEnds: []sim.StreamEnd{{GPU: 0, Lane: 1, End: 3 * ms}, {GPU: 0, Lane: -1, End: 3 * ms}, {GPU: 1, Lane: 0, End: ms}},
		Run: &evaluate.Run{Backend: "loopback", Launch: "one-process", Times: []units.Time{4 * ms}, Verified: true,
			StreamEnds: []evaluate.StreamEnd{{Device: 0, Lane: -1, Stream: "nccl 0", End: 4 * ms}, {Device: 0, Lane: 1, Stream: "lane 1 (batches)", End: 2 * ms}, {Device: 1, Lane: -1, Stream: "nccl 0", End: 4 * ms}},
		}}
	var b strings.Builder
	if err := WriteRunTable(&b, "s", "loopback", []Row{row}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"finished  modeled  error", "lane 1 (batches)  2.00 ms   3.00 ms  +50.0%", "nccl 0            4.00 ms   3.00 ms  -25.0%", "1    nccl 0            4.00 ms   -        -"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the profile lacks %q:\n%s", want, b.String())
		}
	}
	raw, err := json.Marshal(RunJSON("s", []Row{row}))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`{"device":0,"lane":1,"stream":"lane 1 (batches)","end_s":0.002,"modeled_end_s":0.003}`, `{"device":1,"lane":-1,"stream":"nccl 0","end_s":0.004}`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the JSON lacks %s: %s", want, raw)
		}
	}
}
