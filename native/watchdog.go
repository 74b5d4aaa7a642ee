package native

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/m2n-project/m2n/ir"
)

// abortGrace is how long m2n waits, after a timeout, for NCCL's abort to
// return and for the call it interrupts to give up, before it ends the
// process: a communicator whose peer died mid-run can leave ncclCommAbort
// itself waiting (2 x H200, NCCL 2.28, a peer killed during the timed
// loop), and PyTorch's ProcessGroupNCCL watchdog ends such a process too.
// It is 8 s so that a survivor ends within --timeout + 10 s of its peer's
// death with room for the exit itself: at 10 s, six survivors of
// scripts/gpu-kill-test.sh exited 20.2 s after the kill (TIMEOUT=10).
var abortGrace = 8 * time.Second

// onWedged ends the process when an abort or an aborted call does not
// return: nothing of its GPU work or NCCL state can be released or waited
// for any more. Tests replace it.
var onWedged = func(msg string) {
	fmt.Fprintf(os.Stderr, "m2n: %s\n", msg)
	os.Exit(1)
}

// abortWithin runs abort; when it has not returned within grace, it calls
// onWedged with why.
func abortWithin(abort func(), grace time.Duration, why string) {
	expired := after(grace)
	abortBy(abort, expired, grace, why)
}

// after returns a channel closed once d has passed.
func after(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}

// abortBy runs abort and waits for it until expired is closed, then calls
// onWedged (grace is what expired stands for, for the message).
func abortBy(abort func(), expired <-chan struct{}, grace time.Duration, why string) {
	done := make(chan struct{})
	go func() {
		abort()
		close(done)
	}()
	select {
	case <-done:
	case <-expired:
		onWedged(fmt.Sprintf("%s; the NCCL abort did not return within %v either: exiting", why, grace))
	}
}

// watchdog runs call on this goroutine (NCCL keeps a group's state per
// thread); if it has not returned after timeout, it aborts and gives the
// abort and then the call, together, grace to return, or calls onWedged:
// the process ends at most timeout + grace after the call began. It
// reports whether the timeout fired.
func watchdog(call func(), timeout, grace time.Duration, abort func(), why func() string) bool {
	fired, returned := make(chan struct{}), make(chan struct{})
	t := time.AfterFunc(timeout, func() {
		close(fired)
		w := why()
		expired := after(grace)
		abortBy(abort, expired, grace, w)
		select {
		case <-returned:
		case <-expired:
			onWedged(fmt.Sprintf("%s; the NCCL call did not return within %v of the timeout: exiting", w, grace))
		}
	})
	call()
	close(returned)
	if !t.Stop() {
		<-fired
		return true
	}
	return false
}

// peerNames names the ranks rank me sends to or receives from in s, with
// their NCCL ranks: "rank 1 (NCCL rank 1)", "ranks 1, 3 (NCCL ranks 1,
// 3)"; "every other rank" when it exchanges with none.
func peerNames(s *ir.Schedule, me int32, peerOf map[int32]int) string {
	var ranks []int32
	for i := range s.Ops {
		op := &s.Ops[i]
		if (op.Kind == ir.Send || op.Kind == ir.Recv) && op.Rank == me && !slices.Contains(ranks, op.Peer) {
			ranks = append(ranks, op.Peer)
		}
	}
	if len(ranks) == 0 {
		return "every other rank"
	}
	slices.Sort(ranks)
	var rs, ns []string
	for _, r := range ranks {
		rs = append(rs, strconv.Itoa(int(r)))
		ns = append(ns, strconv.Itoa(peerOf[r]))
	}
	if len(ranks) == 1 {
		return fmt.Sprintf("rank %s (NCCL rank %s)", rs[0], ns[0])
	}
	return fmt.Sprintf("ranks %s (NCCL ranks %s)", strings.Join(rs, ", "), strings.Join(ns, ", "))
}
