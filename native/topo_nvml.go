//go:build linux && cgo && !m2n_nonvml

package native

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// EnvNVML points m2n at libnvidia-ml.so.1.
const EnvNVML = "M2N_NVML_LIB"

// Inventory lists the GPUs NVML sees, with their NVLink links and NVLink
// domain (fabric cluster and clique, where the GPU reports one).
func Inventory() ([]GPUInfo, error) {
	var lib nvml.Interface
	path := os.Getenv(EnvNVML)
	if path != "" {
		lib = nvml.New(nvml.WithLibraryPath(path))
	} else {
		lib = nvml.New()
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if errors.Is(ret, nvml.ERROR_LIBRARY_NOT_FOUND) {
			return nil, &LibraryError{Library: "NVML", Tried: []string{orDefault(path, "libnvidia-ml.so.1") + " (not found)"}, Env: EnvNVML}
		}
		return nil, fmt.Errorf("nvml init: %w", ret)
	}
	defer lib.Shutdown()
	return inventory(lib, fabricV3)
}

// fabricQuery reads a GPU's NVLink fabric registration. go-nvml's mock
// devices cannot answer the versioned query (it calls the library itself),
// so tests pass their own.
type fabricQuery func(nvml.Device) (nvml.GpuFabricInfo_v3, nvml.Return)

func fabricV3(d nvml.Device) (nvml.GpuFabricInfo_v3, nvml.Return) { return d.GetGpuFabricInfoV().V3() }

// inventory lists the GPUs of an initialized NVML: the library, or a mock
// machine in tests.
func inventory(lib nvml.Interface, fabric fabricQuery) ([]GPUInfo, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %w", ret)
	}
	var out []GPUInfo
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d: %w", i, ret)
		}
		g := GPUInfo{Index: i}
		if s, ret := d.GetName(); ret == nvml.SUCCESS {
			g.Name = s
		}
		if s, ret := d.GetUUID(); ret == nvml.SUCCESS {
			g.UUID = s
		}
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryBytes = int64(m.Total)
		}
		if p, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			g.PCIBusID = cstr(p.BusId[:])
		}
		// Links: loop until the driver says there are no more.
		for l := 0; l < 64; l++ {
			st, ret := d.GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				break
			}
			if st != nvml.FEATURE_ENABLED {
				continue
			}
			g.NVLinks++
			if v, ret := d.GetNvLinkVersion(l); ret == nvml.SUCCESS {
				g.NVLinkVersion = int(v)
			}
			if t, ret := d.GetNvLinkRemoteDeviceType(l); ret == nvml.SUCCESS {
				switch t {
				case nvml.NVLINK_DEVICE_TYPE_GPU:
					g.NVLinkRemote = "gpu"
				case nvml.NVLINK_DEVICE_TYPE_SWITCH:
					g.NVLinkRemote = "switch"
				}
			}
		}
		// Per-link speed: the common speed, else link 0's; some drivers
		// (the H200 of docs/calibration.md) report neither, and the
		// generation's line rate stands in.
		for _, id := range []uint32{nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON, nvml.FI_DEV_NVLINK_SPEED_MBPS_L0} {
			if g.NVLinks == 0 {
				break
			}
			fv := []nvml.FieldValue{{FieldId: id}}
			if ret := d.GetFieldValues(fv); ret == nvml.SUCCESS && fv[0].NvmlReturn == uint32(nvml.SUCCESS) {
				if v := fieldUint(fv[0]); v > 0 {
					g.NVLinkSpeedMBps = v
					break
				}
			}
		}
		g.fillNVLinkSpeed()
		if fi, ret := fabric(d); ret == nvml.SUCCESS {
			g.FabricState = fabricState(fi.State)
			if fi.State == nvml.GPU_FABRIC_STATE_COMPLETED && fi.ClusterUuid != [16]uint8{} {
				g.ClusterUUID = fmt.Sprintf("%x", fi.ClusterUuid[:])
				g.CliqueID = int64(fi.CliqueId)
			}
		} else {
			g.FabricState = "not supported"
		}
		out = append(out, g)
	}
	return out, nil
}

// fieldUint reads an unsigned field value by its type.
func fieldUint(f nvml.FieldValue) int64 {
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return int64(binary.LittleEndian.Uint64(f.Value[:8]))
	}
	return int64(binary.LittleEndian.Uint32(f.Value[:4]))
}

func fabricState(s uint8) string {
	switch s {
	case nvml.GPU_FABRIC_STATE_NOT_SUPPORTED:
		return "not supported"
	case nvml.GPU_FABRIC_STATE_NOT_STARTED:
		return "not started"
	case nvml.GPU_FABRIC_STATE_IN_PROGRESS:
		return "in progress"
	case nvml.GPU_FABRIC_STATE_COMPLETED:
		return "completed"
	}
	return fmt.Sprintf("state %d", s)
}

func cstr(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
