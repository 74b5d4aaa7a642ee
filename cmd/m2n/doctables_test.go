package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// Tables of the docs that commands produce: each lies between the markers
// <!-- table NAME begin --> and <!-- table NAME end -->, and the command
// that regenerates it is `go test ./cmd/m2n -run DocTables -update`. A
// table that no longer matches what the commands print (a preset
// recalibrated, a model changed) fails the test, so the docs never quote an
// older model than the code's.

var docsDir = filepath.Join("..", "..", "docs")

// docTable is a generated table: its file, its name and the function that
// writes it from the commands' output (old: the table as committed, for
// columns that are prose).
type docTable struct {
	file, name string
	gen        func(t *testing.T, old string) string
}

func TestDocTables(t *testing.T) {
	for _, dt := range []docTable{
		{"sim.md", "paper-network", paperNetworkTable},
		{"sim.md", "paper-executor", paperExecutorTable},
		{"calibration.md", "preset-constants", presetConstantsTable},
	} {
		t.Run(dt.name, func(t *testing.T) {
			path := filepath.Join(docsDir, dt.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			doc := string(data)
			begin, end := fmt.Sprintf("<!-- table %s begin -->\n", dt.name), fmt.Sprintf("<!-- table %s end -->", dt.name)
			i, j := strings.Index(doc, begin), strings.Index(doc, end)
			if i < 0 || j < i {
				t.Fatalf("%s: no markers %q ... %q", path, strings.TrimSpace(begin), end)
			}
			old := doc[i+len(begin) : j]
			got := dt.gen(t, old)
			if got == old {
				return
			}
			if *update {
				if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+got+doc[j:]), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			t.Errorf("%s: table %s is out of date (go test ./cmd/m2n -run DocTables -update rewrites it)\ncommitted:\n%s\nnow:\n%s", path, dt.name, old, got)
		})
	}
}

// simRecords runs `m2n sim --json ARGS...` and returns its records by rho
// and route.
func simRecords(t *testing.T, args ...string) map[string]map[string]map[string]any {
	t.Helper()
	stdout, stderr, code := run(t, append([]string{"sim", "--json", "--progress", "never"}, args...)...)
	if code != 0 {
		t.Fatalf("m2n sim %v: exit %d\n%s", args, code, stderr)
	}
	var out struct {
		Records []map[string]any `json:"records"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	recs := map[string]map[string]map[string]any{}
	for _, r := range out.Records {
		rho := fmt.Sprint(r["point"].(map[string]any)["rho"])
		if recs[rho] == nil {
			recs[rho] = map[string]map[string]any{}
		}
		recs[rho][r["route"].(string)] = r
	}
	return recs
}

// paperRows are the paper layer's rows: rho, then route.
var paperRhos, paperRoutes = []string{"2", "4", "8"}, []string{"flat", "hierarchical", "agbcast"}

func ms(v any) string { return fmt.Sprintf("%.2f ms", v.(float64)*1e3) }

// pct is a model error as the docs write it; "" when there is no
// measurement to compare with.
func pct(r map[string]any) string {
	e, ok := r["error"].(float64)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%+.1f%%", 100*e)
}

// paperNetworkTable is `m2n sim paper-ffn-moe` beside the paper's figures.
func paperNetworkTable(t *testing.T, _ string) string {
	recs := simRecords(t, "paper-ffn-moe")
	var b strings.Builder
	b.WriteString("| rho | route | SOL (exact bytes) | modeled | measured | error |\n|---|---|---|---|---|---|\n")
	for _, route := range paperRoutes {
		for _, rho := range paperRhos {
			r := recs[rho][route]
			if r == nil {
				t.Fatalf("no record for rho %s, route %s", rho, route)
			}
			measured := "not measured"
			if m, ok := r["measured_s"].(float64); ok {
				// as precise as the source gives it
				measured = strconv.FormatFloat(m*1e3, 'f', -1, 32) + " ms"
			}
			line := fmt.Sprintf("| %s | %s | %s | %s | %s | %s |\n", rho, route, ms(r["sol_s"]), ms(r["modeled_s"]), measured, pct(r))
			b.WriteString(strings.ReplaceAll(line, "|  |", "| |"))
		}
	}
	return b.String()
}

// paperExecutorTable is the paper layer's errors under the network model,
// then with the embedded preset's executor costs in per-GPU launch.
func paperExecutorTable(t *testing.T, _ string) string {
	net := simRecords(t, "paper-ffn-moe")
	ex := simRecords(t, "--executor", "hgx-h200-measured", "--launch", "per-gpu", "paper-ffn-moe")
	var b strings.Builder
	b.WriteString("| rho | " + strings.Join(paperRoutes, " | ") + " |\n|---|---|---|---|\n")
	for _, rho := range paperRhos {
		b.WriteString("| " + rho + " |")
		for _, route := range paperRoutes {
			a, x := pct(net[rho][route]), pct(ex[rho][route])
			if a == "" {
				b.WriteString(" not measured |")
				continue
			}
			fmt.Fprintf(&b, " %s -> %s |", a, x)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// presetFile is the embedded measured preset the docs describe.
var presetFile = filepath.Join("..", "..", "model", "scenario", "presets", "hgx-h200-measured.toml")

// presetConstantsTable writes the values of the embedded preset into the
// constants table of docs/calibration.md; each row's fit (prose) is kept.
func presetConstantsTable(t *testing.T, old string) string {
	var p struct {
		Topology struct {
			NVLink       string `toml:"nvlink"`
			Memory       string `toml:"memory"`
			LatencyLocal string `toml:"latency_local"`
			Executor     map[string]any
		}
	}
	if _, err := toml.DecodeFile(presetFile, &p); err != nil {
		t.Fatal(err)
	}
	ex := p.Topology.Executor
	mode := func(m string) map[string]any {
		v, ok := ex[m].(map[string]any)
		if !ok {
			t.Fatalf("%s: no [topology.executor.%s]", presetFile, m)
		}
		return v
	}
	one, per := mode("one_process"), mode("per_gpu")
	num := func(k string) string {
		v, ok := ex[k].(float64)
		if !ok {
			t.Fatalf("%s: executor.%s missing", presetFile, k)
		}
		return fmt.Sprintf("%.3f", v)
	}
	str := func(m map[string]any, k string) string {
		v, ok := m[k].(string)
		if !ok {
			t.Fatalf("%s: %s missing", presetFile, k)
		}
		return v
	}
	// ramp is a mode's ramp at 32 and 64 MiB, without units but the last.
	ramp := func(m map[string]any) string {
		bs, _ := m["ramp_bytes"].([]any)
		xs, _ := m["ramp_extra"].([]any)
		at := map[string]string{}
		for i := range min(len(bs), len(xs)) {
			at[fmt.Sprint(bs[i])] = fmt.Sprint(xs[i])
		}
		a, b := at["32 MiB"], at["64 MiB"]
		if a == "" || b == "" {
			t.Fatalf("%s: no ramp at 32 and 64 MiB", presetFile)
		}
		return strings.TrimSuffix(a, " us") + " / " + b
	}
	pair := func(m map[string]any, k1, k2 string) string {
		return strings.TrimSuffix(str(m, k1), " us") + ", " + str(m, k2)
	}
	both := func(k string) [2]string { return [2]string{str(one, k), str(per, k)} }
	values := map[string][2]string{
		"memory":                    {p.Topology.Memory, ""},
		"latency_local":             {p.Topology.LatencyLocal, ""},
		"pack_long / short / stage": {num("pack_long") + " / " + num("pack_short") + " / " + num("pack_stage"), ""},
		"quantize":                  {num("quantize"), ""},
		"quantize_generic":          {num("quantize_generic"), ""},
		"quantize_rows":             {num("quantize_rows"), ""},
		"quantize_split":            {num("quantize_split"), ""},
		"batch_shared":              {num("batch_shared"), ""},
		"nvlink":                    {p.Topology.NVLink, ""},
		"pair_rate":                 both("pair_rate"),
		"duplex_rate":               both("duplex_rate"),
		"copy_rate":                 both("copy_rate"),
		"host_launch, host_event":   {pair(one, "host_launch", "host_event"), pair(per, "host_launch", "host_event")},
		"host_group, host_xfer":     {pair(one, "host_group", "host_xfer"), pair(per, "host_group", "host_xfer")},
		"xfer_latency":              both("xfer_latency"),
		"group_latency":             both("group_latency"),
		"ramp at 32 / 64 MiB":       {ramp(one), ramp(per)},
		"start_latency":             both("start_latency"),
		"box_latency":               both("box_latency"),
	}
	var b strings.Builder
	seen := map[string]bool{}
	for _, line := range strings.SplitAfter(old, "\n") {
		cells := strings.Split(strings.TrimSuffix(line, "\n"), "|")
		// | constant | one process | per GPU | fit |: 6 pieces
		if len(cells) != 6 {
			b.WriteString(line)
			continue
		}
		name := strings.TrimSpace(cells[1])
		v, ok := values[name]
		if !ok {
			b.WriteString(line)
			continue
		}
		seen[name] = true
		fmt.Fprintf(&b, "| %s | %s | %s |%s|\n", name, v[0], v[1], cells[4])
	}
	var missing []string
	for name := range values {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/calibration.md's constants table has no row for %s", strings.Join(missing, ", "))
	}
	return strings.ReplaceAll(b.String(), "|  |", "| |")
}
