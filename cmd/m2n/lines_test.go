package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/m2n-project/m2n/sim"
)

// The line's estimate: running tasks from the share of their events done,
// queued ones at the mean finished task, over the tasks running at once.
func TestProgressLine(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	defer func(f func() time.Time) { wallClock = f }(wallClock)
	now := t0
	wallClock = func() time.Time { return now } // when the simulations report
	lp := &lineProgress{command: "sim", what: "simulations", total: 5, start: t0, running: map[*lineTask]bool{}}
	a := &lineTask{p: lp, label: "rho=2 flat", start: t0}
	lp.running[a] = true
	if got, want := lp.line(t0.Add(10*time.Second)), "m2n sim: 0 of 5 simulations done, 10s so far, no estimate yet (running: rho=2 flat)"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// a is half way at 10 s: 20 s a task; 4 queued after it.
	now = t0.Add(10 * time.Second)
	a.sim(sim.Progress{Events: 50, Flows: 50}, 0)
	if got, want := lp.line(t0.Add(10*time.Second)), "m2n sim: 0 of 5 simulations done, 10s so far, about 1m30s left (running: rho=2 flat 50% of its events)"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// Two finished in 20 s and 40 s (mean 30 s); two running, one a quarter
	// through after 10 s (30 s left), one not reporting after 10 s (20 s
	// left at the mean); one queued (30 s): 80 s over 2 at once.
	lp.running = map[*lineTask]bool{}
	lp.done, lp.doneTime = 2, 60*time.Second
	b := &lineTask{p: lp, label: "rho=4 flat", start: t0.Add(50 * time.Second)}
	c := &lineTask{p: lp, label: "rho=4 agbcast", start: t0.Add(50 * time.Second)}
	lp.running[b], lp.running[c] = true, true
	now = t0.Add(60 * time.Second)
	b.sim(sim.Progress{Events: 25, Flows: 50}, 0)
	if got, want := lp.line(t0.Add(60*time.Second)), "m2n sim: 2 of 5 simulations done, 1m0s so far, about 40s left (running: rho=4 agbcast; rho=4 flat 25% of its events)"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// 20 s on without a report from b: its estimate stands (40 s in all,
	// 10 s left of it), c at the mean (none left), the queued one's 30 s:
	// 40 s over the two running.
	if got, want := lp.line(t0.Add(80*time.Second)), "m2n sim: 2 of 5 simulations done, 1m20s so far, about 20s left (running: rho=4 agbcast; rho=4 flat 25% of its events)"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// A task of a route with rates: its estimate is at most what the
	// route's slowest rate leaves (a minute's ops at it), until that has
	// passed.
	lp.running, lp.done, lp.doneTime, lp.total = map[*lineTask]bool{}, 0, 0, 1
	d := &lineTask{p: lp, label: "gpus=1024 hierarchical", route: "hierarchical", start: t0.Add(100 * time.Second)}
	lp.running[d] = true
	now = t0.Add(100 * time.Second)
	ops := int(simRates["hierarchical"][0] * 60)
	d.sim(sim.Progress{Ops: ops}, 0)
	now = t0.Add(110 * time.Second)
	d.sim(sim.Progress{Ops: ops, Events: 1, Flows: 50}, 0)
	if got, want := lp.line(now), "m2n sim: 0 of 1 simulations done, 1m50s so far, about 50s left (running: gpus=1024 hierarchical 1% of its events)"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	now = t0.Add(170 * time.Second)
	d.sim(sim.Progress{Ops: ops, Events: 2, Flows: 50}, 0)
	if got, want := lp.line(now), "m2n sim: 0 of 1 simulations done, 2m50s so far, about 57m10s left (running: gpus=1024 hierarchical 2% of its events)"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// Off a terminal, a long command writes a progress line every
// progressEvery; --progress never writes none.
func TestProgressLinesOffTerminal(t *testing.T) {
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = 5 * time.Millisecond
	for _, mode := range []string{"auto", "never"} {
		var stderr bytes.Buffer
		if code := Main(t.Context(), []string{"sim", "--progress", mode, "paper-ffn-moe"}, new(bytes.Buffer), &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s", mode, code, stderr.String())
		}
		lines := strings.Count(stderr.String(), "m2n sim: ")
		if mode == "auto" && lines == 0 || mode == "never" && lines != 0 {
			t.Errorf("--progress %s: %d progress lines:\n%s", mode, lines, stderr.String())
		}
	}
	var stderr bytes.Buffer
	if code := Main(t.Context(), []string{"sim", "--progress", "sometimes", "paper-ffn-moe"}, new(bytes.Buffer), &stderr); code != 2 || !strings.Contains(stderr.String(), `--progress "sometimes"`) {
		t.Errorf("a bad --progress: exit %d: %s", code, stderr.String())
	}
}
