// Package native executes schedules on GPUs through the CUDA driver, NVRTC
// and NCCL, opened with dlopen at run time. cgo lives here and nowhere else.
package native
