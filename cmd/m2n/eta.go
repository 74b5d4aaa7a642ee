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
// from the schedule's ops and the range of rates its route has shown on a
// 2-core machine (simRates); etaFirst in, from the rate it has shown
// itself; and every etaEvery after. Short ones (under etaAnnounce at the
// slowest rate, and done before etaFirst) say nothing, so that everyday
// output is unchanged.
//
// Its own rate is counted in events, and a whole-model simulation's first
// events cost the most (they run while most of its flows share the ports:
// scaling-qwen3-235b at 1,024 GPUs said "about 7h26m0s left" 1m42s before
// it ended). So until the route's slowest rate would have finished (when
// the simulation is slower than any measured, it says so by going on), an
// estimate says at most what that rate leaves (slowestEnd).

// simRates is the slowest and fastest ops a second m2n has simulated, by
// route, on the 2-core VM of docs/performance.md (the scaling-dsv3,
// scaling-qwen3-235b and dsv3-256 points): how fast a schedule goes depends on how many flows
// share its ports, which its op count does not tell.
var simRates = map[string][2]float64{
	plan.Flat:         {10_000, 21_000},    // dsv3-256: about 1e6 ops in 47 s
	plan.Hierarchical: {30_000, 1_500_000}, // scaling-qwen3-235b: 1.9e7 ops in 557 s at 512 GPUs; scaling-dsv3: 4.7e7 in 32 s at 2,048
	plan.AGBcast:      {300_000, 700_000},  // 1.7e7 ops in 26 s at 512 GPUs
	plan.NemoLegacy:   {300_000, 700_000},  // 1.3e7 ops in 19 s at 512 GPUs
}

const (
	etaAnnounce = 30 * time.Second // estimates from this long on are shown
	etaFirst    = 10 * time.Second // when a simulation first estimates from its own rate
	etaEvery    = time.Minute      // then how often
)

// wallClock is the clock of the estimates (a variable for tests).
var wallClock = time.Now

// slowestEnd is when a simulation of ops ops that started at start ends at
// its route's slowest rate (simRates); zero where the route has none.
func slowestEnd(route string, ops int, start time.Time) time.Time {
	rates, ok := simRates[route]
	if !ok || ops <= 0 {
		return time.Time{}
	}
	return start.Add(time.Duration(float64(ops) / rates[0] * float64(time.Second)))
}

// capLeft is left, at most what remains at now until end (slowestEnd)
// while end is ahead.
func capLeft(left time.Duration, now, end time.Time) time.Duration {
	if !end.IsZero() && now.Before(end) {
		return min(left, end.Sub(now))
	}
	return left
}

// eta follows one simulation's progress and writes its estimates to w.
type eta struct {
	mu       sync.Mutex
	w        io.Writer
	label    string
	route    string
	start    time.Time
	last     time.Time
	slowest  time.Time // when the route's slowest rate would end it (slowestEnd)
	long     bool      // announced: it reports as it goes
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
		t.start, t.last = now, now.Add(etaFirst-etaEvery)
		t.slowest = slowestEnd(t.route, p.Ops, now)
		rates, ok := simRates[t.route]
		if !ok || p.Ops == 0 {
			return
		}
		at := func(rate float64) time.Duration { return time.Duration(float64(p.Ops) / rate * float64(time.Second)) }
		slow, fast := at(rates[0]), at(rates[1])
		if slow < etaAnnounce {
			return
		}
		t.long = true
		fmt.Fprintf(t.w, "m2n: %s: %s ops to simulate; %s to %s at this route's rates on a 2-core machine (its own rate in %s)\n",
			t.label, plan.FormatCount(int64(p.Ops)), roundDuration(fast), roundDuration(slow), etaFirst)
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
	left := capLeft(time.Duration(float64(spent)*(1-done)/done), now, t.slowest)
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
	if lt, ok := t.(*lineTask); ok {
		lt.route = j.route
	}
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
