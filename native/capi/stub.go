//go:build !cgo

// Package capi is m2n's C ABI; without cgo it is empty (a shared library
// needs cgo: make python builds it where a C compiler is).
package capi
