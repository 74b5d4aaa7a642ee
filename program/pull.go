package program

import (
	"fmt"

	"github.com/m2n-project/m2n/ir"
)

// Pullable checks that a schedule's transfers can be pulled across
// processes by their receivers without flags: every send reads its rank's
// input (written once, before the run) and waits for nothing but the sends
// before it to the same peer, so a receiver never needs to know when its
// sender's data is ready. Otherwise the executor pushes them with flags
// (Options.Push), and the simulator models that.
func Pullable(s *ir.Schedule) error {
	for i := range int32(len(s.Ops)) {
		op := &s.Ops[i]
		if op.Kind != ir.Send {
			continue
		}
		if s.Buffers[op.Src.Buf].Kind != ir.Input {
			return fmt.Errorf("op %d sends from a %s buffer", i, s.Buffers[op.Src.Buf].Kind)
		}
		for _, d := range s.Deps(i) {
			if dop := &s.Ops[d]; dop.Kind != ir.Send || dop.Rank != op.Rank || dop.Peer != op.Peer {
				return fmt.Errorf("op %d waits for op %d", i, d)
			}
		}
	}
	return nil
}
