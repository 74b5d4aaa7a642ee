package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/sim"
)

// Progress off a terminal (a log file, CI, a pipe): a line at most every
// progressEvery, from progressEvery on, saying how many tasks are done,
// the time so far and an estimate of what is left; nothing for a command
// done sooner, so everyday output is unchanged.

// progressEvery is how often lineProgress writes (a variable for tests).
var progressEvery = 10 * time.Second

// Progress modes (--progress).
const (
	progressAuto   = "auto"   // bars on a terminal, lines elsewhere
	progressAlways = "always" // lines, on a terminal too
	progressNever  = "never"  // nothing
)

// lineProgress writes progress lines to w.
type lineProgress struct {
	w             io.Writer
	command, what string
	total         int
	start         time.Time

	mu       sync.Mutex
	done     int
	doneTime time.Duration // the finished tasks' durations, summed
	running  map[*lineTask]bool
	closed   bool
	stop     chan struct{}
	wg       sync.WaitGroup
}

type lineTask struct {
	p       *lineProgress
	label   string
	route   string // its route, for slowestEnd ("" : none)
	start   time.Time
	slowest atomic.Int64 // slowestEnd from its simulation's first report (wall clock, ns; 0: none)
	events  atomic.Int64 // flow starts and ends so far
	flows   atomic.Int64 // the schedule's flows: two events each
	at      atomic.Int64 // when the simulation last reported (wall clock, ns)
	ended   atomic.Bool
}

func newLineProgress(w io.Writer, command, what string, total int) *lineProgress {
	lp := &lineProgress{w: w, command: command, what: what, total: total, start: wallClock(),
		running: map[*lineTask]bool{}, stop: make(chan struct{})}
	lp.wg.Add(1)
	go func() {
		defer lp.wg.Done()
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-lp.stop:
				return
			case <-tick.C:
				lp.mu.Lock()
				if !lp.closed {
					fmt.Fprintln(lp.w, lp.line(wallClock()))
				}
				lp.mu.Unlock()
			}
		}
	}()
	return lp
}

func (lp *lineProgress) task(label string) task {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	t := &lineTask{p: lp, label: label, start: wallClock()}
	if !lp.closed {
		lp.running[t] = true
	}
	return t
}

func (t *lineTask) sim(p sim.Progress, _ units.Time) {
	if t.slowest.Load() == 0 {
		if end := slowestEnd(t.route, p.Ops, wallClock()); !end.IsZero() {
			t.slowest.Store(end.UnixNano())
		}
	}
	t.flows.Store(int64(p.Flows))
	t.events.Store(p.Events)
	t.at.Store(wallClock().UnixNano())
}

func (t *lineTask) done() {
	if t.ended.Swap(true) {
		return
	}
	lp := t.p
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.running[t] {
		delete(lp.running, t)
		lp.done++
		lp.doneTime += wallClock().Sub(t.start)
	}
}

func (lp *lineProgress) close() {
	lp.mu.Lock()
	if lp.closed {
		lp.mu.Unlock()
		return
	}
	lp.closed = true
	lp.mu.Unlock()
	close(lp.stop)
	lp.wg.Wait()
}

func (lp *lineProgress) estimates() io.Writer { return lp.w }

// line is the progress line at now: "m2n sim: 3 of 12 simulations done,
// 1m20s so far, about 4m10s left (running: rho=2 flat 45% of its
// events)". The estimate: each running task's time left from the share of
// its flow events done, at most what its route's slowest rate leaves while
// that is ahead (eta.go; a task that has not reported takes the mean task time), plus the
// tasks not started at the mean time of a finished task (or, before any
// has finished, of a running one's estimated total), over as many at once
// as are running.
func (lp *lineProgress) line(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "m2n %s: %d of %d %s done, %s so far", lp.command, lp.done, lp.total, lp.what, roundDuration(now.Sub(lp.start)))
	var mean time.Duration
	if lp.done > 0 {
		mean = lp.doneTime / time.Duration(lp.done)
	}
	type run struct {
		label   string
		elapsed time.Duration // so far
		total   time.Duration // estimated: from its last report's share of events and time
		frac    float64
	}
	var runs []run
	var guessSum time.Duration
	guesses := 0
	for t := range lp.running {
		r := run{label: t.label, elapsed: now.Sub(t.start)}
		if flows := t.flows.Load(); flows > 0 {
			r.frac = min(1, float64(t.events.Load())/float64(2*flows))
		}
		if r.frac > 0 {
			// From when it reported, not from now: a simulation that
			// reports rarely does not seem to slow down between reports.
			r.total = time.Duration(float64(time.Unix(0, t.at.Load()).Sub(t.start)) / r.frac)
			if end := t.slowest.Load(); end != 0 {
				// At most what the route's slowest rate leaves (eta.go).
				r.total = capLeft(r.total-r.elapsed, now, time.Unix(0, end)) + r.elapsed
			}
			guessSum += r.total
			guesses++
		}
		runs = append(runs, r)
	}
	if mean == 0 && guesses > 0 {
		mean = guessSum / time.Duration(guesses)
	}
	if mean > 0 {
		var left time.Duration
		for _, r := range runs {
			switch {
			case r.frac > 0:
				left += max(0, r.total-r.elapsed)
			default:
				left += max(0, mean-r.elapsed)
			}
		}
		queued := lp.total - lp.done - len(runs)
		left += time.Duration(max(0, queued)) * mean
		left /= time.Duration(max(1, len(runs)))
		fmt.Fprintf(&b, ", about %s left", roundDuration(left))
	} else {
		b.WriteString(", no estimate yet")
	}
	if len(runs) > 0 {
		// The longest running first, at most two, for a stable line.
		slices.SortFunc(runs, func(a, b run) int { return cmp.Or(cmp.Compare(b.elapsed, a.elapsed), cmp.Compare(a.label, b.label)) })
		b.WriteString(" (running: ")
		for i, r := range runs[:min(2, len(runs))] {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(r.label)
			if r.frac > 0 {
				fmt.Fprintf(&b, " %.0f%% of its events", 100*r.frac)
			}
		}
		if len(runs) > 2 {
			fmt.Fprintf(&b, "; %d more", len(runs)-2)
		}
		b.WriteString(")")
	}
	return b.String()
}
