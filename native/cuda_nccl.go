//go:build linux && cgo

package native

// NCCL set-up and calls of the device layer: communicators, the all-gather
// that shares CUDA IPC handles, groups, send and recv, and the watchdog
// around calls that can wait on a peer.

/*
#include <stdlib.h>
#include "m2n_cuda.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"
)

// share gives every rank of the communicator this process's arena: each
// process's CUDA IPC handle is all-gathered over NCCL and the peers' are
// opened here. It returns each NCCL rank's arena as mapped here (this
// process's own, base, at index me).
func (g *cudaGPU) share(dev int, base uint64, comm handle, world, me int) ([]uint64, error) {
	out := make([]uint64, world)
	out[me] = base
	var handles []byte
	err := g.on(dev, func() error {
		var mine [64]byte
		if r := C.m2n_cuIpcGetMemHandle((*C.char)(unsafe.Pointer(&mine[0])), C.ull(base)); r != 0 {
			return cuErr("cuIpcGetMemHandle", r)
		}
		all, err := g.allGather(dev, mine[:], comm, world)
		handles = all
		return err
	})
	if err != nil {
		return nil, err
	}
	for j := range world {
		if j == me {
			continue
		}
		err := g.on(dev, func() error {
			var p C.ull
			if r := C.m2n_cuIpcOpenMemHandle(&p, (*C.char)(unsafe.Pointer(&handles[64*j]))); r != 0 {
				return cuErr("cuIpcOpenMemHandle", r)
			}
			out[j] = uint64(p)
			if g.ipcOpen == nil {
				g.ipcOpen = map[int][]uint64{}
			}
			g.ipcOpen[dev] = append(g.ipcOpen[dev], uint64(p))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// allGather gathers every rank's bytes (each len(mine)) through NCCL, in
// rank order, with dev's context current.
func (g *cudaGPU) allGather(dev int, mine []byte, comm handle, world int) ([]byte, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := g.use(dev); err != nil {
		return nil, err
	}
	n := len(mine)
	var buf C.ull
	if r := C.m2n_cuMemAlloc(&buf, C.size_t(n*(world+1))); r != 0 {
		return nil, cuErr("cuMemAlloc", r)
	}
	defer C.m2n_cuMemFree(buf)
	if r := C.m2n_cuMemcpyHtoD(buf, unsafe.Pointer(&mine[0]), C.size_t(n)); r != 0 {
		return nil, cuErr("cuMemcpyHtoD", r)
	}
	var st C.uptr
	if r := C.m2n_cuStreamCreate(&st); r != 0 {
		return nil, cuErr("cuStreamCreate", r)
	}
	defer C.m2n_cuStreamDestroy(st)
	var ar C.ncclResult_t
	if err := g.watched("ncclAllGather", func() C.ncclResult_t {
		ar = C.m2n_ncclAllGather(buf, buf+C.ull(n), C.size_t(n), C.uptr(comm), st)
		return 0
	}); err != nil {
		return nil, err
	}
	if ar != 0 && ar != ncclInProgress {
		return nil, ncclErr("ncclAllGather", ar, comm)
	}
	h := handle(st)
	g.owner[h] = dev
	defer delete(g.owner, h)
	if err := g.sync(h); err != nil {
		return nil, err
	}
	out := make([]byte, n*world)
	if r := C.m2n_cuMemcpyDtoH(unsafe.Pointer(&out[0]), buf+C.ull(n), C.size_t(n*world)); r != 0 {
		return nil, cuErr("cuMemcpyDtoH", r)
	}
	return out, nil
}

// barrier returns once every rank of the communicator has reached it.
func (g *cudaGPU) barrier(dev int, comm handle, world int) error {
	return g.on(dev, func() error {
		_, err := g.allGather(dev, []byte{1}, comm, world)
		return err
	})
}

func (g *cudaGPU) commList() []C.uptr {
	g.commMu.Lock()
	defer g.commMu.Unlock()
	return append([]C.uptr(nil), g.comms...)
}

// polled lists the communicators whose asynchronous state m2n polls:
// its own and a borrowed one (External), which is never aborted or
// destroyed.
func (g *cudaGPU) polled() []C.uptr {
	cs := g.commList()
	if g.lent != 0 {
		cs = append(cs, g.lent)
	}
	return cs
}

func (g *cudaGPU) commErrors() error {
	for _, c := range g.polled() {
		var st C.int
		if r := C.m2n_ncclCommGetAsyncError(c, &st); r != 0 {
			return ncclErr("ncclCommGetAsyncError", r, uintptr(c))
		}
		if st != 0 && st != ncclInProgress {
			return ncclErr("NCCL (asynchronous)", C.ncclResult_t(st), uintptr(c))
		}
	}
	return nil
}

// abort drops every communicator without waiting for its work; safe to
// call from another goroutine while an NCCL call blocks, and more than once.
func (g *cudaGPU) abort() {
	g.commMu.Lock()
	cs := g.comms
	g.comms, g.aborted = nil, g.aborted || len(cs) > 0
	g.commMu.Unlock()
	for _, c := range cs {
		C.m2n_ncclCommAbort(c)
	}
}

// watched runs an NCCL call that may block on a peer; if it has not
// returned after the timeout, every communicator is aborted (which makes
// the call return) and the result is a timeout.
func (g *cudaGPU) watched(call string, f func() C.ncclResult_t) error {
	if g.lent != 0 {
		// A borrowed communicator is the job's: m2n neither aborts it nor
		// ends the job's process when a call blocks (its framework's own
		// watchdog does, as for its other collectives).
		return ncclErr(call, f(), 0)
	}
	var r C.ncclResult_t
	why := func() string {
		return fmt.Sprintf("%v: %s did not return within %v: no progress from %s (a peer that stopped answering?)", ErrTimeout, call, g.timeout, g.peerNames())
	}
	if watchdog(func() { r = f() }, g.timeout, abortGrace, g.abort, why) {
		return fmt.Errorf("%w: %s did not return within %v: no progress from %s (a peer that stopped answering?); the NCCL communicators were aborted", ErrTimeout, call, g.timeout, g.peerNames())
	}
	return ncclErr(call, r, 0)
}

// peerNames names the ranks this process exchanges with, for a timeout's
// error: with one process per GPU, the schedule's ranks and their NCCL
// ranks; else the other GPUs of this process.
func (g *cudaGPU) peerNames() string {
	if g.peers == "" {
		return "a peer"
	}
	return g.peers
}

func (g *cudaGPU) groupStart() error { return ncclErr("ncclGroupStart", C.m2n_ncclGroupStart(), 0) }

func (g *cudaGPU) groupEnd() error {
	var r C.ncclResult_t
	if err := g.watched("ncclGroupEnd", func() C.ncclResult_t { r = C.m2n_ncclGroupEnd(); return 0 }); err != nil {
		return err
	}
	if r == ncclInProgress { // non-blocking communicators: wait for the group to be enqueued
		ok, err := poll(g.timeout, func() (bool, error) {
			pending := false
			for _, c := range g.polled() {
				var st C.int
				C.m2n_ncclCommGetAsyncError(c, &st)
				if st == ncclInProgress {
					pending = true
				} else if st != 0 {
					return false, ncclErr("ncclGroupEnd", C.ncclResult_t(st), uintptr(c))
				}
			}
			return !pending, nil
		})
		if err != nil || !ok {
			g.abort()
		}
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: an NCCL group did not launch within %v", ErrTimeout, g.timeout)
		}
		return nil
	}
	return ncclErr("ncclGroupEnd", r, 0)
}

func (g *cudaGPU) send(src uint64, n int64, peer int, comm handle, st handle) error {
	return g.on(g.owner[st], func() error {
		r := C.m2n_ncclSend(C.ull(src), C.size_t(n), C.int(peer), C.uptr(comm), C.uptr(st))
		if r == ncclInProgress {
			return nil
		}
		return ncclErr("ncclSend", r, comm)
	})
}

func (g *cudaGPU) recv(dst uint64, n int64, peer int, comm handle, st handle) error {
	return g.on(g.owner[st], func() error {
		r := C.m2n_ncclRecv(C.ull(dst), C.size_t(n), C.int(peer), C.uptr(comm), C.uptr(st))
		if r == ncclInProgress {
			return nil
		}
		return ncclErr("ncclRecv", r, comm)
	})
}

// initNCCL creates the communicators: one over all local devices in one
// process, or this process's rank of a launcher's world.
func (g *cudaGPU) initNCCL(opt Options, devs []int, comms map[int][]handle) error {
	if err := loadNCCL(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if opt.Launch == nil {
		// Loopback: every transfer is a self send/recv of one rank, and
		// NCCL runs one peer's operations in order, one at a time; several
		// one-rank communicators (each ordered pair of the schedule on one)
		// run their queues concurrently.
		sets := 1
		if opt.Backend == Loopback {
			sets = opt.Comms
		}
		cd := make([]C.int, len(devs))
		for i, d := range devs {
			cd[i] = C.int(d)
		}
		for range sets {
			cs := make([]C.uptr, len(devs))
			if r := C.m2n_ncclCommInitAll(&cs[0], C.int(len(devs)), &cd[0]); r != 0 {
				return ncclErr("ncclCommInitAll", r, 0)
			}
			g.commMu.Lock()
			for i, d := range devs {
				comms[d] = append(comms[d], handle(cs[i]))
				g.comms = append(g.comms, cs[i])
			}
			g.commMu.Unlock()
		}
		return nil
	}
	l := opt.Launch
	id := make([]byte, 128)
	if l.Rank == 0 || l.NCCLCommID != "" {
		if r := C.m2n_ncclGetUniqueId((*C.char)(unsafe.Pointer(&id[0]))); r != 0 {
			return ncclErr("ncclGetUniqueId", r, 0)
		}
	}
	addr := fmt.Sprintf("%s:%d", l.MasterAddr, l.MasterPort)
	serveErr := make(chan error, 1)
	if l.NCCLCommID == "" && l.World > 1 {
		if l.Rank == 0 {
			go func() { serveErr <- ServeID(addr, id, l.World, opt.Timeout) }()
		} else {
			got, err := FetchID(addr, 128, opt.Timeout)
			if err != nil {
				return err
			}
			id = got
		}
	}
	g.use(devs[0])
	var c C.uptr
	r := C.m2n_ncclCommInitRank(&c, C.int(l.World), (*C.char)(unsafe.Pointer(&id[0])), C.int(l.Rank), 0)
	if r != 0 && r != ncclInProgress {
		return ncclErr("ncclCommInitRankConfig", r, 0)
	}
	g.commMu.Lock()
	g.comms = append(g.comms, c)
	g.commMu.Unlock()
	deadline := time.Now().Add(opt.Timeout)
	for {
		var st C.int
		C.m2n_ncclCommGetAsyncError(c, &st)
		if st == 0 {
			break
		}
		if st != ncclInProgress {
			g.abort()
			return ncclErr("ncclCommInitRankConfig", C.ncclResult_t(st), uintptr(c))
		}
		if time.Now().After(deadline) {
			g.abort()
			return fmt.Errorf("%w: the NCCL communicator of %d ranks did not form within %v: no answer from %s (a rank that never joined, or stopped?)", ErrTimeout, l.World, opt.Timeout, g.peerNames())
		}
		time.Sleep(time.Millisecond)
	}
	if l.Rank == 0 && l.NCCLCommID == "" && l.World > 1 {
		if err := <-serveErr; err != nil {
			return err
		}
	}
	if os.Getenv("M2N_NCCL_BLOCKING") == "0" {
		comms[devs[0]] = []handle{handle(c)}
		return nil
	}
	// The ops run on a blocking child communicator: a non-blocking one
	// hands every ncclGroupEnd to a thread of NCCL's and must be polled
	// until the group is enqueued, about 80 us a group on two H200s
	// (docs/calibration.md). The parent, non-blocking, formed under the
	// timeout above; the watchdog covers the child's blocking calls.
	// The child's handle lives in C memory: with a non-blocking parent,
	// NCCL may write it after the call returns.
	slot := (*C.uptr)(C.calloc(1, C.size_t(unsafe.Sizeof(C.uptr(0)))))
	defer C.free(unsafe.Pointer(slot))
	var sr C.ncclResult_t
	if err := g.watched("ncclCommSplit", func() C.ncclResult_t { sr = C.m2n_ncclCommSplit(c, 0, C.int(l.Rank), slot, 1); return 0 }); err != nil {
		return err
	}
	if sr != 0 && sr != ncclInProgress {
		g.abort()
		return ncclErr("ncclCommSplit", sr, uintptr(c))
	}
	var child C.uptr
	for deadline := time.Now().Add(opt.Timeout); ; {
		var pst, cst C.int
		C.m2n_ncclCommGetAsyncError(c, &pst)
		if child = *slot; child != 0 {
			if r := C.m2n_ncclCommGetAsyncError(child, &cst); r != 0 {
				cst = C.int(r)
			}
		}
		if pst != 0 && pst != ncclInProgress {
			g.abort()
			return ncclErr("ncclCommSplit", C.ncclResult_t(pst), uintptr(c))
		}
		if child != 0 && cst != 0 && cst != ncclInProgress {
			g.abort()
			return ncclErr("ncclCommSplit", C.ncclResult_t(cst), uintptr(child))
		}
		if child != 0 && pst == 0 && cst == 0 {
			break
		}
		if time.Now().After(deadline) {
			g.abort()
			return fmt.Errorf("%w: ncclCommSplit did not finish within %v: no answer from %s", ErrTimeout, opt.Timeout, g.peerNames())
		}
		time.Sleep(100 * time.Microsecond)
	}
	g.commMu.Lock()
	g.comms = append(g.comms, child)
	g.commMu.Unlock()
	comms[devs[0]] = []handle{handle(child)}
	return nil
}
