package sim

import (
	"errors"
	"reflect"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/plan"
)

// progressSchedule is the paper layer at rho = 4, hierarchical, with a
// progress point every 16 batches for the rest of the test.
func progressSchedule(t *testing.T) *ir.Schedule {
	t.Helper()
	s, err := plan.Build(paper(4), nvl72(2), plan.Options{Route: plan.Hierarchical, ChunkBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n := progressEvery
	t.Cleanup(func() { progressEvery = n })
	progressEvery = 16
	return s
}

// Options.Progress is called at the start, along the way and at the end,
// with monotone reports, and changes nothing in the result.
func TestProgress(t *testing.T) {
	s := progressSchedule(t)
	var got []Progress
	with, err := Run(s, nvl72(2), Options{Timeline: true, Progress: func(p Progress) { got = append(got, p) }})
	if err != nil {
		t.Fatal(err)
	}
	without, err := Run(s, nvl72(2), Options{Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(with, without) {
		t.Fatal("the result differs with a progress callback")
	}
	if len(got) < 3 {
		t.Fatalf("%d progress reports, want the first, some along the way, and the last", len(got))
	}
	if first := got[0]; first.Now != 0 || first.OpsDone != 0 || first.Ops != len(s.Ops) {
		t.Errorf("first report %+v", first)
	}
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if b.Now < a.Now || b.OpsDone < a.OpsDone || b.Events < a.Events || b.Ops != a.Ops {
			t.Fatalf("report %d goes back: %+v after %+v", i, b, a)
		}
	}
	if last := got[len(got)-1]; last.Now != with.Makespan || last.OpsDone != len(s.Ops) || last.Events != with.Events {
		t.Errorf("last report %+v, want makespan %v, %d ops, %d events", last, with.Makespan, len(s.Ops), with.Events)
	}
	t.Logf("%d reports over %d events", len(got), with.Events)
}

// Options.Stop is asked at each progress point; when it says so the
// simulation ends there with ErrStopped.
func TestStop(t *testing.T) {
	s := progressSchedule(t)
	asked, last := 0, Progress{}
	_, err := Run(s, nvl72(2), Options{
		Stop:     func() bool { asked++; return asked == 3 },
		Progress: func(p Progress) { last = p },
	})
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("error %v, want ErrStopped", err)
	}
	if asked != 3 || last.OpsDone >= len(s.Ops) {
		t.Errorf("asked %d times, %d of %d ops done; want 3 and stopped early", asked, last.OpsDone, len(s.Ops))
	}
	if _, err := Run(s, nvl72(2), Options{Stop: func() bool { return false }}); err != nil {
		t.Errorf("never stopped: %v", err)
	}
}
