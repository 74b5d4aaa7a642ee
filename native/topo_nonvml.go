//go:build linux && cgo && m2n_nonvml

package native

// EnvNVML points m2n at libnvidia-ml.so.1 (unused in this build).
const EnvNVML = "M2N_NVML_LIB"

// Inventory reports ErrNotSupported in builds tagged m2n_nonvml: the C
// ABI's libm2n.so (make python), which a process loads with every symbol
// bound at once, leaves NVML out (go-nvml binds its symbols lazily, so a
// shared library with it fails to load), and needs no GPU inventory.
func Inventory() ([]GPUInfo, error) { return nil, ErrNotSupported }
