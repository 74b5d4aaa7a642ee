package plan

import (
	"math"
	"testing"
)

// The SOL model reproduces the formulas of docs/sim.md on the paper's case, with
// exact bytes (7168 MiB) and decimal line rates: hierarchical B/(16 B_N),
// flat rho B/(16 B_N), agbcast B/B_N.
func TestSOLPaper(t *testing.T) {
	B := 7168.0 * (1 << 20)
	BN, BNVL := 50e9, 900e9
	for _, rho := range []int{2, 4, 8} {
		want := map[string]float64{
			Hierarchical: math.Max(math.Max(B/(16*BN), B/(8*float64(rho)*BN)), float64(rho-1)*B/(8*float64(rho)*BNVL)),
			Flat:         float64(rho) * B / (16 * BN),
			AGBcast:      B / BN,
		}
		for route, w := range want {
			sol, err := Bound(route, paperTensors(rho), nvl72(2))
			if err != nil {
				t.Fatal(err)
			}
			if got := sol.Time.Seconds(); math.Abs(got-w) > 1e-9 {
				t.Errorf("rho %d %s: SOL %v s (%s), want %v s", rho, route, got, sol.Term, w)
			}
		}
	}
}
