package native

import (
	"errors"
	"github.com/m2n-project/m2n/internal/schedtest"
	"testing"

	"github.com/m2n-project/m2n/plan"
)

// The copy transport across processes takes schedules whose sends read
// inputs and wait only for earlier sends to the same peer.
func TestIPCEligible(t *testing.T) {
	for _, tc := range []struct {
		route string
		ok    bool
	}{{plan.Flat, true}, {plan.Hierarchical, true}, {plan.AGBcast, false}, {plan.NemoLegacy, false}} {
		err := ipcEligible(schedtest.TwoGPU(t, tc.route, 4))
		if (err == nil) != tc.ok {
			t.Errorf("%s: got %v, want eligible %v", tc.route, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrScheduleNotSupported) {
			t.Errorf("%s: %v is not ErrScheduleNotSupported", tc.route, err)
		}
	}
}
