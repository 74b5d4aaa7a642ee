package evaluate

import (
	"strconv"
	"testing"

	"github.com/m2n-project/m2n/internal/datadriven"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/sim"
)

// testdata/sim.txt holds evaluations as data: layouts and a topology in; the
// SOL bound, the simulated time, the bottleneck and the resources out.
// `go test ./evaluate -run Script -rewrite` rewrites it.
func TestScript(t *testing.T) {
	datadriven.RunFile(t, "testdata/sim.txt", func(t *testing.T, c *datadriven.Case) string {
		var out datadriven.Lines
		tensors, tp, err := datadriven.Tensors(c)
		if err != nil {
			out.Printf("error: %v", err)
			return out.String()
		}
		if c.Cmd != "sim" {
			t.Fatalf("unknown command %q", c.Cmd)
		}
		chunk, err := strconv.ParseInt(c.Arg("chunk", "0"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		s, err := plan.Build(tensors, tp, plan.Options{Route: c.Arg("route", ""), ChunkBytes: chunk})
		if err != nil {
			out.Printf("error: %v", err)
			return out.String()
		}
		_, ideal := c.Args["ideal"]
		rec, _, err := Schedule(s, tp, Options{Sim: sim.Options{Ideal: ideal}})
		if err != nil {
			out.Printf("error: %v", err)
			return out.String()
		}
		out.Printf("SOL %v (%s)", rec.SOL, rec.SOLTerm)
		out.Printf("modeled %v, %.3f x SOL", rec.Modeled, rec.Ratio())
		out.Printf("bottleneck %s (%s), %.0f%% busy", rec.Bottleneck.Name, rec.Bottleneck.Class, 100*rec.Bottleneck.Utilization)
		for _, r := range rec.Resources {
			if r.Bytes > 0 {
				out.Printf("%s: %d B, busy at most %v", r.Class, r.Bytes, r.Busy)
			}
		}
		out.Printf("%d ops, %d flows, %d events", rec.Ops, rec.Flows, rec.Events)
		return out.String()
	})
}
