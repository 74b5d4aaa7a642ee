package topo

import (
	"slices"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/model/units"
)

// Every preset is valid as it comes, starts with one domain, names itself,
// and its achievable rates stay within its line rates.
func TestPresets(t *testing.T) {
	names := PresetNames()
	if !slices.IsSorted(names) || !slices.Contains(names, "hgx-h200") || !slices.Contains(names, "gb200-nvl72") {
		t.Fatalf("preset names %v", names)
	}
	for _, n := range names {
		p, err := Preset(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", n, err)
		}
		if p.Preset != n || p.Domains != 1 {
			t.Errorf("%s: preset %q, %d domains", n, p.Preset, p.Domains)
		}
		if p.NVLink > p.NVLinkLine || p.NIC > p.NICLine {
			t.Errorf("%s: achievable above line: NVLink %v > %v or NIC %v > %v", n, p.NVLink, p.NVLinkLine, p.NIC, p.NICLine)
		}
	}
	if _, err := Preset("dgx-1"); err == nil || !strings.Contains(err.Error(), "hgx-h200") {
		t.Errorf("unknown preset: %v, want an error listing the known ones", err)
	}
	// A preset is a copy: changing one leaves the next untouched.
	a, _ := Preset("hgx-h200")
	a.GPUsPerDomain, a.NIC = 1, 0
	if b, _ := Preset("hgx-h200"); b.GPUsPerDomain != 8 || b.NIC != units.GBps(48) {
		t.Errorf("Preset returned shared state: %+v", b)
	}
}

// Ranks run on the GPU of their number unless placed; domains are runs of
// GPUsPerDomain GPUs.
func TestPlacement(t *testing.T) {
	tp, _ := Preset("hgx-h200")
	tp.Domains = 2
	tp.RankGPU = map[int]int{100: 9, 3: 12}
	for _, c := range []struct{ rank, gpu, domain int }{{0, 0, 0}, {7, 7, 0}, {8, 8, 1}, {100, 9, 1}, {3, 12, 1}} {
		if g, d := tp.GPU(c.rank), tp.Domain(c.rank); g != c.gpu || d != c.domain {
			t.Errorf("rank %d: GPU %d domain %d, want %d %d", c.rank, g, d, c.gpu, c.domain)
		}
	}
	if !tp.SameDomain(100, 8) || tp.SameDomain(3, 2) || tp.GPUs() != 16 {
		t.Errorf("SameDomain or GPUs wrong")
	}
	if err := tp.CheckRanks([]int{0, 1, 1, 100, 15}); err != nil {
		t.Errorf("valid ranks (a repeated rank is one rank): %v", err)
	}
	for ranks, want := range map[string][]int{
		"runs on GPU 16, but the topology has 16 GPUs": {0, 16},
		"ranks 9 and 100 both run on GPU 9":            {9, 100},
		"rank -1 runs on GPU -1":                       {-1},
	} {
		if err := tp.CheckRanks(want); err == nil || !strings.Contains(err.Error(), ranks) {
			t.Errorf("CheckRanks(%v) = %v, want %q", want, err, ranks)
		}
	}
}

// Validate reports every problem at once.
func TestValidate(t *testing.T) {
	tp := &Topology{Domains: 0, GPUsPerDomain: 8, NICsPerGPU: 1, NVLink: 1, NVLinkLine: 1, NIC: 1, NICLine: 0, Memory: -1,
		LatencyNet: -units.Microsecond, Oversubscription: 0.5}
	err := tp.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"domains = 0", "nic_line", "memory", "latency_net", "oversubscription = 0.5"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 5 {
		t.Errorf("%d problems reported, want 5:\n%v", n, err)
	}
	good, _ := Preset("gb200-nvl72")
	good.Domains, good.Oversubscription = 2, 2
	good.RankGPU = map[int]int{0: 144, 1: 5, 2: 5}
	err = good.Validate()
	if err == nil || !strings.Contains(err.Error(), "rank 0 placed on GPU 144") || !strings.Contains(err.Error(), "ranks 1 and 2 are both placed on GPU 5") {
		t.Errorf("placement errors: %v", err)
	}
}

// Clone is deep; Ideal runs at line rates with no latency and leaves the
// original as it was.
func TestCloneIdeal(t *testing.T) {
	tp, _ := Preset("gb200-nvl72")
	tp.RankGPU = map[int]int{0: 1}
	c := tp.Clone()
	c.RankGPU[0] = 2
	if tp.RankGPU[0] != 1 {
		t.Error("Clone shares RankGPU")
	}
	id := tp.Ideal()
	if id.NVLink != tp.NVLinkLine || id.NIC != tp.NICLine || id.LatencyNet != 0 || id.LatencyNVLink != 0 || id.LatencyLocal != 0 {
		t.Errorf("ideal: %+v", id)
	}
	if tp.NIC != units.GBps(48) || tp.LatencyNet != 10*units.Microsecond {
		t.Error("Ideal changed the original")
	}
}

func TestDescribe(t *testing.T) {
	tp, _ := Preset("hgx-h200")
	tp.Domains, tp.Oversubscription = 4, 2
	d := tp.Describe()
	for _, want := range []string{"preset hgx-h200: 4 domains x 8 GPUs", "2:1 oversubscribed", "op start latency: NVLink 3.00 us, network 10.0 us"} {
		if !strings.Contains(d, want) {
			t.Errorf("missing %q in:\n%s", want, d)
		}
	}
	tp.Preset, tp.Oversubscription = "", 0
	if d := tp.Describe(); !strings.Contains(d, "preset custom") || !strings.Contains(d, "non-blocking") {
		t.Errorf("custom topology:\n%s", d)
	}
}

// The ramp interpolates in log size and holds its ends.
func TestRampAt(t *testing.T) {
	c := ExecCosts{Ramp: []RampPoint{{Bytes: 8 << 20}, {Bytes: 32 << 20, Extra: 6 * units.Microsecond}, {Bytes: 64 << 20, Extra: 8 * units.Microsecond}}}
	for _, tc := range []struct {
		n    int64
		want units.Time
	}{{1, 0}, {8 << 20, 0}, {16 << 20, 3 * units.Microsecond}, {32 << 20, 6 * units.Microsecond}, {64 << 20, 8 * units.Microsecond}, {1 << 40, 8 * units.Microsecond}} {
		if got := c.RampAt(tc.n); got != tc.want {
			t.Errorf("RampAt(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if (&ExecCosts{}).RampAt(1<<30) != 0 {
		t.Error("no ramp, yet a cost")
	}
	tp, _ := Preset("hgx-h200")
	tp.Executor.Costs[PerGPU] = ExecCosts{HostGroup: -1, Ramp: []RampPoint{{Bytes: 8}, {Bytes: 4}}}
	err := tp.Validate()
	if err == nil || !strings.Contains(err.Error(), "per_gpu.host_group") || !strings.Contains(err.Error(), "ramp_bytes[1]") {
		t.Errorf("a negative cost and a descending ramp: %v", err)
	}
}

// A send/recv's extra time in a group both ways grows with its bytes up to
// DuplexOpTop and is held there; a group's start goes linearly in log size
// between its two measured sizes.
func TestDuplexCostsBySize(t *testing.T) {
	c := ExecCosts{DuplexOpLatency: 5 * units.Microsecond, DuplexOpRate: units.GBps(1000), DuplexStart: 40 * units.Microsecond, DuplexStartSmall: 10 * units.Microsecond}
	at := func(n int64) units.Time { return c.DuplexOpAt(n) }
	if at(DuplexOpTop) <= at(DuplexOpTop/2) || at(4*DuplexOpTop) != at(DuplexOpTop) {
		t.Errorf("duplex op extra: %v at %d, %v at half, %v at 4x: want growth up to DuplexOpTop, flat beyond", at(DuplexOpTop), DuplexOpTop, at(DuplexOpTop/2), at(4*DuplexOpTop))
	}
	if got, want := at(DuplexOpTop)-at(0), units.Time(DuplexOpTop); got != want { // 1000 GB/s: a byte a picosecond
		t.Errorf("duplex op extra: %v for %d bytes at 1000 GB/s, want %v", got, DuplexOpTop, want)
	}
	for _, p := range []struct {
		b    int64
		want units.Time
	}{{1 << 20, 10 * units.Microsecond}, {DuplexStartSmallBytes, 10 * units.Microsecond}, {64 << 20, 25 * units.Microsecond}, {DuplexStartBytes, 40 * units.Microsecond}, {4 << 30, 40 * units.Microsecond}} {
		if got := c.DuplexStartAt(p.b); got != p.want {
			t.Errorf("duplex start at %d bytes: %v, want %v", p.b, got, p.want)
		}
	}
}
