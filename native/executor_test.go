package native

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/m2n-project/m2n/internal/schedtest"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/program"
)

func runFake(t *testing.T, s *ir.Schedule, opt Options, devices int, seed uint64) *Result {
	t.Helper()
	return runOn(t, newFake(devices, seed), s, opt)
}

// runOn runs a schedule on a fake GPU.
func runOn(t *testing.T, g *fakeGPU, s *ir.Schedule, opt Options) *Result {
	t.Helper()
	devOf, peerOf, comms := map[int32]int{}, map[int32]int{}, map[int][]handle{}
	for i, r := range s.World {
		d := 0
		if opt.Backend == NCCL {
			d = i
		}
		devOf[int32(r.Rank)] = d
		peerOf[int32(r.Rank)] = d
		comms[d] = []handle{handle(d)} // the fake names a comm by its NCCL rank
		if opt.Backend == Loopback {
			comms[d] = []handle{0, 1000, 2000} // three sets, as the loopback transport opens several
		}
	}
	x, err := newExecutor(s, g, opt, devOf, peerOf, comms)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	res, err := x.Run()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Every backend and transport delivers exact bytes on random schedules,
// with streams and NCCL groups run in random valid orders.
func TestExecutorOnFake(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	shared := 0 // schedules whose staging buffers share memory
	defer func() {
		if shared == 0 {
			t.Error("no random schedule reused staging memory: the staging cap went untested")
		}
	}()
	batches := 0
	defer func() {
		if batches == 0 {
			t.Error("no random schedule ran a batch of local ops")
		}
	}()
	inStep := 0 // pushed steps whose receives wait only for each other
	defer func() {
		if inStep == 0 {
			t.Error("no random schedule pushed a step whose receives depend on each other: the ready flag it skips went untested")
		}
	}()
	for i := range 80 {
		s := schedtest.Random(t, rng)
		if reusesStaging(s) {
			shared++
		}
		inStep += recvsWaitingInStep(t, s)
		for _, opt := range []Options{
			{Backend: Loopback, Settings: program.Settings{Transport: TransportCopy, Lanes: 1 + rng.IntN(4)}, Iters: 1},
			{Backend: Loopback, Settings: program.Settings{Transport: TransportNCCL, Lanes: 1 + rng.IntN(4)}, Iters: 1},
			{Backend: NCCL, Settings: program.Settings{Lanes: 1 + rng.IntN(4)}, Iters: 1},
			{Backend: NCCL, Settings: program.Settings{Transport: TransportCopy, Lanes: 1 + rng.IntN(4)}, Iters: 1},
			{Backend: NCCL, Settings: program.Settings{Lanes: 1 + rng.IntN(4), WaveBytes: 1 + rng.Int64N(64)}, Iters: 1},
			// Pushed copies with flags (CUDA IPC's protocol), over several
			// iterations: every flag is reset for the next.
			{Backend: NCCL, Settings: program.Settings{Transport: TransportCopy, Lanes: 1 + rng.IntN(4)}, Iters: 3, push: true},
			{Backend: Loopback, Settings: program.Settings{Transport: TransportCopy, Lanes: 1 + rng.IntN(4)}, Iters: 2, push: true},
		} {
			devices := 1
			if opt.Backend == NCCL {
				devices = len(s.World)
			}
			g := newFake(devices, uint64(i))
			res := runOn(t, g, s, opt)
			batches += g.batches
			if !res.Verified {
				t.Fatalf("case %d %s/%s push %v (%s): %d wrong elements; first %s", i, opt.Backend, opt.Transport, opt.push, s.Route, res.WrongElems, res.FirstWrong)
			}
		}
	}
}

// recvsWaitingInStep counts the transfer steps of s's pushed program (one
// process a rank) whose receives depend on other receives of the same step
// and on nothing else of their rank: steps that skip the ready flag.
func recvsWaitingInStep(t *testing.T, s *ir.Schedule) int {
	t.Helper()
	p, err := program.Compile(s, program.Options{Dev: func(r int32) int { return int(r) }, Lanes: 1, Mode: program.Streams, Comms: 1, Push: true})
	if err != nil {
		return 0 // not a pushable program
	}
	n := 0
	for k := range p.Steps {
		st := &p.Steps[k]
		if st.Kind != program.Xfer || st.WaitsForReceiver(s) {
			continue
		}
		for _, snd := range append([]int32{st.Op}, st.Merged...) {
			if len(s.Deps(s.Ops[snd].Match)) > 0 {
				n++
				break
			}
		}
	}
	return n
}

// reusesStaging reports whether two arena buffers of one rank overlap.
func reusesStaging(s *ir.Schedule) bool {
	for i := range s.Buffers {
		a := &s.Buffers[i]
		for j := i + 1; j < len(s.Buffers); j++ {
			b := &s.Buffers[j]
			if a.InArena && b.InArena && a.Rank == b.Rank && a.ArenaOffset < b.ArenaOffset+b.Bytes && b.ArenaOffset < a.ArenaOffset+a.Bytes {
				return true
			}
		}
	}
	return false
}

// A schedule with a dependency removed fails on the fake: the executor's
// result depends on the schedule's dependencies, not on luck.
func TestExecutorNeedsDependencies(t *testing.T) {
	for _, opt := range []Options{
		{Backend: Loopback, Settings: program.Settings{Lanes: 4}, Iters: 1},
		{Backend: NCCL, Settings: program.Settings{Lanes: 4}, Iters: 1},                 // NCCL groups
		{Backend: NCCL, Settings: program.Settings{Transport: TransportCopy}, Iters: 1}, // peer copies
		{Backend: NCCL, Settings: program.Settings{Transport: TransportCopy}, Iters: 1, push: true},
	} {
		rng := rand.New(rand.NewPCG(33, 34))
		broken := 0
		for i := range 60 {
			s := schedtest.Random(t, rng)
			cut := false
			for k := range s.Ops {
				if s.Ops[k].Kind == ir.Unpack && s.Ops[k].DepLen > 0 {
					s.Ops[k].DepLen = 0
					cut = true
				}
			}
			if !cut {
				continue
			}
			devices := 1
			if opt.Backend == NCCL {
				devices = len(s.World)
			}
			for seed := range uint64(4) {
				res := runFake(t, s, opt, devices, seed+uint64(i)*10)
				if !res.Verified {
					broken++
					break
				}
			}
		}
		if broken == 0 {
			t.Errorf("%s/%s: no schedule with cut dependencies ever delivered a wrong byte", opt.Backend, opt.Transport)
		}
	}
}

func TestPlanBoxCopyMatchesElementCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	for range 2000 {
		nd := 1 + rng.IntN(4)
		srcFull, dstFull, size := make([]int64, nd), make([]int64, nd), make([]int64, nd)
		srcStart, dstStart := make([]int64, nd), make([]int64, nd)
		for d := range nd {
			size[d] = 1 + rng.Int64N(5)
			srcStart[d] = rng.Int64N(3)
			dstStart[d] = rng.Int64N(3)
			srcFull[d] = srcStart[d] + size[d] + rng.Int64N(2)
			dstFull[d] = dstStart[d] + size[d] + rng.Int64N(2)
			if rng.IntN(3) == 0 { // whole dims, so runs merge
				srcStart[d], dstStart[d], srcFull[d], dstFull[d] = 0, 0, size[d], size[d]
			}
		}
		elem := int64(1 << rng.IntN(4))
		n := func(full []int64) int64 {
			p := elem
			for _, v := range full {
				p *= v
			}
			return p
		}
		mem := make([]byte, n(srcFull)+n(dstFull)+64)
		srcAddr, dstAddr := uint64(16*rng.IntN(2)), uint64(n(srcFull)+32)
		for i := range mem {
			mem[i] = byte(rng.IntN(256))
		}
		want := append([]byte(nil), mem...)
		copyElements(want, mem, view{dstAddr, dstFull, dstStart}, view{srcAddr, srcFull, srcStart}, size, elem)
		a, kernel, err := planBoxCopy(view{srcAddr, srcFull, srcStart}, view{dstAddr, dstFull, dstStart}, size, elem)
		if err != nil {
			t.Fatal(err)
		}
		emulateBoxCopy(mem, a)
		if string(mem) != string(want) {
			t.Fatalf("box %v from %v@%v to %v@%v (elem %d, %s): copy differs", size, srcFull, srcStart, dstFull, dstStart, elem, kernel)
		}
	}
}

// A batch of random box copies, emulated unit by unit as box_copy_batch
// cuts them (long runs in 64 KiB segments, short runs a unit of whole runs
// each), writes exactly what copying each box element by element writes.
func TestBatchMatchesElementCopies(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 38))
	longRuns := 0 // descriptors of long runs taken several to a unit
	defer func() {
		if longRuns == 0 {
			t.Error("no batch held long runs several to a unit")
		}
	}()
	for c := range 200 {
		var ds []batchDesc
		mem := make([]byte, 0, 1<<20)
		var boxes []func(want []byte)
		var rest int
		for range 1 + rng.IntN(6) {
			nd := 1 + rng.IntN(3)
			srcFull, dstFull, size := make([]int64, nd), make([]int64, nd), make([]int64, nd)
			srcStart, dstStart := make([]int64, nd), make([]int64, nd)
			elem := int64(1 << rng.IntN(4))
			for d := range nd {
				size[d] = 1 + rng.Int64N(6)
				if d == nd-1 && rng.IntN(3) == 0 {
					size[d] = 1 + rng.Int64N(90000/elem) // runs past a 64 KiB segment
				}
				srcStart[d], dstStart[d] = rng.Int64N(2), rng.Int64N(2)
				srcFull[d] = srcStart[d] + size[d] + rng.Int64N(2)
				dstFull[d] = dstStart[d] + size[d] + rng.Int64N(2)
				if rng.IntN(2) == 0 {
					srcStart[d], dstStart[d], srcFull[d], dstFull[d] = 0, 0, size[d], size[d]
				}
			}
			n := func(full []int64) int64 {
				p := elem
				for _, v := range full {
					p *= v
				}
				return p
			}
			srcAddr := uint64(align(int64(len(mem)))) + uint64(16*rng.IntN(2))
			dstAddr := uint64(align(int64(srcAddr) + n(srcFull)))
			mem = append(mem, make([]byte, int64(dstAddr)+n(dstFull)-int64(len(mem)))...)
			a, kernel, err := planBoxCopy(view{srcAddr, srcFull, srcStart}, view{dstAddr, dstFull, dstStart}, size, elem)
			if err != nil {
				t.Fatal(err)
			}
			d, ok := batchable(a, kernel)
			if !ok {
				rest++
				continue
			}
			if strings.Contains(kernel, "long") && d.RunsPerUnit > 1 {
				longRuns++
			}
			ds = append(ds, d)
			boxes = append(boxes, func(want []byte) {
				copyElements(want, want, view{dstAddr, dstFull, dstStart}, view{srcAddr, srcFull, srcStart}, size, elem)
			})
		}
		for i := range mem {
			mem[i] = byte(rng.IntN(256))
		}
		want := append([]byte(nil), mem...)
		for _, f := range boxes {
			f(want)
		}
		emulateBatch(mem, ds, nil)
		if string(mem) != string(want) {
			t.Fatalf("case %d: a batch of %d box copies differs from copying each element", c, len(ds))
		}
		// The kernel reads the units' prefix sums after the descriptors.
		b, at, units := encodeBatch(ds)
		var sum int64
		for i := range ds {
			sum += ds[i].units()
		}
		if units != sum || int64(len(b)) != at+8*int64(len(ds)+1) || at != int64(len(ds))*int64(unsafe.Sizeof(batchDesc{})) {
			t.Fatalf("case %d: %d descriptors encoded as %d bytes, prefix sums at %d, %d units (want %d)", c, len(ds), len(b), at, units, sum)
		}
	}
}

// The argument structs must match kernels/copy.cu byte for byte.
func TestKernelArgLayout(t *testing.T) {
	if n := unsafe.Sizeof(batchDesc{}); n != 264 {
		t.Errorf("batchDesc is %d bytes; struct BatchDesc is 264", n)
	}
	if n := unsafe.Sizeof(batchArgs{}); n != 32 {
		t.Errorf("batchArgs is %d bytes; struct BatchArgs is 32", n)
	}
	if n := unsafe.Sizeof(boxArgs{}); n != 248 {
		t.Errorf("boxArgs is %d bytes; struct BoxArgs is 248", n)
	}
	if n := unsafe.Sizeof(patternArgs{}); n != 224 {
		t.Errorf("patternArgs is %d bytes; struct PatternArgs is 224", n)
	}
}

// copyElements copies a box of size elements (elem bytes each) element by
// element from src's array in from to dst's array in to (host memory
// indexed by device address).
func copyElements(to, from []byte, dst, src view, size []int64, elem int64) {
	nd := len(size)
	idx := make([]int64, nd)
	for {
		so, do := int64(0), int64(0)
		for d := range nd {
			so = so*src.full[d] + src.start[d] + idx[d]
			do = do*dst.full[d] + dst.start[d] + idx[d]
		}
		copy(to[int64(dst.addr)+do*elem:int64(dst.addr)+(do+1)*elem], from[int64(src.addr)+so*elem:int64(src.addr)+(so+1)*elem])
		d := nd - 1
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < size[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// The slowest process's time per iteration, from every rank's gathered
// times: random times, each iteration's maximum found wherever it lies.
func TestSlowestTimes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 100 {
		world, n := 1+rng.IntN(8), 1+rng.IntN(20)
		var all []byte
		want := make([]units.Time, n)
		for range world {
			ts := make([]units.Time, n)
			for i := range ts {
				ts[i] = units.Time(rng.Int64N(1 << 50))
				want[i] = max(want[i], ts[i])
			}
			all = append(all, encodeTimes(ts)...)
		}
		got, err := slowest(all, world, n)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("world %d, %d iterations: got %v, %v; want %v", world, n, got, err, want)
		}
		if _, err := slowest(all[:len(all)-8], world, n); err == nil {
			t.Fatal("a short gather passed")
		}
	}
}
