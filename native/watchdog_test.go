package native

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2n-project/m2n/ir"
)

// wedgedCalls replaces onWedged for a test, recording its messages.
func wedgedCalls(t *testing.T) func() []string {
	t.Helper()
	var mu sync.Mutex
	var got []string
	saved := onWedged
	t.Cleanup(func() { onWedged = saved })
	onWedged = func(msg string) {
		mu.Lock()
		got = append(got, msg)
		mu.Unlock()
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// A call that returns in time is left alone; one that hangs is aborted
// after the timeout and returns; an abort that hangs itself, or a call
// that does not return after the abort, ends the process (onWedged) one
// grace later, naming why: the survivor of a killed peer never waits for
// ever.
func TestWatchdog(t *testing.T) {
	got := wedgedCalls(t)
	why := func() string { return "no progress from rank 1" }
	const timeout, grace = 20 * time.Millisecond, 30 * time.Millisecond
	aborted := false
	if watchdog(func() {}, timeout, grace, func() { aborted = true }, why) || aborted {
		t.Fatal("a call that returned in time was aborted")
	}
	// Hangs until aborted: the abort makes it return.
	release := make(chan struct{})
	start := time.Now()
	if !watchdog(func() { <-release }, timeout, grace, func() { close(release) }, why) {
		t.Fatal("a call that hung was not reported as timed out")
	}
	if d := time.Since(start); d < timeout || d > timeout+grace {
		t.Errorf("returned after %v, want about the timeout (%v)", d, timeout)
	}
	if len(got()) != 0 {
		t.Fatalf("wedged: %v", got())
	}
	// The abort hangs: wedged within the timeout and a grace.
	stuck := make(chan struct{})
	done := make(chan struct{})
	go func() {
		watchdog(func() { <-stuck }, timeout, grace, func() { <-stuck }, why)
		close(done)
	}()
	time.Sleep(timeout + grace + 50*time.Millisecond)
	if w := got(); len(w) == 0 || !strings.Contains(w[0], "no progress from rank 1") || !strings.Contains(w[0], "abort did not return") {
		t.Fatalf("wedged with %q, want the reason and the hung abort", w)
	}
	close(stuck)
	<-done
	// The abort returns but the call does not.
	got2 := wedgedCalls(t)
	stuck2 := make(chan struct{})
	go watchdog(func() { <-stuck2 }, timeout, grace, func() {}, why)
	time.Sleep(timeout + grace + 50*time.Millisecond)
	if w := got2(); len(w) == 0 || !strings.Contains(w[0], "did not return within") {
		t.Fatalf("wedged with %q, want the call that did not return", w)
	}
	close(stuck2)
}

// A timeout names the ranks this process was waiting for.
func TestPeerNames(t *testing.T) {
	s := &ir.Schedule{}
	s.AddOp(ir.Op{Kind: ir.Send, Rank: 0, Peer: 3, Match: 1})
	s.AddOp(ir.Op{Kind: ir.Recv, Rank: 3, Peer: 0, Match: 0})
	s.AddOp(ir.Op{Kind: ir.Recv, Rank: 0, Peer: 1, Match: 3})
	s.AddOp(ir.Op{Kind: ir.Send, Rank: 1, Peer: 0, Match: 2})
	peerOf := map[int32]int{0: 0, 1: 1, 3: 2}
	if got := peerNames(s, 0, peerOf); got != "ranks 1, 3 (NCCL ranks 1, 2)" {
		t.Errorf("rank 0 waits for %q", got)
	}
	if got := peerNames(s, 3, peerOf); got != "rank 0 (NCCL rank 0)" {
		t.Errorf("rank 3 waits for %q", got)
	}
}
