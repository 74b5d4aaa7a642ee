package native

import (
	"strings"
	"testing"
)

func TestTopologyTOML(t *testing.T) {
	h200 := func(i int, speed int64) GPUInfo {
		g := GPUInfo{Index: i, Name: "NVIDIA H200", NVLinks: 18, NVLinkVersion: 6, NVLinkRemote: "switch", NVLinkSpeedMBps: speed}
		g.fillNVLinkSpeed()
		return g
	}
	gb200 := func(i int, clique int64) GPUInfo {
		g := GPUInfo{Index: i, Name: "NVIDIA GB200", NVLinks: 18, NVLinkVersion: 7, ClusterUUID: "ab", CliqueID: clique}
		g.fillNVLinkSpeed()
		return g
	}
	tests := []struct {
		name string
		gpus []GPUInfo
		want []string
	}{
		{"H200 pair, no driver speed: NVLink 4.0's rate", []GPUInfo{h200(0, 0), h200(1, 0)},
			[]string{`preset = "hgx-h200"`, "gpus_per_domain = 2", `nvlink_line = "450 GB/s"`, "NVLink 4.0's line rate", "1 NVLink domain(s): local"}},
		{"driver speed wins", []GPUInfo{h200(0, 26562)},
			[]string{`nvlink_line = "478.116 GB/s"`, "as the driver reports"}},
		{"NVL72 cliques are domains", []GPUInfo{gb200(0, 1), gb200(1, 1), gb200(2, 2)},
			[]string{`preset = "gb200-nvl72"`, "gpus_per_domain = 2", "2 NVLink domain(s)", `nvlink_line = "900 GB/s"`}},
		{"no links: one GPU per domain", []GPUInfo{{Index: 0, Name: "NVIDIA H200"}, {Index: 1, Name: "NVIDIA H200"}},
			[]string{"gpus_per_domain = 1", "no active NVLink links", "gpu 0; gpu 1"}},
		{"links of unknown generation and speed", []GPUInfo{{Index: 0, Name: "X", NVLinks: 4, NVLinkVersion: 99}},
			[]string{"4 active NVLink links of unknown speed"}},
		{"none", nil, []string{"no GPUs found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TopologyTOML(tt.gpus)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("missing %q in:\n%s", w, got)
				}
			}
		})
	}
}

func TestNVLinkGeneration(t *testing.T) {
	for v, want := range map[int]string{0: "", 4: "3.0", 6: "4.0", 7: "5.0", 42: ""} {
		if got := (GPUInfo{NVLinkVersion: v}).NVLinkGeneration(); got != want {
			t.Errorf("version %d: got %q, want %q", v, got, want)
		}
	}
}
