package evaluate

import (
	"errors"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/internal/scentest"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/sim"
)

// What runs beside the simulation: a data flow check that fails is the
// result, before the bound's and the simulation's errors, and stops the
// simulation early; so does a bound that fails; a panic there is the
// caller's; and the record is the one Schedule gives with nothing beside.
func TestScheduleBeside(t *testing.T) {
	p := scentest.Points(t, "paper-ffn-moe")[0]
	s, verify, err := plan.BuildDeferred(pointTensors(p), p.Topology, plan.Options{Route: plan.AGBcast})
	if err != nil {
		t.Fatal(err)
	}
	var last sim.Progress
	follow := Options{Progress: func(sp sim.Progress, _ units.Time) { last = sp }}

	rec, _, err := schedule(s, p.Topology, follow, verify)
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := Schedule(s, p.Topology, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Modeled != plain.Modeled || rec.SOL != plain.SOL || rec.Events != plain.Events {
		t.Fatalf("beside: %v, SOL %v, %d events; alone: %v, SOL %v, %d events", rec.Modeled, rec.SOL, rec.Events, plain.Modeled, plain.SOL, plain.Events)
	}

	bad := errors.New("a byte from the wrong source")
	if _, _, err := schedule(s, p.Topology, follow, func() error { return bad }); !errors.Is(err, bad) {
		t.Errorf("failed check: error %v, want the check's", err)
	}
	if last.OpsDone >= last.Ops {
		t.Errorf("failed check: the simulation ran on to %d of %d ops", last.OpsDone, last.Ops)
	}

	other := *s
	other.Route = "custom"
	if _, _, err := schedule(&other, p.Topology, follow, nil); err == nil || !strings.Contains(err.Error(), "SOL bound") {
		t.Errorf("unknown route: error %v, want the bound's", err)
	}
	if last.OpsDone >= last.Ops {
		t.Errorf("unknown route: the simulation ran on to %d of %d ops", last.OpsDone, last.Ops)
	}

	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recovered %v, want the check's panic", r)
		}
	}()
	schedule(s, p.Topology, Options{}, func() error { panic("boom") })
	t.Error("a panic beside the simulation was lost")
}
