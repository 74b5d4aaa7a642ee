package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/native"
)

// A lost peer ends `m2n run --backend nccl` after one timeout: the routes
// left would wait for the same peer, each its own --timeout.
func TestRunStopsAfterLostPeer(t *testing.T) {
	calls := 0
	defer func(f func(*ir.Schedule, native.Options) (*native.Result, error), r func() error) {
		runOnGPU, gpuReady = f, r
	}(runOnGPU, gpuReady)
	gpuReady = func() error { return nil }
	runOnGPU = func(*ir.Schedule, native.Options) (*native.Result, error) {
		calls++
		return nil, fmt.Errorf("%w: the NCCL communicator of 2 ranks did not form within 10s", native.ErrTimeout)
	}
	_, stderr, code := run(t, "run", "--backend", "nccl", "--timeout", "10s", "paper-2gpu")
	if calls != 1 {
		t.Errorf("the executor ran %d times, want 1 (paper-2gpu has 4 routes)", calls)
	}
	if code == 0 || !strings.Contains(stderr, "stopping") || strings.Count(stderr, "did not form") != 1 {
		t.Errorf("exit %d, stderr:\n%s\nwant a non-zero exit, one timeout and the reason for stopping", code, stderr)
	}
	// Any other failure goes on with the next route.
	calls = 0
	runOnGPU = func(*ir.Schedule, native.Options) (*native.Result, error) {
		calls++
		return nil, fmt.Errorf("the schedule needs 900 GiB on GPU 0")
	}
	if _, _, code := run(t, "run", "--backend", "nccl", "paper-2gpu"); calls != 4 || code == 0 {
		t.Errorf("ran %d routes (exit %d), want all 4 and a non-zero exit", calls, code)
	}
}

// The table shows each run's time beside its model, the check, the host's
// issue time and the memory; a run that did not happen says so.
func TestRunTable(t *testing.T) {
	fakeGPU(t)
	stdout, stderr, code := run(t, "run", "--backend", "nccl", "--route", "flat", "paper-2gpu")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"scenario paper-2gpu, backend nccl", "measured (median)", "host issue", "peak memory/GPU",
		"1.00 ms .. 1.00 ms", "hgx-h200-measured", "522 us", "ok, 1 B", "fake"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	// The model's error beside it: modeled / measured - 1.
	m := regexp.MustCompile(`1\.00 ms \.\. 1\.00 ms\s+([0-9.]+) (ms|us)\s+([+-][0-9.]+)%`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no modeled time and error in:\n%s", stdout)
	}
	modeled, _ := strconv.ParseFloat(m[1], 64)
	if m[2] == "us" {
		modeled /= 1000
	}
	m = append(m[:2], m[3:]...)
	errPct, _ := strconv.ParseFloat(m[2], 64)
	if want := 100 * (modeled/1.00 - 1); math.Abs(errPct-want) > 0.6 {
		t.Errorf("error %+.1f%% beside %.2f ms modeled and 1.00 ms measured; want %+.1f%%", errPct, modeled, want)
	}
}
