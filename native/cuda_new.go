//go:build linux && cgo

package native

// New: the executor on CUDA and NCCL, its backend, devices and transport
// resolved on this machine.

/*
#include <stdlib.h>
#include "m2n_cuda.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/program"
)

// New prepares a schedule for execution: opens the CUDA driver, NVRTC and
// (for NCCL) NCCL, compiles the kernels for the GPU, sets up communicators,
// checks that the buffers fit, and allocates them. Close releases it all.
func New(s *ir.Schedule, opt Options) (*Executor, error) {
	runtime.LockOSThread() // NCCL's group state and CUDA's current context are per thread
	defer runtime.UnlockOSThread()
	if opt.Timeout <= 0 {
		opt.Timeout = 5 * time.Minute
	}
	if v, err := strconv.Atoi(os.Getenv("M2N_LOCAL_COPY_BLOCKS")); err == nil && opt.LocalCopyBlocks == 0 {
		opt.LocalCopyBlocks = v // to measure: -1 is a whole-GPU device copy
	}
	if opt.Comms == 0 {
		// how many one-rank communicators loopback's NCCL transport opens
		// (docs/native.md measures it); 0 is program.DefaultLoopbackComms
		opt.Comms = envInt("M2N_LOOPBACK_COMMS", 0)
	}
	if os.Getenv("M2N_NO_BATCH") == "1" {
		opt.NoBatch = true // to measure what batch steps buy
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	if opt.External != nil {
		// The launch is the borrowed communicator's: its size, its rank and
		// its GPU.
		if opt.Backend != NCCL {
			return nil, fmt.Errorf("%w: a borrowed communicator runs on the nccl backend", ErrNotSupported)
		}
		if opt.Transport == TransportCopy {
			return nil, fmt.Errorf("%w: --transport copy on a caller's arrays (CUDA IPC of a caller's allocations is not built); use nccl", ErrNotSupported)
		}
		opt.Transport, opt.Graph = TransportNCCL, false
		if r := opt.External.Rank; r >= len(s.World) {
			return nil, fmt.Errorf("rank %d: the schedule has ranks 0..%d", r, len(s.World)-1)
		} else if r >= 0 {
			if _, err := externalBuffers(s, int32(s.World[r].Rank), -1, opt.External.Arrays); err != nil {
				return nil, err
			}
		}
		if opt.External.Comm == 0 {
			return nil, fmt.Errorf("communicator: a null ncclComm_t")
		}
		if err := loadLoadedNCCL(); err != nil {
			return nil, err
		}
		var count, rank, dev C.int
		if r := C.m2n_ncclCommInfo(C.uptr(opt.External.Comm), &count, &rank, &dev); r != 0 {
			return nil, ncclErr("ncclCommCount/UserRank/CuDevice of the borrowed communicator", r, 0)
		}
		if int(count) != len(s.World) {
			return nil, fmt.Errorf("communicator: %d ranks, but the schedule has %d; borrow a communicator over the job's whole world, one rank a GPU", int(count), len(s.World))
		}
		if r := opt.External.Rank; r >= 0 && r != int(rank) {
			return nil, fmt.Errorf("communicator: its rank is %d, but the caller said %d", int(rank), r)
		}
		opt.Launch = &LaunchEnv{Launcher: "borrowed communicator", Rank: int(rank), World: int(count), LocalRank: int(dev)}
	}
	auto := func() string {
		if err := loadCUDA(); err != nil {
			return TransportNCCL // New fails on the same error below
		}
		return autoTransport(s, opt.Launch)
	}
	if err := opt.settings(auto); err != nil {
		return nil, err
	}
	devOf, peerOf := map[int32]int{}, map[int32]int{}
	var devs []int
	switch opt.Backend {
	case Loopback:
		for _, r := range s.World {
			devOf[int32(r.Rank)], peerOf[int32(r.Rank)] = opt.Device, 0
		}
		devs = []int{opt.Device}
	case NCCL:
		if opt.Launch == nil {
			for i, r := range s.World {
				devOf[int32(r.Rank)], peerOf[int32(r.Rank)] = i, i
				devs = append(devs, i)
			}
		} else {
			if opt.Launch.World != len(s.World) {
				return nil, fmt.Errorf("the launcher started %d processes but the schedule has %d ranks; start one process per rank", opt.Launch.World, len(s.World))
			}
			me := int32(s.World[opt.Launch.Rank].Rank)
			devOf[me] = opt.Launch.LocalRank
			devs = []int{opt.Launch.LocalRank}
			for i, r := range s.World {
				peerOf[int32(r.Rank)] = i
			}
			if err := depsWithinRanks(s); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("backend %q: want %s or %s", opt.Backend, Loopback, NCCL)
	}
	g, err := newCUDA(devs, opt.Timeout)
	if err != nil {
		return nil, err
	}
	if opt.Launch != nil {
		g.peers = peerNames(s, int32(s.World[opt.Launch.Rank].Rank), peerOf)
	}
	comms := map[int][]handle{}
	if opt.Backend == NCCL && opt.Transport == TransportCopy {
		if err := g.enablePeers(devs); err != nil {
			g.close()
			return nil, err
		}
	}
	// NCCL moves the data of the nccl transport; under a launcher it also
	// exchanges the copy transport's CUDA IPC handles.
	if opt.External != nil {
		// Borrowed: not in g.comms, so never aborted or destroyed.
		comms[devs[0]] = []handle{handle(opt.External.Comm)}
		g.lent = C.uptr(opt.External.Comm)
	} else if opt.Transport == TransportNCCL || opt.Backend == NCCL && opt.Launch != nil {
		if err := g.initNCCL(opt, devs, comms); err != nil {
			g.close()
			return nil, err
		}
	}
	x, err := newExecutor(s, g, opt, devOf, peerOf, comms)
	if err != nil {
		g.close()
		return nil, err
	}
	return x, nil
}

// autoTransport resolves TransportAuto, the CUDA driver loaded: copies
// where every pair of GPUs
// can reach each other's memory in one host (one process over the local
// GPUs; under a launcher, every process on this host and a schedule whose
// receivers pull, program.Pullable), NCCL otherwise. Pushed schedules run with an
// explicit --transport copy: the MoE model's agbcast took 555 ms pushed
// against about 210 ms over NCCL (docs/native.md). Every process of a
// launch resolves it alike: the schedule and the launcher's variables are
// the same, and so are the GPUs of one host.
func autoTransport(s *ir.Schedule, l *LaunchEnv) string {
	if l != nil {
		if !l.OneHost || program.Pullable(s) != nil {
			return TransportNCCL
		}
		return TransportCopy
	}
	for a := range s.World {
		for b := range s.World {
			if a == b {
				continue
			}
			da, err1 := cudaDevice(a)
			db, err2 := cudaDevice(b)
			var can C.int
			if err1 != nil || err2 != nil || C.m2n_cuDeviceCanAccessPeer(&can, da, db) != 0 || can == 0 {
				return TransportNCCL
			}
		}
	}
	return TransportCopy
}
