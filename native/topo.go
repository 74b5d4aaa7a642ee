package native

import (
	"fmt"
	"sort"
	"strings"
)

// GPUInfo is one GPU as NVML reports it.
type GPUInfo struct {
	Index           int
	Name            string
	UUID            string
	PCIBusID        string
	MemoryBytes     int64
	NVLinks         int    // active NVLink links
	NVLinkVersion   int    // NVLink generation of its links
	NVLinkRemote    string // what the links reach: "switch", "gpu", or ""
	NVLinkSpeedMBps int64  // per link, as the driver reports it
	FabricState     string // NVLink fabric registration (NVL72 and newer)
	ClusterUUID     string // the NVLink domain's cluster, when registered
	CliqueID        int64
}

// Domain is the key of the GPU's NVLink domain: its fabric cluster and
// clique when registered (GB200 NVL72), else the host ("local") when its
// links reach an NVSwitch or another GPU, else the GPU alone.
func (g GPUInfo) Domain() string {
	switch {
	case g.ClusterUUID != "":
		return fmt.Sprintf("cluster %s clique %d", g.ClusterUUID, g.CliqueID)
	case g.NVLinks > 0:
		return "local"
	}
	return fmt.Sprintf("gpu %d", g.Index)
}

// NVLinkGBps is the GPU's NVLink bandwidth per direction: links times the
// per-link speed, in decimal GB/s.
func (g GPUInfo) NVLinkGBps() float64 { return float64(g.NVLinks) * float64(g.NVLinkSpeedMBps) / 1e3 }

// TopologyTOML writes the [topology] table m2n would use for these GPUs:
// the preset closest to them, the GPUs per domain it sees, and the NVLink
// line rate it reads.
func TopologyTOML(gpus []GPUInfo) string {
	var b strings.Builder
	if len(gpus) == 0 {
		return "# no GPUs found\n"
	}
	domains := map[string]int{}
	for _, g := range gpus {
		domains[g.Domain()]++
	}
	keys := make([]string, 0, len(domains))
	for k := range domains {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	perDomain := 0
	for _, k := range keys {
		perDomain = max(perDomain, domains[k])
	}
	preset := "hgx-h200"
	if strings.Contains(gpus[0].Name, "GB200") || strings.Contains(gpus[0].Name, "B200") {
		preset = "gb200-nvl72"
	}
	fmt.Fprintf(&b, "# %d x %s, %d NVLink domain(s): %s\n", len(gpus), gpus[0].Name, len(keys), strings.Join(keys, "; "))
	fmt.Fprintf(&b, "[topology]\npreset = %q\n", preset)
	fmt.Fprintf(&b, "gpus_per_domain = %d\n", perDomain)
	if bw := gpus[0].NVLinkGBps(); bw > 0 {
		fmt.Fprintf(&b, "nvlink_line = \"%g GB/s\"   # %d links x %d MB/s\n", bw, gpus[0].NVLinks, gpus[0].NVLinkSpeedMBps)
	} else {
		b.WriteString("# no active NVLink links: GPUs talk over PCIe and the network\n")
	}
	return b.String()
}
