package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/sim"
)

// progress shows on a terminal what a command is doing and how far it has
// come: a counter of the tasks done (schedules planned, simulations run)
// and a line per running task, which a simulation moves along. Off a
// terminal, or with --json, it is noProgress and shows nothing, so the
// output is the same byte for byte. The pure packages only report through
// callbacks (sim.Options.Progress, evaluate.Options.Progress); this is
// where they meet the terminal.
type progress interface {
	// task starts the line of one piece of work, e.g. a route at a point;
	// tasks may run concurrently.
	task(label string) task
	// close removes the lines from the terminal; call it before printing
	// anything else there. It may be called more than once.
	close()
	// estimates is where a long simulation writes how long it will take
	// (eta.go): above the bars on a terminal, else stderr; nil: nowhere.
	estimates() io.Writer
}

// task is one piece of work on the progress display.
type task interface {
	// sim moves the line along a simulation, with the schedule's SOL
	// bound as the estimate of its makespan (evaluate.Options.Progress; 0
	// until the bound is known).
	sim(p sim.Progress, sol units.Time)
	// done ends the task and counts it.
	done()
}

// isTerminal reports whether w is a terminal (a character device); a
// variable so that tests can pretend.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressRefresh is how often the terminal is redrawn.
const progressRefresh = 250 * time.Millisecond

// newProgress returns the progress display of a command that will run
// total tasks (what names them: "simulations"), by mode (--progress):
// auto draws bars on stderr when it is a terminal and quiet (--json) is
// false, and writes progress lines there otherwise (lines.go); always
// writes lines, on a terminal too; never shows nothing.
func newProgress(e *env, command, what string, total int, quiet bool, mode string) progress {
	switch {
	case total <= 0 || mode == progressNever:
		return noProgress{}
	case mode == progressAlways || quiet || !isTerminal(e.stderr):
		return newLineProgress(e.stderr, command, what, total)
	}
	p := mpb.New(mpb.WithOutput(e.stderr), mpb.WithRefreshRate(progressRefresh), mpb.WithAutoRefresh(), mpb.WithWidth(100))
	top := p.AddBar(int64(total),
		mpb.PrependDecorators(decor.Name("m2n "+command+" ", decor.WCSyncSpaceR), decor.CountersNoUnit("%d of %d "+what, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Percentage(decor.WC{W: 5})),
		mpb.BarRemoveOnComplete(), mpb.BarWidth(30))
	return &barProgress{p: p, top: top}
}

// taskLabel names a route at a point (nil: a schedule file) on the
// display: the point's coordinates, if it has any, and the route.
func taskLabel(p *scenario.Point, route string) string {
	if p == nil || len(p.Params) == 0 {
		return route
	}
	return p.Label() + " " + route
}

// noProgress shows no progress, and writes the estimates of long
// simulations to w (nil: nowhere).
type noProgress struct{ w io.Writer }

func (noProgress) task(string) task          { return noTask{} }
func (noProgress) close()                    {}
func (p noProgress) estimates() io.Writer    { return p.w }
func (bp *barProgress) estimates() io.Writer { return bp.p } // lines above the bars

type noTask struct{}

func (noTask) sim(sim.Progress, units.Time) {}
func (noTask) done()                        {}

// barProgress draws with mpb: a counter bar on top, a bar per task below.
type barProgress struct {
	p   *mpb.Progress
	top *mpb.Bar

	mu     sync.Mutex
	tasks  map[*barTask]bool // running
	closed bool
}

// barTask is a task's bar: planning until its simulation reports, then
// the ops done over the schedule's ops, with the simulated time over the
// SOL beside it.
type barTask struct {
	pr         *barProgress
	bar        *mpb.Bar
	now, sol   atomic.Int64 // units.Time
	simulating atomic.Bool
	ended      atomic.Bool
}

func (bp *barProgress) task(label string) task {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if bp.closed {
		return noTask{}
	}
	t := &barTask{pr: bp}
	state := func(decor.Statistics) string {
		switch {
		case !t.simulating.Load() && t.ended.Load():
			return " planned"
		case !t.simulating.Load():
			return " planning"
		}
		if sol := t.sol.Load(); sol > 0 {
			return fmt.Sprintf(" %v simulated of ~%v (SOL)", units.Time(t.now.Load()), units.Time(sol))
		}
		return fmt.Sprintf(" %v simulated", units.Time(t.now.Load())) // the bound not known yet
	}
	// Total 0: the bar completes on done() only, not when its
	// simulation's last op ends and the results are still being summed.
	t.bar = bp.p.AddBar(0,
		mpb.PrependDecorators(decor.Name("  "+label, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Percentage(decor.WC{W: 5}), decor.Any(state, decor.WC{C: decor.DindentRight})),
		mpb.BarRemoveOnComplete(), mpb.BarWidth(20))
	if bp.tasks == nil {
		bp.tasks = map[*barTask]bool{}
	}
	bp.tasks[t] = true
	return t
}

func (t *barTask) sim(p sim.Progress, sol units.Time) {
	if t.ended.Load() {
		return
	}
	t.now.Store(int64(p.Now))
	t.sol.Store(int64(sol))
	if !t.simulating.Swap(true) {
		t.bar.SetTotal(int64(max(p.Ops, 1)), false)
	}
	t.bar.SetCurrent(int64(p.OpsDone))
}

func (t *barTask) done() {
	if t.ended.Swap(true) {
		return
	}
	bp := t.pr
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if bp.closed {
		return
	}
	delete(bp.tasks, t)
	if !t.simulating.Load() {
		t.bar.SetCurrent(1)
	}
	t.bar.SetTotal(-1, true)
	bp.top.Increment()
}

func (bp *barProgress) close() {
	bp.mu.Lock()
	if bp.closed {
		bp.mu.Unlock()
		return
	}
	bp.closed = true
	for t := range bp.tasks {
		t.ended.Store(true)
		t.bar.Abort(true)
	}
	bp.tasks = nil
	if !bp.top.Completed() {
		bp.top.Abort(true)
	}
	bp.mu.Unlock()
	bp.p.Wait()
}

// planProgress is m2n plan's display: a task per schedule built
// (selection.build), closed as soon as the last one is built, before the
// tables are printed.
type planProgress struct {
	pr   progress
	left int
}

// showProgress starts m2n plan's display for the schedules of the points
// (none when quiet, or off a terminal) and returns the function that
// closes it, for a defer.
func (sel *selection) showProgress(e *env, points []*scenario.Point, quiet bool, mode string) func() {
	n := 0
	for _, p := range points {
		rs, err := sel.routesOf(p)
		if err != nil {
			return func() {}
		}
		n += len(rs)
	}
	pp := &planProgress{pr: newProgress(e, "plan", "schedules", n, quiet, mode), left: n}
	sel.shown = pp
	return pp.pr.close
}

func (pp *planProgress) task(label string) task {
	if pp == nil {
		return noTask{}
	}
	return &planTask{pp, pp.pr.task(label)}
}

type planTask struct {
	pp *planProgress
	task
}

func (t *planTask) done() {
	t.task.done()
	if t.pp.left--; t.pp.left == 0 {
		t.pp.pr.close()
	}
}

// progressFlag registers --progress.
func progressFlag(fs *flags) *string {
	return fs.String("progress", progressAuto, "how to show progress on stderr: auto (bars on a terminal; elsewhere a line every 10 s with an estimate of the time left, from 10 s on), always (those lines, on a terminal too) or never")
}

// checkProgress refuses a --progress value it does not know.
func checkProgress(mode string) error {
	switch mode {
	case progressAuto, progressAlways, progressNever:
		return nil
	}
	return usagef("--progress %q: want auto, always or never", mode)
}
