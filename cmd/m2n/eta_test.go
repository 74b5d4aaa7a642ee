package main

import (
	"strings"
	"testing"
	"time"

	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/sim"
)

// A long simulation announces itself before its first event and then
// reports its own rate every etaEvery; a short one says nothing.
func TestETA(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	defer func(c func() time.Time) { wallClock = c }(wallClock)
	wallClock = func() time.Time { return now }

	var long strings.Builder
	ops := int(simRates[plan.Hierarchical][0] * 600) // ten minutes at the slowest rate
	e := newETA(&long, "gpus=512 hierarchical", plan.Hierarchical)
	e.observe(sim.Progress{Ops: ops})
	if got := long.String(); !strings.Contains(got, "gpus=512 hierarchical: 1.8e7 ops to simulate; 12s to 10m0s") {
		t.Errorf("announcement %q", got)
	}
	long.Reset()
	now = now.Add(5 * time.Second)
	e.observe(sim.Progress{Ops: ops, Flows: ops / 2, Events: int64(ops) / 20})
	if long.Len() != 0 {
		t.Errorf("a report before %v passed: %q", etaFirst, long.String())
	}
	now = now.Add(5 * time.Second)
	e.observe(sim.Progress{Ops: ops, OpsDone: ops / 10, Flows: ops / 2, Events: int64(ops) / 4})
	if got := long.String(); !strings.Contains(got, "25% of 9e6 flows' events in 10s") || !strings.Contains(got, "about 30s left") {
		t.Errorf("first report %q", got)
	}
	long.Reset()
	now = now.Add(30 * time.Second)
	e.observe(sim.Progress{Ops: ops, OpsDone: ops / 10, Flows: ops / 2, Events: int64(ops) / 2})
	if long.Len() != 0 {
		t.Errorf("a report within %v of the last: %q", etaEvery, long.String())
	}
	now = now.Add(30 * time.Second)
	e.observe(sim.Progress{Ops: ops, OpsDone: ops / 2, Flows: ops / 2, Events: int64(ops) * 7 / 10})
	if got := long.String(); !strings.Contains(got, "70% of 9e6 flows' events in 1m10s") || !strings.Contains(got, "about 30s left") {
		t.Errorf("report %q", got)
	}
	long.Reset()
	now = now.Add(5 * time.Minute)
	e.observe(sim.Progress{Ops: ops, OpsDone: ops})
	if long.Len() != 0 {
		t.Errorf("a report at the end: %q", long.String())
	}

	// A simulation whose first events are slow: its own rate would say
	// 16m30s left after 10 s, the route's slowest rate 9m50s; once past
	// that, its own rate again.
	var slow strings.Builder
	e = newETA(&slow, "gpus=1024 hierarchical", plan.Hierarchical)
	now = now.Add(time.Minute)
	e.observe(sim.Progress{Ops: ops})
	slow.Reset()
	now = now.Add(10 * time.Second)
	e.observe(sim.Progress{Ops: ops, Flows: 1000, Events: 20})
	if got := slow.String(); !strings.Contains(got, "1% of 1000 flows' events in 10s") || !strings.Contains(got, "about 9m50s left") {
		t.Errorf("capped report %q", got)
	}
	slow.Reset()
	now = now.Add(10*time.Minute + 50*time.Second)
	e.observe(sim.Progress{Ops: ops, Flows: 1000, Events: 40})
	if got := slow.String(); !strings.Contains(got, "2% of 1000 flows' events in 11m0s") || !strings.Contains(got, "about 8h59m0s left") {
		t.Errorf("report past the slowest rate %q", got)
	}

	var short strings.Builder
	s := newETA(&short, "paper-2gpu flat", plan.Flat)
	s.observe(sim.Progress{Ops: 1000})
	now = now.Add(10 * time.Second)
	s.observe(sim.Progress{Ops: 1000, OpsDone: 500, Flows: 600, Events: 600})
	s.observe(sim.Progress{Ops: 1000, OpsDone: 1000})
	if short.Len() != 0 {
		t.Errorf("a short simulation reports: %q", short.String())
	}
}
