//go:build linux && cgo

package native

/*
#include <stdlib.h>
#include "m2n_cuda.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/kernels"
	"github.com/m2n-project/m2n/model/units"
)

// CUDA constants.
const (
	attrSMCount      = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrCCMajor      = 75
	attrCCMinor      = 76
	errNotReady      = 600 // CUDA_ERROR_NOT_READY
	ncclInProgress   = 7
	eventDisableTime = 2 // CU_EVENT_DISABLE_TIMING
)

// cubins caches compiled kernels per architecture for the process.
var (
	cubinMu sync.Mutex
	cubins  = map[string][]byte{}
)

// cudaGPU is the device layer over the CUDA driver, NVRTC and NCCL.
type cudaGPU struct {
	ctx     map[int]C.uptr
	sms     map[int]int
	names   map[int]string
	archs   map[int]string
	funcs   map[int]map[string]C.uptr
	owner   map[handle]int  // stream or event -> device
	isEvent map[handle]bool // which handles are events (the rest are streams)
	counter map[int]uint64  // device -> 16 bytes for verify's counters
	timeout time.Duration
	graphs  []C.uptr

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
// rank order. The caller holds dev's context.
func (g *cudaGPU) allGather(dev int, mine []byte, comm handle, world int) ([]byte, error) {
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
	b, err := compileSource(kernels.Source, arch)
	if err == nil {
		cubins[arch] = b
	}
	return b, err
}

// compileSource compiles CUDA C++ to a cubin for arch (sm_XX).
func compileSource(source, arch string) ([]byte, error) {
	src := C.CString(source)
	defer C.free(unsafe.Pointer(src))
	opt := C.CString("--gpu-architecture=" + arch)
	defer C.free(unsafe.Pointer(opt))
	var prog C.uptr
	r := C.m2n_nvrtcCompile(src, opt, &prog)
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
		return nil, &CompileError{Arch: arch, Log: log}
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

func (g *cudaGPU) commList() []C.uptr {
	g.commMu.Lock()
	defer g.commMu.Unlock()
	return append([]C.uptr(nil), g.comms...)
}

func (g *cudaGPU) commErrors() error {
	for _, c := range g.commList() {
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

func (g *cudaGPU) copy(dst, src uint64, n int64, st handle) error {
	return g.on(g.owner[st], func() error {
		return cuErr("cuMemcpyDtoDAsync", C.m2n_cuMemcpyDtoDAsync(C.ull(dst), C.ull(src), C.size_t(n), C.uptr(st)))
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
	blocks := int64(copyBlocksPer * g.sms[dev])
	if shared {
		blocks = int64(batchBlocksShared)
	}
	grid := min(a.Units, blocks)
	args := *a
	return g.launch(dev, "box_copy_batch", int(max(grid, 1)), copyBlock, st, unsafe.Pointer(&args), unsafe.Sizeof(args), 0, 1)
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
	dev := g.owner[st]
	args := *a
	most := 0
	if shared {
		most = quantBlocksShared
	}
	threads, grid := quantGrid(kernel, a.Lead*a.NBR*a.NBC, g.sms[dev], most)
	return g.launch(dev, kernel, int(max(grid, 1)), threads, st, unsafe.Pointer(&args), unsafe.Sizeof(args), 0, 1)
}

func (g *cudaGPU) verifyQuant(a *quantCheckArgs, st handle) (bad, first int64, err error) {
	args := *a
	var blocks int64 = 1
	for d := 0; d < int(a.ND)-2; d++ {
		blocks *= a.Size[d]
	}
	blocks *= (a.Size[a.ND-2] + a.BR - 1) / a.BR * ((a.Size[a.ND-1] + a.BC - 1) / a.BC)
	return g.verifyWith(st, "verify_quant", blocks, unsafe.Pointer(&args), unsafe.Sizeof(args))
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

func (g *cudaGPU) groupStart() error { return ncclErr("ncclGroupStart", C.m2n_ncclGroupStart(), 0) }

func (g *cudaGPU) groupEnd() error {
	var r C.ncclResult_t
	if err := g.watched("ncclGroupEnd", func() C.ncclResult_t { r = C.m2n_ncclGroupEnd(); return 0 }); err != nil {
		return err
	}
	if r == ncclInProgress { // non-blocking communicators: wait for the group to be enqueued
		ok, err := poll(g.timeout, func() (bool, error) {
			pending := false
			for _, c := range g.commList() {
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
		if opt.Transport == TransportCopy && opt.Launch != nil {
			if err := ipcEligible(s); err != nil {
				return nil, err
			}
		}
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
	if opt.Transport == TransportNCCL || opt.Backend == NCCL && opt.Launch != nil {
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
// GPUs; under a launcher, every process on this host and a schedule the
// CUDA IPC copies can run), NCCL otherwise. Every process of a launch
// resolves it alike: the schedule and the launcher's variables are the
// same, and so are the GPUs of one host.
func autoTransport(s *ir.Schedule, l *LaunchEnv) string {
	if l != nil {
		if !l.OneHost || ipcEligible(s) != nil {
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

// depsWithinRanks checks that every dependency stays on its op's rank (or
// is the op's own transfer): one process per rank cannot wait on another
// process's ops.
func depsWithinRanks(s *ir.Schedule) error {
	for i := range int32(len(s.Ops)) {
		for _, d := range s.Deps(i) {
			if s.Ops[d].Rank != s.Ops[i].Rank {
				return fmt.Errorf("%w: op %d on rank %d depends on op %d on rank %d, which one process per rank cannot express", ErrScheduleNotSupported, i, s.Ops[i].Rank, d, s.Ops[d].Rank)
			}
		}
	}
	return nil
}

// CopyBandwidth measures a device-to-device copy of n bytes on a GPU
// (median of five after a warm-up), counting bytes read plus written, the
// way memory bandwidth is quoted for copies.
func CopyBandwidth(dev int, n int64) (units.Bandwidth, error) {
	g, err := newCUDA([]int{dev}, time.Minute)
	if err != nil {
		return 0, err
	}
	defer g.close()
	a, err := g.alloc(dev, 2*n)
	if err != nil {
		return 0, err
	}
	defer g.free(dev, a)
	st, err := g.newStream(dev)
	if err != nil {
		return 0, err
	}
	tm, err := g.newTimer(st)
	if err != nil {
		return 0, err
	}
	times, err := tm.runs(5, func() error { return g.copy(a+uint64(n), a, n, st) })
	if err != nil {
		return 0, err
	}
	return units.Bandwidth(float64(2*n) / medianTime(times).Seconds()), nil
}

// timer times work on one stream in device time, between two events.
type timer struct {
	g          *cudaGPU
	st, e0, e1 handle
}

// newTimer makes a timer of stream st.
func (g *cudaGPU) newTimer(st handle) (*timer, error) {
	e0, err := g.newEvent(g.owner[st], true)
	if err != nil {
		return nil, err
	}
	e1, err := g.newEvent(g.owner[st], true)
	if err != nil {
		return nil, err
	}
	return &timer{g, st, e0, e1}, nil
}

// runs issues f on the timer's stream reps+1 times, waiting for each, and
// returns the device time of every run but the first (a warm-up).
func (t *timer) runs(reps int, f func() error) ([]units.Time, error) {
	times := make([]units.Time, 0, reps)
	for i := range reps + 1 {
		t.g.record(t.e0, t.st)
		if err := f(); err != nil {
			return nil, err
		}
		t.g.record(t.e1, t.st)
		if err := t.g.sync(t.st); err != nil {
			return nil, err
		}
		if i > 0 {
			d, err := t.g.elapsed(t.e0, t.e1)
			if err != nil {
				return nil, err
			}
			times = append(times, d)
		}
	}
	return times, nil
}

// trainerWeights returns n bf16 values as a trainer holds weights: a
// normal distribution of sigma 0.02, drawn from rng.
func trainerWeights(n int64, rng *rand.Rand) []byte {
	b := make([]byte, 2*n)
	for k := range n {
		binary.LittleEndian.PutUint16(b[2*k:], uint16(math.Float32bits(float32(0.02*rng.NormFloat64()))>>16))
	}
	return b
}

// upload and download copy between host and device memory (tests).
func (g *cudaGPU) upload(dev int, dst uint64, b []byte) error {
	return g.on(dev, func() error {
		if r := C.m2n_cuMemcpyHtoD(C.ull(dst), unsafe.Pointer(&b[0]), C.size_t(len(b))); r != 0 {
			return cuErr("cuMemcpyHtoD", r)
		}
		// From pageable memory the copy may still be in flight on the legacy
		// stream, which m2n's non-blocking streams do not wait for.
		return cuErr("cuCtxSynchronize", C.m2n_cuCtxSynchronize())
	})
}

func (g *cudaGPU) download(dev int, b []byte, src uint64) error {
	return g.on(dev, func() error {
		return cuErr("cuMemcpyDtoH", C.m2n_cuMemcpyDtoH(unsafe.Pointer(&b[0]), C.ull(src), C.size_t(len(b))))
	})
}

// TimeBoxCopy times, on one GPU, the pack of a box of size elements (elem
// bytes each) at start in a row-major array of shape full into a
// contiguous buffer, its unpack back, and a device copy of the same bytes:
// reps timed runs of each after a warm-up, in device time; and the pack
// kernel's name.
func TimeBoxCopy(dev int, full, start, size []int64, elem int64, reps int) (pack, unpack, cp []units.Time, kernel string, err error) {
	g, err := newCUDA([]int{dev}, time.Minute)
	if err != nil {
		return nil, nil, nil, "", err
	}
	defer g.close()
	fullBytes, boxBytes := elem, elem
	for k := range full {
		fullBytes *= full[k]
		boxBytes *= size[k]
	}
	strided, err := g.alloc(dev, fullBytes)
	if err != nil {
		return nil, nil, nil, "", err
	}
	defer g.free(dev, strided)
	packed, err := g.alloc(dev, boxBytes)
	if err != nil {
		return nil, nil, nil, "", err
	}
	defer g.free(dev, packed)
	zero := make([]int64, len(size))
	pa, pk, err := planBoxCopy(view{strided, full, start}, view{packed, size, zero}, size, elem)
	if err != nil {
		return nil, nil, nil, "", err
	}
	ua, uk, err := planBoxCopy(view{packed, size, zero}, view{strided, full, start}, size, elem)
	if err != nil {
		return nil, nil, nil, "", err
	}
	st, err := g.newStream(dev)
	if err != nil {
		return nil, nil, nil, "", err
	}
	tm, err := g.newTimer(st)
	if err != nil {
		return nil, nil, nil, "", err
	}
	if pack, err = tm.runs(reps, func() error { return g.boxCopy(&pa, pk, st) }); err != nil {
		return nil, nil, nil, "", err
	}
	if unpack, err = tm.runs(reps, func() error { return g.boxCopy(&ua, uk, st) }); err != nil {
		return nil, nil, nil, "", err
	}
	if cp, err = tm.runs(reps, func() error { return g.copy(packed, strided, boxBytes, st) }); err != nil {
		return nil, nil, nil, "", err
	}
	return pack, unpack, cp, pk, nil
}

// TimeQuantize times, on one GPU, the quantize kernel on a bf16 box of
// size at start in a row-major array of shape full (its last two dims in
// 128 x 128 blocks), filled with trainer-like weights (a normal
// distribution, sigma 0.02): reps timed runs after a warm-up, in device
// time; and the bytes each moves (source read, fp8 and scales written).
func TimeQuantize(dev int, full, start, size []int64, reps int) (times []units.Time, bytes int64, err error) {
	g, err := newCUDA([]int{dev}, time.Minute)
	if err != nil {
		return nil, 0, err
	}
	defer g.close()
	nd := len(size)
	fullBytes, n := int64(2), int64(1)
	for k := range full {
		fullBytes *= full[k]
		n *= size[k]
	}
	sb := append(append([]int64(nil), size[:nd-2]...), (size[nd-2]+127)/128, (size[nd-1]+127)/128)
	nsc := int64(1)
	for _, v := range sb {
		nsc *= v
	}
	src, err := g.alloc(dev, fullBytes)
	if err != nil {
		return nil, 0, err
	}
	defer g.free(dev, src)
	out, err := g.alloc(dev, n+4*nsc+256)
	if err != nil {
		return nil, 0, err
	}
	defer g.free(dev, out)
	if err := g.upload(dev, src, trainerWeights(fullBytes/2, rand.New(rand.NewPCG(3, 4)))); err != nil {
		return nil, 0, err
	}
	sst := rowMajor(full)
	var off int64
	for d := range nd {
		off += start[d] * sst[d]
	}
	scale := out + uint64((n+255)&^255)
	a, kernel := planQuantArrays(src+uint64(2*off), out, scale, sst, rowMajor(size), rowMajor(sb), size, 128, 128, 1, 2)
	st, err := g.newStream(dev)
	if err != nil {
		return nil, 0, err
	}
	tm, err := g.newTimer(st)
	if err != nil {
		return nil, 0, err
	}
	if times, err = tm.runs(reps, func() error { return g.quantize(&a, kernel, false, st) }); err != nil {
		return nil, 0, err
	}
	return times, 2*n + n + 4*nsc, nil
}
