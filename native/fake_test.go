package native

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/m2n-project/m2n/hostexec"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/program"
)

// fakeGPU is a device layer in host memory. Work queues per stream and runs
// at sync points in a random order that respects stream order, event waits
// and NCCL send/recv matching, so a dependency the executor fails to carry
// across streams shows up as a wrong byte or a deadlock.
type fakeGPU struct {
	rng     *rand.Rand
	mem     []byte
	next    []int64 // per device: allocation cursor
	devMem  int64   // bytes per device
	streams [][]fakeOp
	devOf   map[handle]int
	events  []int // per event: completed record count
	posted  []int // per event: records enqueued
	group   bool
	// An open group's ops per stream, sends and recvs apart: at the group's
	// end each stream runs its sends before its recvs, the order in which a
	// transfer that wrongly shares a group with the transfer it forwards
	// reads stale data (NCCL runs a group's calls concurrently, in order
	// only per peer).
	gsends, grecvs map[handle][]fakeOp
	inFly          map[[3]int][][]byte // NCCL: data sent on communicator set c from peer a to b, not yet received
	nextH          handle
	waves          int
	quantKernels   map[string]int // quantize ops run, by kernel (alone or in a batch)
	failSplit      int            // split quantize launches to fail after their first kernel (leaving work non-zero)
	cutChecks      int            // verifyQuant calls of fp8 bytes that cut their blocks
	quantChecks    int            // verifyQuant calls
	corrupt        string         // "fp8" or "scale": flip a bit of what quantize writes
	batches        int            // box_copy_batch launches
	quantBatches   int            // quantize batch launches
}

type fakeOp struct {
	ready func() bool
	run   func()
}

func newFake(devices int, seed uint64) *fakeGPU {
	// 4 MiB a device: the random schedules need a few KiB (the executor
	// asks for an eighth of it free besides), and a large fake memory only
	// costs the tests time and host memory.
	f := &fakeGPU{rng: rand.New(rand.NewPCG(seed, 1)), devMem: 4 << 20, devOf: map[handle]int{}, inFly: map[[3]int][][]byte{}, nextH: 1, quantKernels: map[string]int{}}
	f.mem = make([]byte, int64(devices)*f.devMem)
	f.next = make([]int64, devices)
	return f
}

func (f *fakeGPU) name(int) string { return "fake" }
func (f *fakeGPU) arch(int) string { return "fake" }
func (f *fakeGPU) memInfo(dev int) (int64, int64, error) {
	return f.devMem - f.next[dev], f.devMem, nil
}
func (f *fakeGPU) alloc(dev int, n int64) (uint64, error) {
	if f.next[dev]+n > f.devMem {
		return 0, fmt.Errorf("fake: out of memory")
	}
	p := uint64(int64(dev)*f.devMem + f.next[dev])
	f.next[dev] += n
	return p + 1<<20*0, nil
}
func (f *fakeGPU) free(int, uint64) error { return nil }
func (f *fakeGPU) newStream(dev int) (handle, error) {
	h := f.nextH
	f.nextH++
	f.devOf[h] = dev
	for int(h) >= len(f.streams) {
		f.streams = append(f.streams, nil)
	}
	return h, nil
}
func (f *fakeGPU) newEvent(dev int, timing bool) (handle, error) {
	f.events = append(f.events, 0)
	f.posted = append(f.posted, 0)
	return handle(len(f.events)), nil // event handles are 1-based indices
}
func (f *fakeGPU) enqueue(st handle, op fakeOp) {
	if op.ready == nil {
		op.ready = func() bool { return true }
	}
	f.streams[st] = append(f.streams[st], op)
}
func (f *fakeGPU) record(ev, st handle) error {
	e := int(ev) - 1
	f.posted[e]++
	f.enqueue(st, fakeOp{run: func() { f.events[e]++ }})
	return nil
}
func (f *fakeGPU) recordNode(ev, st handle) error { return f.record(ev, st) }
func (f *fakeGPU) wait(st, ev handle) error {
	e := int(ev) - 1
	want := f.posted[e] // waits for the latest record at call time
	f.enqueue(st, fakeOp{ready: func() bool { return f.events[e] >= want }, run: func() {}})
	return nil
}
func (f *fakeGPU) elapsed(a, b handle) (units.Time, error) { return units.Millisecond, nil }

// drain runs every queued op.
func (f *fakeGPU) drain() error {
	for {
		var runnable []int
		pending := false
		for s, q := range f.streams {
			if len(q) == 0 {
				continue
			}
			pending = true
			if q[0].ready() {
				runnable = append(runnable, s)
			}
		}
		if !pending {
			return nil
		}
		if len(runnable) == 0 {
			return fmt.Errorf("fake: deadlock: queued work can never run")
		}
		s := runnable[f.rng.IntN(len(runnable))]
		op := f.streams[s][0]
		f.streams[s] = f.streams[s][1:]
		op.run()
	}
}
func (f *fakeGPU) sync(handle) error { return f.drain() }
func (f *fakeGPU) copy(dst, src uint64, n int64, st handle) error {
	f.enqueue(st, fakeOp{run: func() { copy(f.mem[dst:dst+uint64(n)], f.mem[src:src+uint64(n)]) }})
	return nil
}
func (f *fakeGPU) copyOn(a *boxArgs, kernel string, blocks int, st handle) error {
	return f.boxCopy(a, kernel, st)
}
func (f *fakeGPU) boxCopy(a *boxArgs, kernel string, st handle) error {
	args := *a
	f.enqueue(st, fakeOp{run: func() { emulateBoxCopy(f.mem, args) }})
	return nil
}
func (f *fakeGPU) batchCopy(a *batchArgs, shared bool, st handle) error {
	ds := make([]batchDesc, a.N)
	if err := binary.Read(bytes.NewReader(f.mem[a.Desc:a.Prefix]), binary.LittleEndian, ds); err != nil {
		return err
	}
	prefix, err := f.prefixSums(a.Prefix, a.N)
	if err != nil {
		return err
	}
	if prefix[a.N] != a.Units {
		return fmt.Errorf("fake: batch of %d units, its prefix sums end at %d", a.Units, prefix[a.N])
	}
	f.batches++
	// The kernel's blocks take units in any order: so does the fake, so a
	// batch of ops that touch each other's bytes shows up as wrong bytes.
	perm := func(units int64) []int64 {
		p := make([]int64, units)
		for i, v := range f.rng.Perm(int(units)) {
			p[i] = int64(v)
		}
		return p
	}
	f.enqueue(st, fakeOp{run: func() { emulateBatch(f.mem, ds, perm) }})
	return nil
}

// prefixSums reads the n+1 prefix sums a batch kernel reads at addr.
func (f *fakeGPU) prefixSums(addr uint64, n int64) ([]int64, error) {
	prefix := make([]int64, n+1)
	err := binary.Read(bytes.NewReader(f.mem[addr:addr+uint64(8*(n+1))]), binary.LittleEndian, prefix)
	return prefix, err
}

func (f *fakeGPU) upload(dev int, dst uint64, b []byte) error {
	copy(f.mem[dst:], b)
	return nil
}
func (f *fakeGPU) patternWalk(a patternArgs, fn func(i int64, want []byte)) {
	var tmp [8]byte
	idx := make([]int64, a.ND)
	for i := int64(0); i < a.Elems; i++ {
		r := i
		var g uint64
		for d := int(a.ND) - 1; d >= 0; d-- {
			idx[d] = r % a.Size[d]
			r /= a.Size[d]
			g += uint64(a.Start[d]+idx[d]) * uint64(a.GStride[d])
		}
		v := hostexec.Pattern(int(a.Tensor), g)
		if a.Flags&patternFloat != 0 {
			v &^= 1 << (8*a.Elem - 2)
		}
		if a.Flags&patternInvert != 0 {
			v = ^v
		}
		binary.LittleEndian.PutUint64(tmp[:], v)
		fn(i, tmp[:a.Elem])
	}
}
func (f *fakeGPU) fill(a *patternArgs, st handle) error {
	args := *a
	f.enqueue(st, fakeOp{run: func() {
		f.patternWalk(args, func(i int64, want []byte) {
			copy(f.mem[int64(args.Buf)+i*int64(args.Elem):], want)
		})
	}})
	return nil
}
func (f *fakeGPU) verify(a *patternArgs, st handle) (int64, int64, error) {
	if err := f.drain(); err != nil {
		return 0, 0, err
	}
	var bad, first int64 = 0, -1
	f.patternWalk(*a, func(i int64, want []byte) {
		at := int64(a.Buf) + i*int64(a.Elem)
		if string(f.mem[at:at+int64(a.Elem)]) != string(want) {
			if bad == 0 {
				first = i
			}
			bad++
		}
	})
	return bad, first, nil
}
func (f *fakeGPU) quantize(a *quantArgs, kernel string, shared bool, st handle) error {
	args := *a
	if program.IsSplitKernel(kernel) {
		// The split kernels need their work memory, zero at each launch
		// (the real ones leave it zero).
		n := splitWorkBytes(args.Lead * args.NBR * args.NBC)
		if args.Work == 0 || int64(args.Work)+n > int64(len(f.mem)) {
			return fmt.Errorf("fake: %s without its %d bytes of work memory (at %#x)", kernel, n, args.Work)
		}
		for _, b := range f.mem[args.Work : int64(args.Work)+n] {
			if b != 0 {
				return fmt.Errorf("fake: %s: its work memory at %#x is not zero", kernel, args.Work)
			}
		}
		if f.failSplit > 0 {
			// The amax launch ran, the apply launch failed.
			f.failSplit--
			f.mem[args.Work] = 1
			return fmt.Errorf("fake: %s: the apply launch failed", kernel)
		}
	}
	f.quantKernels[kernel]++
	f.enqueue(st, fakeOp{run: func() {
		emulateQuant(f.mem, args)
		switch f.corrupt {
		case "fp8":
			f.mem[args.Dst] ^= 1
		case "scale":
			f.mem[args.Scale] ^= 1
		}
	}})
	return nil
}
func (f *fakeGPU) quantizeBatch(a *quantBatchArgs, kernel string, shared bool, st handle) error {
	if !program.HasBatchForm(kernel) {
		return fmt.Errorf("fake: %s has no batch form", kernel)
	}
	as := make([]quantArgs, a.N)
	if err := binary.Read(bytes.NewReader(f.mem[a.Args:a.Prefix]), binary.LittleEndian, as); err != nil {
		return err
	}
	prefix, err := f.prefixSums(a.Prefix, a.N)
	if err != nil {
		return err
	}
	for i, q := range as {
		if prefix[i+1]-prefix[i] != q.Lead*q.NBR*q.NBC {
			return fmt.Errorf("fake: quantize batch op %d: %d blocks in the prefix sums, %d in its arguments", i, prefix[i+1]-prefix[i], q.Lead*q.NBR*q.NBC)
		}
	}
	if prefix[a.N] != a.Blocks {
		return fmt.Errorf("fake: quantize batch of %d blocks, its prefix sums end at %d", a.Blocks, prefix[a.N])
	}
	f.quantKernels[kernel] += int(a.N)
	f.quantBatches++
	// The ops run in any order (the kernel's blocks do).
	perm := f.rng.Perm(len(as))
	f.enqueue(st, fakeOp{run: func() {
		for _, i := range perm {
			emulateQuant(f.mem, as[i])
		}
		switch f.corrupt {
		case "fp8":
			f.mem[as[0].Dst] ^= 1
		case "scale":
			f.mem[as[0].Scale] ^= 1
		}
	}})
	return nil
}

func (f *fakeGPU) verifyQuant(a *quantCheckArgs, st handle) (int64, int64, error) {
	if err := f.drain(); err != nil {
		return 0, 0, err
	}
	f.quantChecks++
	if a.HSize != a.Size {
		f.cutChecks++
	}
	bad, first := emulateQuantCheck(f.mem, *a)
	return bad, first, nil
}
func (f *fakeGPU) groupStart() error {
	f.group = true
	f.waves++
	f.gsends, f.grecvs = map[handle][]fakeOp{}, map[handle][]fakeOp{}
	return nil
}

func (f *fakeGPU) groupEnd() error {
	f.group = false
	var sts []handle
	for st := range f.gsends {
		sts = append(sts, st)
	}
	for st := range f.grecvs {
		if _, ok := f.gsends[st]; !ok {
			sts = append(sts, st)
		}
	}
	slices.Sort(sts)
	for _, st := range sts {
		for _, op := range f.gsends[st] {
			f.enqueue(st, op)
		}
		for _, op := range f.grecvs[st] {
			f.enqueue(st, op)
		}
	}
	return nil
}

// NCCL: peers are NCCL ranks; a comm handle is set*1000 + the caller's own
// rank, each set of communicators matching its sends and recvs apart.
func (f *fakeGPU) send(src uint64, n int64, peer int, comm handle, st handle) error {
	if !f.group {
		return fmt.Errorf("fake: send outside a group")
	}
	set, me := int(comm)/1000, int(comm)%1000
	f.gsends[st] = append(f.gsends[st], fakeOp{run: func() {
		k := [3]int{set, me, peer}
		f.inFly[k] = append(f.inFly[k], append([]byte(nil), f.mem[src:src+uint64(n)]...))
	}})
	return nil
}
func (f *fakeGPU) recv(dst uint64, n int64, peer int, comm handle, st handle) error {
	if !f.group {
		return fmt.Errorf("fake: recv outside a group")
	}
	set, me := int(comm)/1000, int(comm)%1000
	k := [3]int{set, peer, me}
	f.grecvs[st] = append(f.grecvs[st], fakeOp{ready: func() bool { return len(f.inFly[k]) > 0 }, run: func() {
		data := f.inFly[k][0]
		f.inFly[k] = f.inFly[k][1:]
		if int64(len(data)) != n {
			panic(fmt.Sprintf("fake: recv of %d bytes matched a send of %d", n, len(data)))
		}
		copy(f.mem[dst:dst+uint64(n)], data)
	}})
	return nil
}
func (f *fakeGPU) share(int, uint64, handle, int, int) ([]uint64, error) { return nil, ErrNotSupported }
func (f *fakeGPU) barrier(int, handle, int) error                        { return nil }
func (f *fakeGPU) waitValue(st handle, addr uint64, v uint32) error {
	f.enqueue(st, fakeOp{ready: func() bool { return binary.LittleEndian.Uint32(f.mem[addr:]) == v }, run: func() { binary.LittleEndian.PutUint32(f.mem[addr:], 0) }})
	return nil
}
func (f *fakeGPU) writeValue(st handle, addr uint64, v uint32) error {
	f.enqueue(st, fakeOp{run: func() { binary.LittleEndian.PutUint32(f.mem[addr:], v) }})
	return nil
}
func (f *fakeGPU) adopt(dev int, st handle) {
	f.devOf[st] = dev
	for int(st) >= len(f.streams) {
		f.streams = append(f.streams, nil)
	}
}
func (f *fakeGPU) allGather(_ int, mine []byte, _ handle, world int) ([]byte, error) {
	if world != 1 {
		return nil, ErrNotSupported
	}
	return mine, nil
}
func (f *fakeGPU) beginCapture(handle) error         { return ErrNotSupported }
func (f *fakeGPU) endCapture(handle) (handle, error) { return 0, ErrNotSupported }
func (f *fakeGPU) launchGraph(handle, handle) error  { return ErrNotSupported }
func (f *fakeGPU) close() error                      { return nil }
func (f *fakeGPU) abort()                            {}
