package evaluate

import (
	"reflect"
	"testing"

	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/sim"
)

// Options.Progress follows the simulation with the SOL as the estimate
// once it is known, monotone to the makespan, and leaves the record as it
// is.
func TestProgress(t *testing.T) {
	p := point(t)
	var got []sim.Progress
	var sols []units.Time
	rec, _, _, err := Point(p, plan.Options{Route: plan.Flat}, Options{Progress: func(sp sim.Progress, sol units.Time) {
		got, sols = append(got, sp), append(sols, sol)
	}})
	if err != nil {
		t.Fatal(err)
	}
	plain, _, _, err := Point(p, plan.Options{Route: plan.Flat}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec, plain) {
		t.Fatal("the record differs with a progress callback")
	}
	if len(got) < 2 {
		t.Fatalf("%d reports, want at least the first and the last", len(got))
	}
	for i := range got {
		// The bound runs beside the simulation: 0 until it is known,
		// then the SOL for good.
		if sols[i] != rec.SOL && (sols[i] != 0 || i > 0 && sols[i-1] != 0) {
			t.Errorf("report %d: estimate %v after %v, want 0 until the SOL %v", i, sols[i], sols[max(i-1, 0)], rec.SOL)
		}
		if i > 0 && (got[i].Now < got[i-1].Now || got[i].OpsDone < got[i-1].OpsDone) {
			t.Errorf("report %d goes back: %+v after %+v", i, got[i], got[i-1])
		}
	}
	if last := got[len(got)-1]; last.Now != rec.Modeled || last.OpsDone != rec.Ops {
		t.Errorf("last report %+v, want %v and %d ops", last, rec.Modeled, rec.Ops)
	}
}
