// Package kernels holds the CUDA C++ sources m2n compiles at run time with
// NVRTC (pack, unpack, fill, verify), embedded in the binary.
package kernels
