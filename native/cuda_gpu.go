//go:build linux && cgo

package native

// The device layer over the CUDA driver and NVRTC: contexts, memory,
// streams, events, kernels, copies and graphs (cuda_nccl.go: NCCL;
// cuda_new.go: New; cuda_bench.go: the benchmarks).

/*
#include <stdlib.h>
#include "m2n_cuda.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/m2n-project/m2n/kernels"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/program"
)

// CUDA constants.
const (
	attrSMCount        = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrCCMajor        = 75
	attrCCMinor        = 76
	errNotReady        = 600 // CUDA_ERROR_NOT_READY
	ncclInProgress     = 7
	eventDisableTime   = 2 // CU_EVENT_DISABLE_TIMING
	nvrtcInvalidOption = 5 // NVRTC_ERROR_INVALID_OPTION
)

// cubins caches compiled kernels per architecture for the process.
var (
	cubinMu sync.Mutex
	cubins  = map[string][]byte{}
)

// cudaGPU is the device layer over the CUDA driver, NVRTC and NCCL.
type cudaGPU struct {
	ctx   map[int]C.uptr
	sms   map[int]int
	names map[int]string
	archs map[int]string
	funcs map[int]map[string]C.uptr
	owner map[handle]int // stream or event -> device
	// borrowed: streams of the caller's (External) that close must not
	// destroy.
	borrowed map[handle]bool
	isEvent  map[handle]bool // which handles are events (the rest are streams)
	counter  map[int]uint64  // device -> 16 bytes for verify's counters
	timeout  time.Duration
	graphs   []C.uptr

	// commMu guards comms, which abort may empty from the watchdog's
	// goroutine while a blocking NCCL call waits on another thread.
	commMu sync.Mutex
	comms  []C.uptr // every communicator, for errors and abort
	// watched: NCCL calls that can block on a peer (a blocking
	// communicator's ncclGroupEnd, ncclCommSplit) run under a watchdog that
	// aborts every communicator after the timeout, as PyTorch's
	// ProcessGroupNCCL does.
	aborted bool
	ipcOpen map[int][]uint64 // device -> peers' arenas mapped here (CUDA IPC)
	// peers names the ranks this process exchanges with ("rank 1 (NCCL
	// rank 1)"), for the error of a timeout.
	peers string
	// lent is a borrowed communicator (External): polled for errors, never
	// aborted or destroyed, and its calls not under m2n's watchdog.
	lent C.uptr
}

func cudaDevice(ord int) (C.int, error) {
	var d C.int
	if r := C.m2n_cuDeviceGet(&d, C.int(ord)); r != 0 {
		return 0, cuErr("cuDeviceGet", r)
	}
	return d, nil
}

// DeviceInfo describes a GPU as CUDA sees it.
type DeviceInfo struct {
	Index    int
	Name     string
	Memory   int64 // bytes
	PCIBusID string
	Arch     string // sm_XX
	SMs      int
}

// Devices lists the GPUs the CUDA driver sees.
func Devices() ([]DeviceInfo, error) {
	if err := loadCUDA(); err != nil {
		return nil, err
	}
	var n C.int
	if r := C.m2n_cuDeviceGetCount(&n); r != 0 {
		return nil, cuErr("cuDeviceGetCount", r)
	}
	var out []DeviceInfo
	for i := range int(n) {
		d, err := cudaDevice(i)
		if err != nil {
			return nil, err
		}
		var buf [256]C.char
		info := DeviceInfo{Index: i}
		if r := C.m2n_cuDeviceGetName(&buf[0], C.int(len(buf)), d); r == 0 {
			info.Name = C.GoString(&buf[0])
		}
		var mem C.size_t
		if r := C.m2n_cuDeviceTotalMem(&mem, d); r == 0 {
			info.Memory = int64(mem)
		}
		if r := C.m2n_cuDeviceGetPCIBusId(&buf[0], C.int(len(buf)), d); r == 0 {
			info.PCIBusID = C.GoString(&buf[0])
		}
		var maj, min, sms C.int
		C.m2n_cuDeviceGetAttribute(&maj, attrCCMajor, d)
		C.m2n_cuDeviceGetAttribute(&min, attrCCMinor, d)
		C.m2n_cuDeviceGetAttribute(&sms, attrSMCount, d)
		info.Arch = fmt.Sprintf("sm_%d%d", maj, min)
		info.SMs = int(sms)
		out = append(out, info)
	}
	return out, nil
}

func newCUDA(devs []int, timeout time.Duration) (*cudaGPU, error) {
	if err := loadCUDA(); err != nil {
		return nil, err
	}
	if err := loadNVRTC(); err != nil {
		return nil, err
	}
	infos, err := Devices()
	if err != nil {
		return nil, err
	}
	if len(infos) == 0 {
		return nil, ErrNoDevice
	}
	g := &cudaGPU{ctx: map[int]C.uptr{}, sms: map[int]int{}, names: map[int]string{}, archs: map[int]string{},
		funcs: map[int]map[string]C.uptr{}, owner: map[handle]int{}, isEvent: map[handle]bool{}, counter: map[int]uint64{}, timeout: timeout}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, dv := range devs {
		if dv < 0 || dv >= len(infos) {
			return nil, fmt.Errorf("GPU %d: the driver sees %d GPUs (0-%d)", dv, len(infos), len(infos)-1)
		}
		d, err := cudaDevice(dv)
		if err != nil {
			return nil, err
		}
		var ctx C.uptr
		if r := C.m2n_cuDevicePrimaryCtxRetain(&ctx, d); r != 0 {
			return nil, cuErr("cuDevicePrimaryCtxRetain", r)
		}
		g.ctx[dv] = ctx
		g.sms[dv], g.names[dv], g.archs[dv] = infos[dv].SMs, infos[dv].Name, infos[dv].Arch
		if err := g.loadKernels(dv); err != nil {
			return nil, err
		}
		g.use(dv)
		var p C.ull
		if r := C.m2n_cuMemAlloc(&p, 16); r != 0 {
			return nil, cuErr("cuMemAlloc", r)
		}
		g.counter[dv] = uint64(p)
	}
	return g, nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// enablePeers lets every device read and write every other's memory, so a
// device copy between two GPUs runs over NVLink by the copy engines.
func (g *cudaGPU) enablePeers(devs []int) error {
	for _, a := range devs {
		for _, b := range devs {
			if a == b {
				continue
			}
			var can C.int
			da, err := cudaDevice(a)
			if err != nil {
				return err
			}
			db, err := cudaDevice(b)
			if err != nil {
				return err
			}
			if r := C.m2n_cuDeviceCanAccessPeer(&can, da, db); r != 0 {
				return cuErr("cuDeviceCanAccessPeer", r)
			}
			if can == 0 {
				return fmt.Errorf("GPU %d cannot access GPU %d's memory directly (no NVLink or PCIe peer path); use --transport nccl", a, b)
			}
			err = g.on(a, func() error {
				r := C.m2n_cuCtxEnablePeerAccess(g.ctx[b])
				if r == 704 { // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
					return nil
				}
				return cuErr("cuCtxEnablePeerAccess", r)
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// use makes a device's context current on this thread.
func (g *cudaGPU) use(dev int) error {
	if r := C.m2n_cuCtxSetCurrent(g.ctx[dev]); r != 0 {
		return cuErr("cuCtxSetCurrent", r)
	}
	return nil
}

// on runs f with dev's context current, on a locked OS thread.
func (g *cudaGPU) on(dev int, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := g.use(dev); err != nil {
		return err
	}
	return f()
}

// compileKernels builds the kernels for an architecture with NVRTC, once
// per process.
func compileKernels(arch string) ([]byte, error) {
	cubinMu.Lock()
	defer cubinMu.Unlock()
	if b, ok := cubins[arch]; ok {
		return b, nil
	}
	b, err := compileSource(kernels.Source, kernelOptions(arch, true)...)
	if ce := (*CompileError)(nil); errors.As(err, &ce) && ce.Code == nvrtcInvalidOption {
		// An NVRTC before split compilation (CUDA 12.1).
		b, err = compileSource(kernels.Source, kernelOptions(arch, false)...)
	}
	if err == nil {
		cubins[arch] = b
	}
	return b, err
}

// splitCompile has NVRTC run its optimization passes on every core
// (CUDA 12.1 and later; compileKernels retries without it before): the
// kernels compile in 5.5-6.1 s instead of 10.6-16.1 s on an H200's
// 16-core host (BenchmarkGPUCompile). CUDA's compute cache
// (~/.nv/ComputeCache) keeps the result for later processes.
const splitCompile = "--split-compile=0"

// kernelOptions are NVRTC's options for the kernels on arch (sm_XX), with
// split compilation or not.
func kernelOptions(arch string, split bool) []string {
	opts := []string{"--gpu-architecture=" + arch, "--std=c++17"}
	if split {
		opts = append(opts, splitCompile)
	}
	return opts
}

// compileSource compiles CUDA C++ to a cubin with NVRTC's options opts
// (the architecture among them: --gpu-architecture=sm_XX).
func compileSource(source string, opts ...string) ([]byte, error) {
	src := C.CString(source)
	defer C.free(unsafe.Pointer(src))
	copts := make([]*C.char, len(opts))
	for i, o := range opts {
		copts[i] = C.CString(o)
		defer C.free(unsafe.Pointer(copts[i]))
	}
	arch := "?"
	for _, o := range opts {
		if a, ok := strings.CutPrefix(o, "--gpu-architecture="); ok {
			arch = a
		}
	}
	var arr **C.char // Go memory holding C pointers only: C may read it
	if len(copts) > 0 {
		arr = &copts[0]
	}
	var prog C.uptr
	r := C.m2n_nvrtcCompile(src, arr, C.int(len(copts)), &prog)
	if prog != 0 {
		defer C.m2n_nvrtcDestroy(prog)
	}
	if r != 0 {
		var n C.size_t
		log := C.GoString(C.m2n_nvrtcError(r))
		if prog != 0 && C.m2n_nvrtcLogSize(prog, &n) == 0 && n > 1 {
			buf := make([]byte, n)
			C.m2n_nvrtcLog(prog, (*C.char)(unsafe.Pointer(&buf[0])))
			log += "\n" + strings.TrimRight(string(buf), "\x00")
		}
		return nil, &CompileError{Arch: arch, Log: log, Code: int(r)}
	}
	var n C.size_t
	if r := C.m2n_nvrtcCubinSize(prog, &n); r != 0 {
		return nil, fmt.Errorf("nvrtcGetCUBINSize: %s", C.GoString(C.m2n_nvrtcError(r)))
	}
	buf := make([]byte, n)
	if r := C.m2n_nvrtcCubin(prog, (*C.char)(unsafe.Pointer(&buf[0]))); r != 0 {
		return nil, fmt.Errorf("nvrtcGetCUBIN: %s", C.GoString(C.m2n_nvrtcError(r)))
	}
	return buf, nil
}

func (g *cudaGPU) loadKernels(dev int) error {
	cubin, err := compileKernels(g.archs[dev])
	if err != nil {
		return err
	}
	return g.on(dev, func() error {
		img := C.CBytes(cubin)
		defer C.free(img)
		var mod C.uptr
		if r := C.m2n_cuModuleLoadData(&mod, img); r != 0 {
			return cuErr("cuModuleLoadData", r)
		}
		g.funcs[dev] = map[string]C.uptr{}
		for _, name := range kernels.Names {
			cs := C.CString(name)
			var f C.uptr
			r := C.m2n_cuModuleGetFunction(&f, mod, cs)
			C.free(unsafe.Pointer(cs))
			if r != 0 {
				return cuErr("cuModuleGetFunction("+name+")", r)
			}
			g.funcs[dev][name] = f
		}
		return nil
	})
}

func (g *cudaGPU) name(dev int) string { return g.names[dev] }

func (g *cudaGPU) arch(dev int) string { return g.archs[dev] }

func (g *cudaGPU) memInfo(dev int) (free, total int64, err error) {
	err = g.on(dev, func() error {
		var f, t C.size_t
		if r := C.m2n_cuMemGetInfo(&f, &t); r != 0 {
			return cuErr("cuMemGetInfo", r)
		}
		free, total = int64(f), int64(t)
		return nil
	})
	return
}

func (g *cudaGPU) alloc(dev int, n int64) (p uint64, err error) {
	err = g.on(dev, func() error {
		var d C.ull
		if r := C.m2n_cuMemAlloc(&d, C.size_t(n)); r != 0 {
			return cuErr("cuMemAlloc", r)
		}
		p = uint64(d)
		return nil
	})
	return
}

func (g *cudaGPU) free(dev int, p uint64) error {
	if g.wasAborted() {
		// A kernel waiting for a lost peer may still run: a free would wait
		// for it. The process's end releases the memory.
		return nil
	}
	return g.on(dev, func() error { return cuErr("cuMemFree", C.m2n_cuMemFree(C.ull(p))) })
}

// wasAborted reports whether the communicators were aborted after a
// failure.
func (g *cudaGPU) wasAborted() bool {
	g.commMu.Lock()
	defer g.commMu.Unlock()
	return g.aborted
}

func (g *cudaGPU) newStream(dev int) (h handle, err error) {
	err = g.on(dev, func() error {
		var s C.uptr
		if r := C.m2n_cuStreamCreate(&s); r != 0 {
			return cuErr("cuStreamCreate", r)
		}
		h = handle(s)
		g.owner[h] = dev
		return nil
	})
	return
}

func (g *cudaGPU) newEvent(dev int, timing bool) (h handle, err error) {
	err = g.on(dev, func() error {
		var e C.uptr
		flags := C.uint(eventDisableTime)
		if timing {
			flags = 0
		}
		if r := C.m2n_cuEventCreate(&e, flags); r != 0 {
			return cuErr("cuEventCreate", r)
		}
		h = handle(e)
		g.owner[h] = dev
		g.isEvent[h] = true
		return nil
	})
	return
}

func (g *cudaGPU) record(ev, st handle) error {
	return g.on(g.owner[st], func() error { return cuErr("cuEventRecord", C.m2n_cuEventRecord(C.uptr(ev), C.uptr(st))) })
}

func (g *cudaGPU) recordNode(ev, st handle) error {
	return g.on(g.owner[st], func() error {
		return cuErr("cuEventRecordWithFlags", C.m2n_cuEventRecordExternal(C.uptr(ev), C.uptr(st)))
	})
}

func (g *cudaGPU) wait(st, ev handle) error {
	return g.on(g.owner[st], func() error { return cuErr("cuStreamWaitEvent", C.m2n_cuStreamWaitEvent(C.uptr(st), C.uptr(ev))) })
}

func (g *cudaGPU) elapsed(a, b handle) (t units.Time, err error) {
	err = g.on(g.owner[a], func() error {
		var ms C.float
		if r := C.m2n_cuEventElapsedTime(&ms, C.uptr(a), C.uptr(b)); r != 0 {
			return cuErr("cuEventElapsedTime", r)
		}
		t = units.Time(float64(ms) * float64(units.Millisecond))
		return nil
	})
	return
}

// sync waits for a stream. With NCCL communicators it polls, checking them
// for asynchronous errors, and gives up after the timeout: a peer that never
// arrives is an error, never a hang.
func (g *cudaGPU) sync(st handle) error {
	return g.on(g.owner[st], func() error {
		if len(g.comms) == 0 {
			return cuErr("cuStreamSynchronize", C.m2n_cuStreamSynchronize(C.uptr(st)))
		}
		var qerr error
		ok, err := poll(g.timeout, func() (bool, error) {
			r := C.m2n_cuStreamQuery(C.uptr(st))
			if r == 0 {
				return true, nil
			}
			if r != errNotReady {
				qerr = cuErr("cuStreamQuery", r)
				return false, qerr
			}
			return false, g.commErrors()
		})
		switch {
		case qerr != nil:
			return qerr
		case err != nil:
			err = fmt.Errorf("%w (this rank exchanges with %s)", err, g.peerNames())
			abortWithin(g.abort, abortGrace, err.Error())
			return err
		case !ok:
			err := fmt.Errorf("%w: GPU work did not finish within %v: no progress from %s (a peer that stopped answering or never posted its side?); the NCCL communicators were aborted", ErrTimeout, g.timeout, g.peerNames())
			abortWithin(g.abort, abortGrace, err.Error())
			return err
		}
		return nil
	})
}

// spinFor is how long poll spins before it sleeps between checks.
const spinFor = 20 * time.Millisecond

// poll calls done until it reports true or an error, or timeout passes
// (false, nil). Most waits here end within microseconds (an NCCL group
// being enqueued, a wave finishing), so it first spins, yielding to other
// goroutines: a sleep shorter than a millisecond can last about one
// millisecond in the Go runtime on Linux, and it added that much to every
// NCCL wave of a run with one process per GPU (flat on paper-2gpu: 72.7 ms
// with sleeps, 6.19 ms spinning; docs/calibration.md). After spinFor it
// sleeps 100 us between checks.
func poll(timeout time.Duration, done func() (bool, error)) (bool, error) {
	start := time.Now()
	for {
		ok, err := done()
		if ok || err != nil {
			return ok, err
		}
		waited := time.Since(start)
		if waited > timeout {
			return false, nil
		}
		if waited < spinFor {
			runtime.Gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

func (g *cudaGPU) copy(dst, src uint64, n int64, st handle) error {
	return g.on(g.owner[st], func() error {
		return cuErr("cuMemcpyDtoDAsync", C.m2n_cuMemcpyDtoDAsync(C.ull(dst), C.ull(src), C.size_t(n), C.uptr(st)))
	})
}

func (g *cudaGPU) adopt(dev int, st handle) {
	if g.borrowed == nil {
		g.borrowed = map[handle]bool{}
	}
	g.owner[st], g.borrowed[st] = dev, true
}

// waitValue makes st wait until the 32-bit word at addr equals v, and
// clears it: a one-thread flag_wait kernel, which holds no stream channel
// as a cuStreamWaitValue32 would while it waits.
func (g *cudaGPU) waitValue(st handle, addr uint64, v uint32) error {
	// The kernel gives up after the host's wait would have timed out and
	// aborted (timeout, then abortGrace), plus 2 s: the host reports the
	// silent peer first.
	args := flagArgs{Addr: addr, TimeoutNs: math.MaxUint64, Value: v}
	if g.timeout > 0 {
		args.TimeoutNs = uint64((g.timeout + abortGrace + 2*time.Second).Nanoseconds())
	}
	return g.launch(g.owner[st], "flag_wait", 1, 1, st, unsafe.Pointer(&args), unsafe.Sizeof(args), 0, 1)
}

// writeValue writes v to the 32-bit word at addr on st, after (and
// fenced behind) the stream's earlier work.
func (g *cudaGPU) writeValue(st handle, addr uint64, v uint32) error {
	return g.on(g.owner[st], func() error {
		return cuErr("cuStreamWriteValue32", C.m2n_cuStreamWriteValue32(C.uptr(st), C.ull(addr), C.uint(v)))
	})
}

func (g *cudaGPU) launch(dev int, kernel string, grid, block int, st handle, arg unsafe.Pointer, size uintptr, extra uint64, nargs int) error {
	f, ok := g.funcs[dev][kernel]
	if !ok {
		return fmt.Errorf("no kernel %q", kernel)
	}
	return g.on(dev, func() error {
		r := C.m2n_launch(f, C.uint(grid), C.uint(block), C.uptr(st), arg, C.size_t(size), C.ull(extra), C.int(nargs))
		return cuErr("cuLaunchKernel("+kernel+")", r)
	})
}

// Launch geometry of the long-run box copy: threads per block, and blocks
// per SM at most (the grid strides over the work). On an H200, 512 x 4 beat
// 256 x 8 by 3-5% on the paper's pack box in three sessions
// (docs/native.md); short runs keep 256 x 8, which measured better there.
var (
	copyBlock     = 512
	copyBlocksPer = 4
)

const shortBlock, shortBlocksPer = 256, 8

func (g *cudaGPU) copyOn(a *boxArgs, kernel string, blocks int, st handle) error {
	dev := g.owner[st]
	grid := min(a.Runs*a.SegsPerRun, int64(blocks))
	args := *a
	return g.launch(dev, kernel, int(max(grid, 1)), copyBlock, st, unsafe.Pointer(&args), unsafe.Sizeof(args), 0, 1)
}

func (g *cudaGPU) boxCopy(a *boxArgs, kernel string, st handle) error {
	dev := g.owner[st]
	blocks := int64(copyBlocksPer * g.sms[dev])
	var grid int64
	switch {
	case strings.Contains(kernel, "long"):
		grid = min(a.Runs*a.SegsPerRun, blocks)
		args := *a // a Go value without Go pointers, copied by the C side
		return g.launch(dev, kernel, int(max(grid, 1)), copyBlock, st, unsafe.Pointer(&args), unsafe.Sizeof(args), 0, 1)
	case kernel == "box_copy_stage":
		// A warp per 4 KiB piece; the kernel's shared memory holds 8 warps.
		pieces := a.Runs * ((a.RunBytes + 4095) / 4096)
		grid = min((pieces+7)/8, int64(shortBlocksPer*g.sms[dev]))
	default:
		// One vector a thread, four per thread in flight.
		vecs := a.Runs * max(a.RunBytes/16, 1)
		grid = min((vecs+4*shortBlock-1)/(4*shortBlock), int64(shortBlocksPer*g.sms[dev]))
	}
	args := *a
	return g.launch(dev, kernel, int(max(grid, 1)), shortBlock, st, unsafe.Pointer(&args), unsafe.Sizeof(args), 0, 1)
}

// batchBlocksShared is how many thread blocks (of copyBlock threads) a
// batch of box copies runs on while NCCL kernels share the GPU (waves
// mode): a batch on every multiprocessor delays the next group's NCCL
// kernel. On two H200s, dense-2gpu's flat schedule ran in 32.7, 32.3,
// 33.1 and 37.6 ms with 16, 32, 64 and 264 blocks (docs/native.md);
// M2N_BATCH_BLOCKS overrides it, to measure.
var batchBlocksShared = envInt("M2N_BATCH_BLOCKS", 32)

func (g *cudaGPU) batchCopy(a *batchArgs, shared bool, st handle) error {
	dev := g.owner[st]
	blocks, kernel := int64(copyBlocksPer*g.sms[dev]), "box_copy_batch_ranges"
	if shared {
		blocks, kernel = int64(batchBlocksShared), "box_copy_batch"
	}
	grid := min(a.Units, blocks)
	args := *a
	return g.launch(dev, kernel, int(max(grid, 1)), copyBlock, st, unsafe.Pointer(&args), unsafe.Sizeof(args), 0, 1)
}

func (g *cudaGPU) fill(a *patternArgs, st handle) error {
	dev := g.owner[st]
	args := *a
	grid := min((a.Elems+255)/256, int64(8*g.sms[dev]))
	return g.launch(dev, "fill", int(max(grid, 1)), 256, st, unsafe.Pointer(&args), unsafe.Sizeof(args), 0, 1)
}

// quantBlocksShared, when positive, is the most thread blocks a quantize
// kernel runs on beside NCCL kernels (waves mode); 0 leaves its own
// geometry. M2N_QUANT_BLOCKS sets it, to measure.
var quantBlocksShared = envInt("M2N_QUANT_BLOCKS", 0)

func (g *cudaGPU) quantize(a *quantArgs, kernel string, shared bool, st handle) error {
	args := *a
	if program.IsSplitKernel(kernel) {
		// Two launches over the box's tiles: the blocks' amax, then the
		// bytes and scales.
		if args.Work == 0 {
			return fmt.Errorf("%s: no work memory planned", kernel)
		}
		tiles := a.Lead * a.Rows * a.NBC
		if err := g.launchQuant(kernel, kernel+"_amax", tiles, shared, st, unsafe.Pointer(&args), unsafe.Sizeof(args)); err != nil {
			return err
		}
		return g.launchQuant(kernel, kernel+"_apply", tiles, shared, st, unsafe.Pointer(&args), unsafe.Sizeof(args))
	}
	return g.launchQuant(kernel, kernel, a.Lead*a.NBR*a.NBC, shared, st, unsafe.Pointer(&args), unsafe.Sizeof(args))
}

func (g *cudaGPU) quantizeBatch(a *quantBatchArgs, kernel string, shared bool, st handle) error {
	args := *a
	return g.launchQuant(kernel, kernel+"_batch", a.Blocks, shared, st, unsafe.Pointer(&args), unsafe.Sizeof(args))
}

// launchQuant launches fn, a form of quantize kernel kernel, over nb
// quantization blocks with kernel's geometry (quantGrid).
func (g *cudaGPU) launchQuant(kernel, fn string, nb int64, shared bool, st handle, arg unsafe.Pointer, size uintptr) error {
	dev := g.owner[st]
	most := 0
	if shared {
		most = quantBlocksShared
	}
	threads, grid := quantGrid(kernel, nb, g.sms[dev], most)
	return g.launch(dev, fn, int(max(grid, 1)), threads, st, arg, size, 0, 1)
}

func (g *cudaGPU) verifyQuant(a *quantCheckArgs, st handle) (bad, first int64, err error) {
	args := *a
	var lead int64 = 1
	for d := 0; d < int(a.ND)-2; d++ {
		lead *= a.Size[d]
	}
	rows, cols := a.Size[a.ND-2], a.Size[a.ND-1]
	nbc := (cols + a.BC - 1) / a.BC
	blocks := lead * ((rows + a.BR - 1) / a.BR) * nbc
	if blocks == 0 {
		return 0, 0, nil // nothing to check
	}
	if min(a.BR, rows)*min(a.BC, cols) < program.SplitMinElems {
		return g.verifyWith(st, "verify_quant", blocks, unsafe.Pointer(&args), unsafe.Sizeof(args))
	}
	// Blocks too large for a thread block each (per tensor): over tiles,
	// their amax first.
	dev := g.owner[st]
	n := 4 * blocks
	w, err := g.alloc(dev, n)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if ferr := g.free(dev, w); err == nil && ferr != nil {
			err = fmt.Errorf("freeing the check's work memory: %w", ferr)
		}
	}()
	if err := g.upload(dev, w, make([]byte, n)); err != nil {
		return 0, 0, err
	}
	args.Work = w
	tiles := lead * rows * nbc
	if err := g.launch(dev, "verify_quant_amax", int(max(1, min(tiles, int64(8*g.sms[dev])))), 256, st, unsafe.Pointer(&args), unsafe.Sizeof(args), g.counter[dev], 2); err != nil {
		return 0, 0, err
	}
	return g.verifyWith(st, "verify_quant_tiles", tiles, unsafe.Pointer(&args), unsafe.Sizeof(args))
}

func (g *cudaGPU) verify(a *patternArgs, st handle) (bad, first int64, err error) {
	args := *a
	return g.verifyWith(st, "verify", (a.Elems+255)/256, unsafe.Pointer(&args), unsafe.Sizeof(args))
}

// verifyWith runs a verify kernel (its argument struct, then the counter)
// on up to `blocks` blocks of 256 threads and returns the count of wrong
// elements and the first.
func (g *cudaGPU) verifyWith(st handle, kernel string, blocks int64, arg unsafe.Pointer, size uintptr) (bad, first int64, err error) {
	dev := g.owner[st]
	cnt := g.counter[dev]
	err = g.on(dev, func() error {
		if r := C.m2n_cuMemsetD8Async(C.ull(cnt), 0, 8, C.uptr(st)); r != 0 {
			return cuErr("cuMemsetD8Async", r)
		}
		if r := C.m2n_cuMemsetD8Async(C.ull(cnt+8), 0xff, 8, C.uptr(st)); r != 0 {
			return cuErr("cuMemsetD8Async", r)
		}
		return nil
	})
	if err != nil {
		return
	}
	grid := min(blocks, int64(8*g.sms[dev]))
	if err = g.launch(dev, kernel, int(max(grid, 1)), 256, st, arg, size, cnt, 2); err != nil {
		return
	}
	if err = g.sync(st); err != nil {
		return
	}
	var out [2]uint64
	err = g.on(dev, func() error {
		return cuErr("cuMemcpyDtoH", C.m2n_cuMemcpyDtoH(unsafe.Pointer(&out[0]), C.ull(cnt), 16))
	})
	return int64(out[0]), int64(out[1]), err
}

func (g *cudaGPU) beginCapture(st handle) error {
	return g.on(g.owner[st], func() error {
		return cuErr("cuStreamBeginCapture", C.m2n_cuStreamBeginCapture(C.uptr(st), 0)) // global mode
	})
}

func (g *cudaGPU) endCapture(st handle) (h handle, err error) {
	err = g.on(g.owner[st], func() error {
		var graph, exec C.uptr
		if r := C.m2n_cuStreamEndCapture(C.uptr(st), &graph); r != 0 {
			return cuErr("cuStreamEndCapture", r)
		}
		g.graphs = append(g.graphs, graph)
		if r := C.m2n_cuGraphInstantiate(&exec, graph); r != 0 {
			return cuErr("cuGraphInstantiate", r)
		}
		h = handle(exec)
		return nil
	})
	return
}

func (g *cudaGPU) launchGraph(x, st handle) error {
	return g.on(g.owner[st], func() error { return cuErr("cuGraphLaunch", C.m2n_cuGraphLaunch(C.uptr(x), C.uptr(st))) })
}

func (g *cudaGPU) close() error {
	if g.wasAborted() {
		// As free: nothing that could wait for a stuck kernel.
		return nil
	}
	for dev, ps := range g.ipcOpen {
		g.on(dev, func() error {
			for _, p := range ps {
				C.m2n_cuIpcCloseMemHandle(C.ull(p))
			}
			return nil
		})
	}
	g.ipcOpen = nil
	for _, c := range g.commList() {
		C.m2n_ncclCommDestroy(c)
	}
	g.commMu.Lock()
	g.comms = nil
	g.commMu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for h, dev := range g.owner {
		if g.borrowed[h] {
			continue
		}
		g.use(dev)
		if g.isEvent[h] {
			C.m2n_cuEventDestroy(C.uptr(h))
		} else {
			C.m2n_cuStreamDestroy(C.uptr(h))
		}
	}
	for _, x := range g.graphs {
		C.m2n_cuGraphDestroy(x)
	}
	g.graphs = nil
	for dev, p := range g.counter {
		g.use(dev)
		C.m2n_cuMemFree(C.ull(p))
	}
	for dev := range g.ctx {
		d, err := cudaDevice(dev)
		if err == nil {
			C.m2n_cuDevicePrimaryCtxRelease(d)
		}
	}
	g.owner, g.isEvent, g.counter, g.ctx = map[handle]int{}, map[handle]bool{}, map[int]uint64{}, map[int]C.uptr{}
	return nil
}
