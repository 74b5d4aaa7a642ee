//go:build linux && cgo && !m2n_nonvml

package native

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// h200Machine is go-nvml's mock DGX H200 (8 GPUs) with what the mock leaves
// out filled in as an HGX H200 reports it: 18 NVLink 4.0 links to the
// NVSwitches, and links beyond them invalid. speedMBps, when positive, is
// the common link speed the driver reports; else it reports none.
func h200Machine(t *testing.T, speedMBps uint32) *server.Server {
	t.Helper()
	srv := dgxh200.New()
	for _, dev := range srv.Devices {
		d := dev.(*server.Device)
		d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			if l < 18 {
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT
		}
		d.GetNvLinkVersionFunc = func(int) (uint32, nvml.Return) { return 6, nvml.SUCCESS }
		d.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
		d.GetFieldValuesFunc = func(fv []nvml.FieldValue) nvml.Return {
			for i := range fv {
				if speedMBps == 0 || fv[i].FieldId != nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON {
					fv[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				fv[i].NvmlReturn = uint32(nvml.SUCCESS)
				fv[i].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
				binary.LittleEndian.PutUint32(fv[i].Value[:4], speedMBps)
			}
			return nvml.SUCCESS
		}
	}
	return srv
}

func noFabric(nvml.Device) (nvml.GpuFabricInfo_v3, nvml.Return) {
	return nvml.GpuFabricInfo_v3{}, nvml.ERROR_NOT_SUPPORTED
}

// The inventory of the mock H200 machine: eight GPUs on one NVSwitch
// domain, NVLink 4.0's line rate where the driver reports no speed.
func TestInventoryH200(t *testing.T) {
	gpus, err := inventory(h200Machine(t, 0), noFabric)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 8 {
		t.Fatalf("%d GPUs, want 8", len(gpus))
	}
	for i, g := range gpus {
		if g.Index != i || g.Name != "NVIDIA H200 141GB HBM3e" || g.MemoryBytes != 144384<<20 || !strings.HasPrefix(g.UUID, "GPU-") {
			t.Errorf("GPU %d: %+v", i, g)
		}
		if g.NVLinks != 18 || g.NVLinkRemote != "switch" || g.NVLinkGeneration() != "4.0" || g.NVLinkSpeedMBps != 25000 || g.NVLinkSpeedFrom != "spec" {
			t.Errorf("GPU %d links: %d to %q, NVLink %s, %d MB/s from %q", i, g.NVLinks, g.NVLinkRemote, g.NVLinkGeneration(), g.NVLinkSpeedMBps, g.NVLinkSpeedFrom)
		}
		if g.Domain() != "local" || g.FabricState != "not supported" {
			t.Errorf("GPU %d: domain %q, fabric %q", i, g.Domain(), g.FabricState)
		}
	}
	toml := TopologyTOML(gpus)
	for _, want := range []string{`preset = "hgx-h200"`, "gpus_per_domain = 8", `nvlink_line = "450 GB/s"`, "8 x NVIDIA H200 141GB HBM3e, 1 NVLink domain(s): local"} {
		if !strings.Contains(toml, want) {
			t.Errorf("topology table lacks %q:\n%s", want, toml)
		}
	}
}

// A speed the driver reports wins over the generation's.
func TestInventoryDriverSpeed(t *testing.T) {
	gpus, err := inventory(h200Machine(t, 26562), noFabric)
	if err != nil {
		t.Fatal(err)
	}
	if g := gpus[0]; g.NVLinkSpeedMBps != 26562 || g.NVLinkSpeedFrom != "driver" || g.NVLinkGBps() != 18*26.562 {
		t.Errorf("speed %d MB/s from %q, %v GB/s", g.NVLinkSpeedMBps, g.NVLinkSpeedFrom, g.NVLinkGBps())
	}
}

// GPUs registered with an NVLink fabric belong to their cluster and clique:
// two cliques of four are two domains.
func TestInventoryFabricCliques(t *testing.T) {
	srv := h200Machine(t, 0)
	clique := map[nvml.Device]uint32{}
	for i, d := range srv.Devices {
		clique[d] = uint32(i / 4)
	}
	gpus, err := inventory(srv, func(d nvml.Device) (nvml.GpuFabricInfo_v3, nvml.Return) {
		return nvml.GpuFabricInfo_v3{State: nvml.GPU_FABRIC_STATE_COMPLETED, ClusterUuid: [16]uint8{0xab}, CliqueId: clique[d]}, nvml.SUCCESS
	})
	if err != nil {
		t.Fatal(err)
	}
	if d0, d7 := gpus[0].Domain(), gpus[7].Domain(); d0 == d7 || !strings.HasPrefix(d0, "cluster ab") || gpus[0].FabricState != "completed" {
		t.Errorf("domains %q and %q, fabric %q", d0, d7, gpus[0].FabricState)
	}
	if toml := TopologyTOML(gpus); !strings.Contains(toml, "gpus_per_domain = 4") || !strings.Contains(toml, "2 NVLink domain(s)") {
		t.Errorf("topology table:\n%s", toml)
	}
}

// A device NVML cannot open is an error that names it.
func TestInventoryDeviceError(t *testing.T) {
	srv := h200Machine(t, 0)
	srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 3 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return srv.Devices[i], nvml.SUCCESS
	}
	_, err := inventory(srv, noFabric)
	if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) || !strings.Contains(err.Error(), "device 3") {
		t.Errorf("got %v, want device 3's error", err)
	}
}

// m2n topo's views of the mock machine: a row per GPU, then the table.
func TestInventoryViews(t *testing.T) {
	gpus, err := inventory(h200Machine(t, 0), noFabric)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteInventory(&b, gpus); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	rows := strings.Count(out, "NVIDIA H200 141GB HBM3e  ")
	if rows != 8 || !strings.Contains(out, "18 (NVLink 4.0)") || !strings.Contains(out, "25000 MB/s (spec)") || !strings.Contains(out, "gpus_per_domain = 8") {
		t.Errorf("%d GPU rows in:\n%s", rows, out)
	}
	js, err := json.Marshal(InventoryJSON(gpus))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"domain":"local"`, `"nvlink_gbps":450`, `"topology_toml":"# 8 x NVIDIA H200`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("JSON lacks %s: %s", want, js)
		}
	}
}
