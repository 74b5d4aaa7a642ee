//go:build linux && cgo

package native

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "m2n_cuda.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"
)

// Library locations: each is tried in order after its environment variable.
var (
	cudaNames  = []string{"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1"}
	nvrtcNames = []string{"libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so.12"}
	ncclNames  = []string{"libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"}
)

// Environment variables that point m2n at a library's path.
const (
	EnvCUDA  = "M2N_CUDA_LIB"
	EnvNVRTC = "M2N_NVRTC_LIB"
	EnvNCCL  = "M2N_NCCL_LIB"
)

var (
	loadMu                      sync.Mutex
	cudaOK, nvrtcOK, ncclOK     bool
	cudaErr, nvrtcErr, ncclErr_ error
)

// openLib dlopens the first loadable candidate and binds its symbols.
func openLib(name, env string, names []string, bind func(h unsafe.Pointer, missing *C.char, n C.int) C.int) error {
	return openWith(name, env, names, bind, func(p *C.char, e *C.char, n C.int) unsafe.Pointer { return C.m2n_open(p, e, n) })
}

// openWith opens the first of env's path and names that open does
// (dlopen, or dlopen of a library already loaded) and bind binds.
func openWith(name, env string, names []string, bind func(h unsafe.Pointer, missing *C.char, n C.int) C.int, open func(p *C.char, e *C.char, n C.int) unsafe.Pointer) error {
	runtime.LockOSThread() // dlerror is per thread
	defer runtime.UnlockOSThread()
	cands := names
	if p := os.Getenv(env); p != "" {
		cands = append([]string{p}, names...)
	}
	lerr := &LibraryError{Library: name, Env: env}
	var buf [512]C.char
	for _, c := range cands {
		cs := C.CString(c)
		h := open(cs, &buf[0], C.int(len(buf)))
		C.free(unsafe.Pointer(cs))
		if h == nil {
			lerr.Tried = append(lerr.Tried, fmt.Sprintf("%s (%s)", c, C.GoString(&buf[0])))
			continue
		}
		if bind(h, &buf[0], C.int(len(buf))) != 0 {
			lerr.Tried = append(lerr.Tried, fmt.Sprintf("%s (has no symbol %s: too old?)", c, C.GoString(&buf[0])))
			continue
		}
		return nil
	}
	return lerr
}

func loadCUDA() error {
	loadMu.Lock()
	defer loadMu.Unlock()
	if !cudaOK && cudaErr == nil {
		cudaErr = openLib("the CUDA driver", EnvCUDA, cudaNames, func(h unsafe.Pointer, m *C.char, n C.int) C.int { return C.m2n_bind_cuda(h, m, n) })
		cudaOK = cudaErr == nil
		if cudaOK {
			if r := C.m2n_cuInit(); r != 0 {
				cudaErr, cudaOK = cuErr("cuInit", r), false
			}
		}
	}
	return cudaErr
}

func loadNVRTC() error {
	loadMu.Lock()
	defer loadMu.Unlock()
	if !nvrtcOK && nvrtcErr == nil {
		nvrtcErr = openLib("NVRTC", EnvNVRTC, nvrtcNames, func(h unsafe.Pointer, m *C.char, n C.int) C.int { return C.m2n_bind_nvrtc(h, m, n) })
		nvrtcOK = nvrtcErr == nil
	}
	return nvrtcErr
}

func loadNCCL() error {
	loadMu.Lock()
	defer loadMu.Unlock()
	if !ncclOK && ncclErr_ == nil {
		ncclErr_ = openLib("NCCL", EnvNCCL, ncclNames, func(h unsafe.Pointer, m *C.char, n C.int) C.int { ncclLib = h; return C.m2n_bind_nccl(h, m, n) })
		ncclOK = ncclErr_ == nil
		if ncclOK {
			if ncclErr_ = ncclVersionOK(); ncclErr_ != nil {
				ncclOK = false
			}
		}
	}
	return ncclErr_
}

// ncclLib is the handle of the libnccl m2n bound.
var ncclLib unsafe.Pointer

// loadLoadedNCCL binds the libnccl.so.2 this process has already loaded
// (PyTorch's, for one): a borrowed communicator is only valid in the
// library that made it, and a second copy must never touch it.
func loadLoadedNCCL() error {
	loadMu.Lock()
	defer loadMu.Unlock()
	var loaded unsafe.Pointer
	err := openWith("NCCL (loaded by this process)", EnvNCCL, ncclNames, func(h unsafe.Pointer, m *C.char, n C.int) C.int {
		loaded = h
		if ncclOK {
			return 0 // bound already: compared below
		}
		return C.m2n_bind_nccl(h, m, n)
	}, func(p *C.char, e *C.char, n C.int) unsafe.Pointer { return C.m2n_open_loaded(p, e, n) })
	switch {
	case err != nil:
		return fmt.Errorf("%w: no libnccl.so.2 is loaded in this process, so a communicator cannot be borrowed from it: create the job's NCCL communicator first (for PyTorch, its process group, with one collective run), or set %s to the loaded library's path (%v)", ErrNotSupported, EnvNCCL, err)
	case ncclOK && ncclLib != loaded:
		return fmt.Errorf("%w: m2n has bound another libnccl than the one this process loaded; a borrowed communicator must be used through the NCCL that made it", ErrNotSupported)
	}
	ncclLib, ncclOK, ncclErr_ = loaded, true, nil
	return ncclVersionOK()
}

// ncclVersionOK refuses a bound NCCL older than 2.19.3, which m2n needs.
func ncclVersionOK() error {
	var v C.int
	if r := C.m2n_ncclGetVersion(&v); r == 0 && v < 21903 {
		return fmt.Errorf("NCCL %d is older than 2.19.3, which m2n needs", int(v))
	}
	return nil
}

func cuErr(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &CUDAError{Call: call, Code: int(r), Name: C.GoString(C.m2n_cuErrorName(r)), Msg: C.GoString(C.m2n_cuErrorString(r))}
}

func ncclErr(call string, r C.ncclResult_t, comm uintptr) error {
	if r == 0 {
		return nil
	}
	e := &NCCLError{Call: call, Code: int(r), Msg: C.GoString(C.m2n_ncclError(r))}
	if comm != 0 {
		e.Last = C.GoString(C.m2n_ncclLastError(C.uptr(comm)))
	}
	return e
}

// NCCLVersion loads NCCL and reports its version code (e.g. 22803 for
// 2.28.3).
func NCCLVersion() (int, error) {
	if err := loadNCCL(); err != nil {
		return 0, err
	}
	var v C.int
	if r := C.m2n_ncclGetVersion(&v); r != 0 {
		return 0, fmt.Errorf("ncclGetVersion: error %d", int(r))
	}
	return int(v), nil
}
