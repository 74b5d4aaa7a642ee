package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/native"
)

// fakeGPU replaces the executor with one that reports a verified run of
// 1 ms, and restores it at the end of the test.
func fakeGPU(t *testing.T) {
	t.Helper()
	saved, savedReady := runOnGPU, gpuReady
	t.Cleanup(func() { runOnGPU, gpuReady = saved, savedReady })
	gpuReady = func() error { return nil }
	runOnGPU = func(s *ir.Schedule, _ native.Options) (*native.Result, error) {
		return &native.Result{Times: []units.Time{units.Millisecond}, Verified: true, CheckedBytes: 1, Device: "fake", Mode: "fake", Ops: len(s.Ops)}, nil
	}
}

type runJSONOut struct {
	Records []struct {
		Route    string  `json:"route"`
		Measured float64 `json:"measured_s"`
		Modeled  float64 `json:"modeled_s"`
		SOL      float64 `json:"sol_s"`
		Error    string  `json:"error"`
	} `json:"records"`
}

// m2n run models the schedule it ran as m2n sim does: the same simulated
// time and SOL.
func TestRunModelsAsSim(t *testing.T) {
	fakeGPU(t)
	stdout, stderr, code := run(t, "run", "--json", "--backend", "nccl", "--route", "flat,hierarchical", "paper-2gpu")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got runJSONOut
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	simOut, _, _ := run(t, "sim", "--json", "--route", "flat,hierarchical", "paper-2gpu")
	var want struct {
		Records []struct {
			Modeled float64 `json:"modeled_s"`
			SOL     float64 `json:"sol_s"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(simOut), &want); err != nil {
		t.Fatal(err)
	}
	if len(got.Records) != 2 || len(want.Records) != 2 {
		t.Fatalf("%d run records, %d sim records", len(got.Records), len(want.Records))
	}
	for i, r := range got.Records {
		if r.Modeled != want.Records[i].Modeled || r.SOL != want.Records[i].SOL || r.Modeled <= 0 || r.Measured != 1e-3 || r.Error != "" {
			t.Errorf("%s: modeled %v sol %v measured %v error %q; m2n sim: modeled %v sol %v", r.Route, r.Modeled, r.SOL, r.Measured, r.Error, want.Records[i].Modeled, want.Records[i].SOL)
		}
	}
}

// A run whose schedule has no SOL bound (a route m2n does not know, read
// from a file) keeps its measurement, says why it has no model, and fails.
func TestRunModelError(t *testing.T) {
	fakeGPU(t)
	path := filepath.Join(t.TempDir(), "s.json")
	if _, stderr, code := run(t, "plan", "--ir", path, "--route", "flat", "testdata/scenarios/uneven.toml"); code != 0 {
		t.Fatalf("plan --ir: exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), `"route":"flat"`, `"route":"teleport"`, 1))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run(t, "run", "--json", "--backend", "nccl", "--ir", path, "--topology", "hgx-h200")
	var got runJSONOut
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if code != exitError || len(got.Records) != 1 || got.Records[0].Measured != 1e-3 || got.Records[0].Modeled != 0 ||
		!strings.Contains(got.Records[0].Error, `modeling the run: SOL bound: unknown route "teleport"`) || !strings.Contains(stderr, "could not run or be modeled") {
		t.Errorf("exit %d, records %+v, stderr:\n%s", code, got.Records, stderr)
	}
	// The same schedule in m2n sim is an error, not a zero SOL.
	if _, stderr, code := run(t, "sim", "--ir", path, "--topology", "hgx-h200"); code != exitError || !strings.Contains(stderr, "SOL bound") {
		t.Errorf("m2n sim: exit %d: %s", code, stderr)
	}
}

// The executor-model flags of sim need a measured machine, and name what
// is wrong.
func TestSimModelFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--loopback", "paper-2gpu"}, "--loopback"},
		{[]string{"sim", "--launch", "per-gpu", "paper-2gpu"}, "need --model or --executor"},
		{[]string{"sim", "--model", "hgx-h200-measured", "--launch", "both", "paper-2gpu"}, `--launch "both"`},
		{[]string{"sim", "--executor", "gb200-nvl72", "paper-2gpu"}, "has no executor costs"},
		{[]string{"sim", "--model", "nope", "paper-2gpu"}, "--model"},
	} {
		_, stderr, code := run(t, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error naming %q", tc.args, code, stderr, tc.want)
		}
	}
	// Per GPU, the paper layer's flat route models faster than in one
	// process (each process issues for its own GPU).
	one, _, c1 := run(t, "sim", "--json", "--model", "hgx-h200-measured", "--route", "flat", "paper-2gpu")
	per, _, c2 := run(t, "sim", "--json", "--model", "hgx-h200-measured", "--launch", "per-gpu", "--route", "flat", "paper-2gpu")
	if c1 != 0 || c2 != 0 || one == per {
		t.Errorf("one process and per GPU: exits %d, %d; same output: %v", c1, c2, one == per)
	}
}

// m2n calibrate without a GPU says so.
func TestCalibrateNeedsGPU(t *testing.T) {
	_, stderr, code := run(t, "calibrate")
	if code == 0 || !strings.Contains(stderr, "calibrate") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// A preset fitted again from the raw samples of both launch modes' runs,
// without a GPU: every constant accounted for by its record, the
// per-GPU copy rate among them, and the model runs on it.
func TestCalibrateFromSamples(t *testing.T) {
	p := filepath.Join(t.TempDir(), "p.toml")
	for _, args := range [][]string{
		{"calibrate", "--from-samples", "../../calibrate/testdata/samples-one-process.json", "--out", p},
		{"calibrate", "--from-samples", "../../calibrate/testdata/samples-per-gpu.json", "--into", p, "--out", p},
	} {
		_, stderr, code := run(t, args...)
		if code != 0 || strings.Contains(stderr, "warning") {
			t.Fatalf("%v: exit %d, stderr %s", args, code, stderr)
		}
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\ncopy_rate = "); n != 2 {
		t.Errorf("%d copy rates in the preset, want one per launch mode", n)
	}
	for _, want := range []string{`constant = "executor.per_gpu.copy_rate"`, "fitted again by m2n calibrate --from-samples samples-per-gpu.json"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the preset lacks %s:\n%s", want, data)
		}
	}
	if _, stderr, code := run(t, "sim", "--model", p, "--launch", "per-gpu", "--transport", "copy", "paper-2gpu"); code != 0 {
		t.Errorf("sim on the refitted preset: exit %d, %s", code, stderr)
	}
}

// Under a launcher, a refit from samples is refused: every rank would
// write the same preset.
func TestCalibrateFromSamplesNotUnderALauncher(t *testing.T) {
	for k, v := range map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"} {
		t.Setenv(k, v)
	}
	_, stderr, code := run(t, "calibrate", "--from-samples", "../../calibrate/testdata/samples-one-process.json", "--out", filepath.Join(t.TempDir(), "p.toml"))
	if code == 0 || !strings.Contains(stderr, "not under") {
		t.Errorf("exit %d, stderr %q; want a refusal", code, stderr)
	}
}

// m2n sim --group-ends prints each NCCL group's modeled end: ascending,
// the last no later than the modeled time; without the flag, none.
func TestSimGroupEnds(t *testing.T) {
	for _, flag := range []bool{true, false} {
		var doc struct {
			Records []struct {
				Route     string    `json:"route"`
				Modeled   float64   `json:"modeled_s"`
				GroupEnds []float64 `json:"modeled_group_ends_s"`
			} `json:"records"`
		}
		args := []string{"sim", "--model", "hgx-h200-measured", "--json", "--route", "flat,agbcast", "paper-2gpu"}
		if flag {
			args = append(args, "--group-ends")
		}
		out, errOut, code := run(t, args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		for _, r := range doc.Records {
			if !flag {
				if r.GroupEnds != nil {
					t.Errorf("%s: group ends %v without --group-ends", r.Route, r.GroupEnds)
				}
				continue
			}
			if len(r.GroupEnds) == 0 || !slices.IsSorted(r.GroupEnds) || r.GroupEnds[len(r.GroupEnds)-1] > r.Modeled {
				t.Errorf("%s: group ends %v, modeled %g s: want ascending ends, the last no later than the modeled time", r.Route, r.GroupEnds, r.Modeled)
			}
		}
	}
}
