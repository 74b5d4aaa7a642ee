//go:build !(linux && cgo)

package native

import (
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/units"
)

// DeviceInfo describes a GPU as CUDA sees it.
type DeviceInfo struct {
	Index    int
	Name     string
	Memory   int64
	PCIBusID string
	Arch     string
	SMs      int
}

// Devices reports ErrNotSupported in builds without cgo.
func Devices() ([]DeviceInfo, error) { return nil, ErrNotSupported }

// New reports ErrNotSupported in builds without cgo.
func New(s *ir.Schedule, opt Options) (*Executor, error) { return nil, ErrNotSupported }

// Inventory reports ErrNotSupported in builds without cgo.
func Inventory() ([]GPUInfo, error) { return nil, ErrNotSupported }

// CopyBandwidth reports ErrNotSupported in builds without cgo.
func CopyBandwidth(dev int, n int64) (units.Bandwidth, error) { return 0, ErrNotSupported }

// TimeBatchCopy reports ErrNotSupported in builds without cgo.
func TimeBatchCopy(dev int, full, start, size []int64, elem int64, pieces, reps int) (whole, shared []units.Time, err error) {
	return nil, nil, ErrNotSupported
}

// TimeBoxCopy reports ErrNotSupported in builds without cgo.
func TimeBoxCopy(dev int, full, start, size []int64, elem int64, reps int) (pack, unpack, cp []units.Time, kernel string, err error) {
	return nil, nil, nil, "", ErrNotSupported
}

// NCCLVersion reports ErrNotSupported in builds without cgo.
func NCCLVersion() (int, error) { return 0, ErrNotSupported }

// TimeQuantize reports ErrNotSupported in builds without cgo.
func TimeQuantize(dev int, full, start, size []int64, br, bc int64, reps int) (times []units.Time, bytes int64, err error) {
	return nil, 0, ErrNotSupported
}
