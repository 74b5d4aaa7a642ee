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
//   - Latencies: NCCL's cost model: a small NVLink send/recv about 3 us,
//     network hops 5-14 us (10 us default), a local kernel launch about 2 us.
var presets = map[string]Topology{
	"gb200-nvl72": {
		GPUsPerDomain: 72,
		NVLinkLine:    units.GBps(900), NVLink: units.GBps(721.8),
		NICsPerGPU: 1, NICLine: units.GBps(50), NIC: units.GBps(48),
		Memory:        units.GBps(7000),
		LatencyNVLink: 3 * units.Microsecond, LatencyNet: 10 * units.Microsecond, LatencyLocal: 2 * units.Microsecond,
	},
	"gb300-nvl72": {
		GPUsPerDomain: 72,
		NVLinkLine:    units.GBps(900), NVLink: units.GBps(721.8),
		NICsPerGPU: 1, NICLine: units.GBps(100), NIC: units.GBps(96),
		Memory:        units.GBps(7000),
		LatencyNVLink: 3 * units.Microsecond, LatencyNet: 10 * units.Microsecond, LatencyLocal: 2 * units.Microsecond,
	},
	// hgx-h200-measured: an HGX H200 with the constants m2n measured on two
	// H200s of one host with `m2n run --backend nccl`, one process
	// (docs/calibration.md): one NVLink pair moves 352 GB/s per direction
	// with both directions busy (1 GiB each way); a stream of send/recv
	// waves costs about 15 us per wave beyond its bytes (256 MiB in 256
	// chunks of 1 MiB). In a scenario with gpus_per_domain = 1 each GPU is
	// its own virtual domain and transfers between GPUs are modeled as NIC
	// traffic, so nic and latency_net take the same NVLink pair values and
	// nic_line the pair's line rate (18 x 25 GB/s). Memory: a 1 GiB device
	// copy, 4.22 TB/s read+write.
	"hgx-h200-measured": {
		GPUsPerDomain: 8,
		NVLinkLine:    units.GBps(450), NVLink: units.GBps(352),
		NICsPerGPU: 1, NICLine: units.GBps(450), NIC: units.GBps(352),
		Memory:        units.GBps(4220),
		LatencyNVLink: 15 * units.Microsecond, LatencyNet: 15 * units.Microsecond, LatencyLocal: 2 * units.Microsecond,
	},
	"hgx-h200": {
		GPUsPerDomain: 8,
		NVLinkLine:    units.GBps(450), NVLink: units.GBps(370.8),
		NICsPerGPU: 1, NICLine: units.GBps(50), NIC: units.GBps(48),
		Memory:        units.GBps(4200),
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
