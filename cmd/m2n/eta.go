package main

import (
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/sim"
)

// A long simulation says how long it will take: before its first event,
// from the schedule's ops and its route's simulation rate on a 2-core
// machine (simRate), and then every etaEvery from the rate it has shown.
// Short ones (an estimate under etaAnnounce) say nothing, so that
// everyday output is unchanged.

// simRate is how many ops a second m2n simulates, by route, on the 2-core
// VM of docs/performance.md, at scaling-dsv3's 512-GPU point: the first
// estimate, before a simulation's own rate is known. Larger schedules run
// slower per op (their max-min components grow), smaller ones faster.
var simRate = map[string]float64{
	plan.Flat:         21_000,  // dsv3-256: about 1e6 ops in 47 s
	plan.Hierarchical: 40_000,  // 1.1e7 ops in 284 s
	plan.AGBcast:      650_000, // 1.7e7 ops in 26 s
	plan.NemoLegacy:   650_000, // 1.3e7 ops in 19 s
}

const (
	etaAnnounce = 30 * time.Second // estimates from this long on are shown
	etaEvery    = time.Minute      // how often a long simulation reports
)

// wallClock is the clock of the estimates (a variable for tests).
var wallClock = time.Now

// eta follows one simulation's progress and writes its estimates to w.
type eta struct {
	mu       sync.Mutex
	w        io.Writer
	label    string
	route    string
	start    time.Time
	last     time.Time
	long     bool // announced: it reports as it goes
	finished bool
}

func newETA(w io.Writer, label, route string) *eta {
	return &eta{w: w, label: label, route: route}
}

// observe takes a progress report of the simulation.
func (t *eta) observe(p sim.Progress) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := wallClock()
	if t.start.IsZero() {
		t.start, t.last = now, now
		rate := simRate[t.route]
		if rate == 0 || p.Ops == 0 {
			return
		}
		est := time.Duration(float64(p.Ops) / rate * float64(time.Second))
		if est < etaAnnounce {
			return
		}
		t.long = true
		fmt.Fprintf(t.w, "m2n: %s: %s ops to simulate; about %s at this route's rate on a 2-core machine (%s ops/s; slower per op on larger schedules)\n",
			t.label, plan.FormatCount(int64(p.Ops)), roundDuration(est), plan.FormatCount(int64(rate)))
		return
	}
	if p.OpsDone >= p.Ops || t.finished {
		t.finished = true
		return
	}
	// How far it has come: its events (a start and an end per flow),
	// which cost about the same each; ops end in bursts, late.
	done := float64(p.Events) / float64(2*max(p.Flows, 1))
	if now.Sub(t.last) < etaEvery || p.Flows == 0 || done <= 0 || done >= 1 {
		return
	}
	t.last = now
	spent := now.Sub(t.start)
	left := time.Duration(float64(spent) * (1 - done) / done)
	if !t.long && spent+left < etaAnnounce {
		return
	}
	t.long = true
	fmt.Fprintf(t.w, "m2n: %s: %.0f%% of %s flows' events in %s (%v simulated), about %s left\n",
		t.label, 100*done, plan.FormatCount(int64(p.Flows)), roundDuration(spent), units.Time(p.Now), roundDuration(left))
}

// roundDuration writes a duration to a second, or a minute past an hour.
func roundDuration(d time.Duration) string {
	if d >= time.Hour {
		return d.Round(time.Minute).String()
	}
	return time.Duration(math.Max(1, math.Round(d.Seconds())) * float64(time.Second)).String()
}

// simTask starts the task of a simulation job on pr, with estimates when
// pr takes them.
func simTask(pr progress, j simJob) task {
	t := pr.task(j.label())
	if w := pr.estimates(); w != nil {
		return etaTask{t, newETA(w, j.label(), j.route)}
	}
	return t
}

// etaTask adds estimates to a task.
type etaTask struct {
	task
	eta *eta
}

func (t etaTask) sim(p sim.Progress, sol units.Time) {
	t.eta.observe(p)
	t.task.sim(p, sol)
}
