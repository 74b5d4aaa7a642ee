package topo

import (
	"fmt"
	"sort"
	"strings"

	"github.com/m2n-project/m2n/model/units"
)

// presets are the named starting points. Sources for every constant are in
// docs/topology.md; in brief:
//   - NVLink line rates: 18 links per GPU, 50 GB/s (NVLink5) or 25 GB/s
//     (NVLink4) per direction per link.
//   - NVLink achievable: NCCL 2.28's per-link model, 40.1 GB/s (SM100) and
//     20.6 GB/s (SM90) x 18 links.
//   - NIC: ConnectX-7 NDR 400 Gb/s = 50 GB/s line; nccl-tests reach 46-49,
//     48 is the default; GB300's ConnectX-8 800 Gb/s = 100 GB/s line, 96.
//   - Memory: H200 device-to-device copy measured at 4.2 TB/s read+write
//     (vendor 4.8 TB/s); B200 8 TB/s vendor, scaled by the same 0.875 ratio.
//   - GPU memory: GB200 186 GB of HBM3e visible (MLCommons system JSON),
//     H200 141 GB (DGX BasePOD), GB300 288 GB (NVIDIA's GB300 NVL72 page;
//     unverified here).
//   - Latencies: NCCL's cost model: a small NVLink send/recv about 3 us,
//     network hops 5-14 us (10 us default), a local kernel launch about 2 us.
var presets = map[string]Topology{
	"gb200-nvl72": {
		GPUsPerDomain: 72,
		NVLinkLine:    units.GBps(900), NVLink: units.GBps(721.8),
		NICsPerGPU: 1, NICLine: units.GBps(50), NIC: units.GBps(48),
		Memory: units.GBps(7000), GPUMemoryBytes: 186e9,
		LatencyNVLink: 3 * units.Microsecond, LatencyNet: 10 * units.Microsecond, LatencyLocal: 2 * units.Microsecond,
	},
	"gb300-nvl72": {
		GPUsPerDomain: 72,
		NVLinkLine:    units.GBps(900), NVLink: units.GBps(721.8),
		NICsPerGPU: 1, NICLine: units.GBps(100), NIC: units.GBps(96),
		Memory: units.GBps(7000), GPUMemoryBytes: 288e9,
		LatencyNVLink: 3 * units.Microsecond, LatencyNet: 10 * units.Microsecond, LatencyLocal: 2 * units.Microsecond,
	},
	"hgx-h200": {
		GPUsPerDomain: 8,
		NVLinkLine:    units.GBps(450), NVLink: units.GBps(370.8),
		NICsPerGPU: 1, NICLine: units.GBps(50), NIC: units.GBps(48),
		Memory: units.GBps(4200), GPUMemoryBytes: 141e9,
		LatencyNVLink: 3 * units.Microsecond, LatencyNet: 10 * units.Microsecond, LatencyLocal: 2 * units.Microsecond,
	},
}

// Preset returns a copy of the named preset with one domain; the caller
// sets Domains.
func Preset(name string) (*Topology, error) {
	p, ok := presets[name]
	if !ok {
		return nil, fmt.Errorf("unknown topology preset %q (known: %s)", name, strings.Join(PresetNames(), ", "))
	}
	t := p
	t.Preset = name
	t.Domains = 1
	return &t, nil
}

// PresetNames lists the preset names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
