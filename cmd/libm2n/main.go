// Command libm2n is m2n's C ABI as a shared library: go build
// -buildmode=c-shared -o libm2n.so ./cmd/libm2n (make python does it). The
// functions are in package native/capi (docs/python.md).
package main

import _ "github.com/m2n-project/m2n/native/capi"

func main() {}
