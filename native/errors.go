package native

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotSupported is returned where a capability is absent: a build without
// cgo, or a platform other than Linux. Tests skip on it.
var ErrNotSupported = errors.New("native: not supported in this build (needs linux and cgo)")

// ErrScheduleNotSupported is returned when a schedule needs what the chosen
// backend or transport cannot do (dependencies across processes, say); the
// same schedule may run in another mode.
var ErrScheduleNotSupported = errors.New("native: the schedule is not supported in this mode")

// ErrNoDevice is returned when the CUDA driver loads but finds no GPU.
var ErrNoDevice = errors.New("native: no CUDA device")

// LibraryError reports a shared library that could not be opened, with
// every path tried and the environment variable that points m2n at it.
type LibraryError struct {
	Library string   // e.g. "NVRTC"
	Tried   []string // each path or soname tried, with dlopen's message
	Env     string   // the variable that overrides the path
}

func (e *LibraryError) Error() string {
	return fmt.Sprintf("cannot load %s: tried %s; set %s to the library's path", e.Library, strings.Join(e.Tried, "; "), e.Env)
}

// Is makes errors.Is(err, ErrNotSupported) true for a missing library, so
// GPU tests skip where CUDA is absent.
func (e *LibraryError) Is(target error) bool { return target == ErrNotSupported }

// CUDAError is a CUDA driver call that failed.
type CUDAError struct {
	Call string
	Code int
	Name string
	Msg  string
}

func (e *CUDAError) Error() string {
	return fmt.Sprintf("%s: %s (%d): %s", e.Call, e.Name, e.Code, e.Msg)
}

// NCCLError is an NCCL call that failed, with NCCL's own text.
type NCCLError struct {
	Call string
	Code int
	Msg  string
	Last string // ncclGetLastError, when it says more
}

func (e *NCCLError) Error() string {
	s := fmt.Sprintf("%s: NCCL error %d: %s", e.Call, e.Code, e.Msg)
	if e.Last != "" {
		s += " (" + e.Last + ")"
	}
	return s
}

// CompileError is a kernel NVRTC could not compile, with its log.
type CompileError struct {
	Arch string
	Log  string
	// Code is NVRTC's result (NVRTC_ERROR_INVALID_OPTION: 5).
	Code int
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("NVRTC could not compile m2n's kernels for %s:\n%s", e.Arch, e.Log)
}

// IsPeerFailure reports whether err leaves a multi-GPU run without its
// peers: a timeout waiting for one, or NCCL reporting a remote, system or
// internal error. The communicators are aborted by then; a later run would
// wait for the same peers.
func IsPeerFailure(err error) bool {
	if errors.Is(err, ErrTimeout) {
		return true
	}
	var ne *NCCLError
	if errors.As(err, &ne) {
		switch ne.Code {
		case 2, 3, 6: // ncclSystemError, ncclInternalError, ncclRemoteError
			return true
		}
	}
	return false
}
