package native

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/m2n-project/m2n/model/units"
)

// GPUInfo is one GPU as NVML reports it.
type GPUInfo struct {
	Index           int
	Name            string
	UUID            string
	PCIBusID        string
	MemoryBytes     int64
	NVLinks         int    // active NVLink links
	NVLinkVersion   int    // NVML's nvmlNvlinkVersion_t of its links (6 is NVLink 4.0); see NVLinkGeneration
	NVLinkRemote    string // what the links reach: "switch", "gpu", or ""
	NVLinkSpeedMBps int64  // per link and direction, in MB/s: the driver's, or the generation's (NVLinkSpeedFrom)
	NVLinkSpeedFrom string // where NVLinkSpeedMBps comes from: "driver", "spec" (the driver reports none), or ""
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

// nvlinkGenerations maps NVML's nvmlNvlinkVersion_t to the NVLink
// generation and its line rate per link and direction, in MB/s (NVLink 1:
// 20 GB/s; 2 to 4: 25 GB/s; 5: 50 GB/s).
var nvlinkGenerations = map[int]struct {
	name string
	mbps int64
}{
	1: {"1.0", 20000}, 2: {"2.0", 25000}, 3: {"2.2", 25000}, 4: {"3.0", 25000},
	5: {"3.1", 25000}, 6: {"4.0", 25000}, 7: {"5.0", 50000},
}

// NVLinkGeneration names the generation of the GPU's links ("4.0" on
// H100/H200, "5.0" on B200/GB200), or "" when unknown.
func (g GPUInfo) NVLinkGeneration() string { return nvlinkGenerations[g.NVLinkVersion].name }

// fillNVLinkSpeed sets the per-link speed from the generation where the
// driver gave none.
func (g *GPUInfo) fillNVLinkSpeed() {
	switch {
	case g.NVLinkSpeedMBps > 0:
		g.NVLinkSpeedFrom = "driver"
	case g.NVLinks > 0 && nvlinkGenerations[g.NVLinkVersion].mbps > 0:
		g.NVLinkSpeedMBps, g.NVLinkSpeedFrom = nvlinkGenerations[g.NVLinkVersion].mbps, "spec"
	}
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
		from := "as the driver reports"
		if gpus[0].NVLinkSpeedFrom == "spec" {
			from = "NVLink " + gpus[0].NVLinkGeneration() + "'s line rate; the driver reports no speed"
		}
		fmt.Fprintf(&b, "nvlink_line = \"%g GB/s\"   # %d links x %d MB/s per direction (%s)\n", bw, gpus[0].NVLinks, gpus[0].NVLinkSpeedMBps, from)
	} else if gpus[0].NVLinks > 0 {
		fmt.Fprintf(&b, "# %d active NVLink links of unknown speed: keep the preset's nvlink_line\n", gpus[0].NVLinks)
	} else {
		b.WriteString("# no active NVLink links: GPUs talk over PCIe and the network\n")
	}
	return b.String()
}

// InventoryJSON is the output of `m2n topo --json`: each GPU with its
// domain and NVLink bandwidth, and the [topology] table.
func InventoryJSON(gpus []GPUInfo) any {
	type gpuJSON struct {
		GPUInfo
		Domain     string  `json:"domain"`
		NVLinkGBps float64 `json:"nvlink_gbps"`
	}
	var out []gpuJSON
	for _, g := range gpus {
		out = append(out, gpuJSON{g, g.Domain(), g.NVLinkGBps()})
	}
	return map[string]any{"gpus": out, "topology_toml": TopologyTOML(gpus)}
}

// WriteInventory writes the table of `m2n topo`: a line per GPU, then the
// [topology] table.
func WriteInventory(w io.Writer, gpus []GPUInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "gpu\tname\tmemory\tpci\tnvlink links\tper link\tremote\tfabric\tdomain")
	for _, g := range gpus {
		links, speed, remote := fmt.Sprint(g.NVLinks), "-", "-"
		if gen := g.NVLinkGeneration(); gen != "" {
			links += " (NVLink " + gen + ")"
		}
		if g.NVLinkSpeedMBps > 0 {
			speed = fmt.Sprintf("%d MB/s (%s)", g.NVLinkSpeedMBps, g.NVLinkSpeedFrom)
		}
		if g.NVLinkRemote != "" {
			remote = g.NVLinkRemote
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Index, g.Name, units.Bytes(g.MemoryBytes).Human(), g.PCIBusID,
			links, speed, remote, g.FabricState, g.Domain())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s", TopologyTOML(gpus))
	return err
}
