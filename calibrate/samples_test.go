package calibrate

import (
	"bytes"
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/model/topo"
)

// simulatedInput is a calibration of the truth's simulator in a launch
// mode, with its provenance.
func simulatedInput(t *testing.T, launch topo.Launch) Input {
	t.Helper()
	in := measure(t, truth(), launch)
	in.Command, in.Date, in.Machine = "m2n calibrate --samples s.json", "2026-11-30T00:00:00Z", "simulated"
	return in
}

// A run's raw samples read back as they were measured, and fit to the
// same preset, byte for byte: a preset can be re-derived from them.
func TestSamplesRoundTrip(t *testing.T) {
	for _, launch := range []topo.Launch{topo.OneProcess, topo.PerGPU} {
		in := simulatedInput(t, launch)
		var buf bytes.Buffer
		if err := WriteSamples(&buf, in); err != nil {
			t.Fatal(err)
		}
		got, err := ReadSamples(buf.Bytes())
		if err != nil {
			t.Fatalf("%v: %v", launch, err)
		}
		if !reflect.DeepEqual(got, in) {
			t.Fatalf("%v: read back differs:\n%+v\nwant\n%+v", launch, got, in)
		}
		preset := func(in Input) string {
			f, err := Fitting(in)
			if err != nil {
				t.Fatal(err)
			}
			p := topology()
			Apply(p, f)
			var b bytes.Buffer
			if err := WritePreset(&b, "x", "y", "hgx-h200", p, Merge(nil, f)); err != nil {
				t.Fatal(err)
			}
			return b.String()
		}
		if a, b := preset(in), preset(got); a != b {
			t.Errorf("%v: the fit of the samples read back differs", launch)
		}
		var again bytes.Buffer
		if err := WriteSamples(&again, got); err != nil || again.String() != buf.String() {
			t.Errorf("%v: written twice, the documents differ (%v)", launch, err)
		}
	}
}

// Each bad document is refused, naming what is wrong.
func TestReadSamplesRefuses(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSamples(&buf, simulatedInput(t, topo.OneProcess)); err != nil {
		t.Fatal(err)
	}
	good := buf.String()
	for _, c := range []struct{ name, from, to, want string }{
		{"version", `"version": 1`, `"version": 2`, "version = 2"},
		{"launch", `"launch": "one-process"`, `"launch": "two"`, `launch = "two"`},
		{"gpus", `"gpus_per_process": 2`, `"gpus_per_process": 0`, "gpus_per_process = 0"},
		{"unknown field", `"version": 1`, `"version": 1, "extra": 3`, "unknown field"},
		{"unsorted", `"times_ps": [`, `"times_ps": [9999999999999, `, "sorted"},
		{"negative", `"times_ps": [`, `"times_ps": [-1, `, "positive"},
		{"zero", `"times_ps": [`, `"times_ps": [0, `, "positive"},
		{"per GPU over two", `"launch": "one-process"`, `"launch": "per-gpu"`, "gpus_per_process = 2"},
		{"empty", "", "", "benches.copy.times_ps: 0 times"},
		{"box class", `"long-runs"`, `"medium-runs"`, "boxes.medium-runs"},
		{"trailing", "", "", "after the document"},
		{"generic quantize bytes", `"bytes": 503480320`, `"bytes": 0`, "quantize_generic.bytes = 0"},
		{"generic quantize times", `"quantize_generic": {
    "ps": [`, `"quantize_generic": {
    "ps": [0, `, "quantize_generic.ps"},
		{"row quantize bytes", `"bytes": 503382016`, `"bytes": 0`, "quantize_rows.bytes = 0"},
		{"split quantize bytes", `"bytes": 503316484`, `"bytes": 0`, "quantize_split.bytes = 0"},
		{"split quantize times", `"quantize_split": {
    "ps": [`, `"quantize_split": {
    "ps": [0, `, "quantize_split.ps"},
		{"row quantize times", `"quantize_rows": {
    "ps": [`, `"quantize_rows": {
    "ps": [0, `, "quantize_rows.ps"},
	} {
		doc := strings.Replace(good, c.from, c.to, 1)
		switch c.name {
		case "trailing":
			doc = good + "{}"
		case "empty":
			doc = `{"version": 1, "launch": "per-gpu", "gpus_per_process": 1, "benches": {"copy": {"times_ps": []}}}`
		}
		if doc == good && c.name != "trailing" {
			t.Fatalf("%s: the replacement did not apply", c.name)
		}
		_, err := ReadSamples([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}

// Any document is read or refused, never a panic; what is read writes
// back to a document that reads the same.
func FuzzReadSamples(f *testing.F) {
	f.Add([]byte(`{"version": 1, "launch": "per-gpu", "gpus_per_process": 1, "benches": {"copy": {"times_ps": [1, 2]}}}`))
	f.Add([]byte(`{"version": 1, "launch": "one-process", "gpus_per_process": 2, "boxes": {"staged": {"pack_ps": [3], "unpack_ps": [4], "copy_ps": [5]}}, "quantize_ps": [7], "quantize_bytes": 9}`))
	f.Add([]byte(`{"version": 1}`))
	f.Add([]byte(`{"version": 1, "launch": "one-process", "gpus_per_process": 2, "quantize_generic": {"ps": [5, 6], "bytes": 9}}`))
	f.Add([]byte(`{"version": 1, "launch": "one-process", "gpus_per_process": 2, "quantize_rows": {"ps": [5, 6], "bytes": 9}}`))
	f.Add([]byte(`{"version": 1, "launch": "one-process", "gpus_per_process": 2, "quantize_split": {"ps": [5, 6], "bytes": 9}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ReadSamples(data)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteSamples(&buf, in); err != nil {
			t.Fatal(err)
		}
		again, err := ReadSamples(buf.Bytes())
		if err != nil {
			t.Fatalf("written back, refused: %v\n%s", err, buf.String())
		}
		if !reflect.DeepEqual(again, in) {
			t.Fatalf("written back, read differently")
		}
	})
}

var update = flag.Bool("update", false, "rewrite testdata/samples-*.json")

// The raw samples of a calibration of the simulated truth, as files:
// their format is a contract (docs/calibration.md), and the command's
// tests fit from them (`go test ./calibrate -update` rewrites them).
func TestSamplesGolden(t *testing.T) {
	for _, launch := range []topo.Launch{topo.OneProcess, topo.PerGPU} {
		var buf bytes.Buffer
		if err := WriteSamples(&buf, simulatedInput(t, launch)); err != nil {
			t.Fatal(err)
		}
		path := "testdata/samples-" + launch.String() + ".json"
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./calibrate -update writes it)", err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("%s differs from what a calibration of the truth writes now (go test ./calibrate -update)", path)
		}
	}
}

// A document that reads but no run of the benches could give (a copy's
// host issue as long as the copy) is refused by the fit, naming the bench.
func TestFitRefusesImpossibleSamples(t *testing.T) {
	in := simulatedInput(t, topo.OneProcess)
	s := in.Samples["copy"]
	s.HostIssue = s.Times[len(s.Times)-1] * 2
	in.Samples["copy"] = s
	if _, err := Fitting(in); err == nil || !strings.Contains(err.Error(), "bench copy") {
		t.Errorf("fit of a copy issued longer than it ran: %v, want an error naming the bench", err)
	}
}
