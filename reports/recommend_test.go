package reports

import (
	"testing"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
)

// Per situation (the coordinates that are not choices), the fastest choice
// that fits wins; one that does not fit, or cannot run, loses with its
// reason, whatever its time.
func TestRecommend(t *testing.T) {
	pt := func(nic, capv string) *scenario.Point {
		return &scenario.Point{Params: []scenario.Param{{Name: "nic", Value: nic}, {Name: "staging_cap", Value: capv}}}
	}
	mem := func(total int64, fits bool) evaluate.Memory {
		return evaluate.Memory{TotalBytes: total, CapacityBytes: 100, CapacityKnown: true, Fits: fits}
	}
	rows := []Row{
		{Route: "agbcast", Point: pt("400G", "0 B"), Modeled: 1 * units.Millisecond, Memory: mem(500, false)}, // fastest, does not fit
		{Route: "hierarchical", Point: pt("400G", "0 B"), Modeled: 3 * units.Millisecond, Memory: mem(50, true)},
		{Route: "hierarchical", Point: pt("400G", "4 GiB"), Modeled: 2 * units.Millisecond, Memory: mem(60, true)}, // the best
		{Route: "hierarchical", Point: pt("800G", "0 B"), Modeled: 5 * units.Millisecond, Memory: mem(50, true),
			Framework: &evaluate.FrameworkTime{Export: units.Millisecond}}, // 6 ms with the framework
		{Route: "flat", Point: pt("800G", "0 B"), Modeled: 5500 * units.Microsecond, Memory: mem(50, true)}, // 5.5 ms: the best
	}
	skips := []evaluate.Skip{{Point: pt("400G", "4 GiB"), Route: "agbcast", Reason: "staging cap"}}
	recs := Recommend(rows, skips, map[string]bool{"staging_cap": true})
	if len(recs) != 2 || recs[0].Situation != "nic=400G" || recs[1].Situation != "nic=800G" {
		t.Fatalf("situations %+v", recs)
	}
	if b := recs[0].Best; b == nil || b.Choice != "hierarchical, staging_cap=4 GiB" {
		t.Errorf("400G: best %+v, want hierarchical at the 4 GiB cap", b)
	}
	var got []string
	for _, o := range recs[0].Others {
		got = append(got, o.Choice+": "+o.Why)
	}
	want := []string{
		"agbcast, staging_cap=0 B: does not fit: 500 B per GPU, more than the GPU's 100 B",
		"hierarchical, staging_cap=0 B: slower: +50.0% over the best",
		"agbcast, staging_cap=4 GiB: cannot run: staging cap",
	}
	if len(got) != len(want) {
		t.Fatalf("others %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("other %d: %q, want %q", i, got[i], want[i])
		}
	}
	if b := recs[1].Best; b == nil || b.Choice != "flat, staging_cap=0 B" {
		t.Errorf("800G: best %+v, want flat (hierarchical's framework cost makes it 6 ms)", b)
	}
}
