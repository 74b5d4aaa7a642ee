package ir_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/m2n-project/m2n/internal/schedtest"
	"github.com/m2n-project/m2n/ir"
)

// validate runs the verifier with and without its box writes.
func validate(s *ir.Schedule) (boxes, spans error) {
	ir.SetSpansOnly(false)
	boxes = s.Validate()
	ir.SetSpansOnly(true)
	defer ir.SetSpansOnly(false)
	return boxes, s.Validate()
}

// The verifier keeps a placed buffer's box writes as boxes, not a span per
// run; it must say what the spans say: on random schedules, valid and with
// a dependency taken out (a read before its write, a write over bytes not
// yet read), the same verdict and the same message.
func TestBoxWritesAgreeWithSpans(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	caught := 0
	for i := range 200 {
		s := schedtest.Random(t, rng)
		if a, b := validate(s); a != nil || b != nil {
			t.Fatalf("schedule %d: valid, yet %v / %v", i, a, b)
		}
		for range 5 {
			m := *s
			m.Ops = slices.Clone(s.Ops)
			m.DepPool = slices.Clone(s.DepPool)
			var withDeps []int32
			for k := range m.Ops {
				if m.Ops[k].DepLen > 0 {
					withDeps = append(withDeps, int32(k))
				}
			}
			if len(withDeps) == 0 {
				break
			}
			k := withDeps[rng.IntN(len(withDeps))]
			op := &m.Ops[k]
			deps := m.DepPool[op.DepOff : op.DepOff+op.DepLen]
			j := rng.IntN(len(deps))
			copy(deps[j:], deps[j+1:])
			op.DepLen--
			a, b := validate(&m)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("schedule %d, op %d without a dependency: box writes say %v, spans %v", i, k, a, b)
			}
			if a != nil {
				caught++
			}
		}
	}
	if caught < 50 {
		t.Errorf("only %d of the mutated schedules were invalid: the test compares too little", caught)
	}
}
