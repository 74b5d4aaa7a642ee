package units

import (
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Bytes
		err  string
	}{
		{"4 MiB", 4 << 20, ""}, {"7168MiB", 7168 << 20, ""}, {"1.5 GB", 1.5e9, ""}, {"4096", 4096, ""},
		{"2 kib", 2048, ""}, {"0 B", 0, ""}, {"1e3 B", 1000, ""},
		{"4 MB/s", 0, "unknown unit"}, {"-1 MiB", 0, "out of range"}, {"0.5 B", 0, "whole number"}, {"x", 0, "want a number"},
	} {
		got, err := ParseBytes(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseBytes(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseBytes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseBytes(got.String()); err != nil || back != got {
			t.Errorf("round trip %v: %v, %v", got, back, err)
		}
	}
}

func TestParseBandwidth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64 // GB/s
		err  string
	}{
		{"50 GB/s", 50, ""}, {"400 Gb/s", 50, ""}, {"400 Gbps", 50, ""}, {"1.6 TB/s", 1600, ""},
		{"721.8GB/s", 721.8, ""}, {"50 GBps", 50, ""}, {"1 GiB/s", 1.073741824, ""},
		{"50", 0, "unknown unit"}, {"fast", 0, "want a number"}, {"-3 GB/s", 0, "want a number"},
	} {
		got, err := ParseBandwidth(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseBandwidth(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got.GBps() < tc.want*(1-1e-12) || got.GBps() > tc.want*(1+1e-12) {
			t.Errorf("ParseBandwidth(%q) = %v, %v; want %v GB/s", tc.in, got, err, tc.want)
		}
	}
}

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Time
	}{
		{"10us", 10 * Microsecond}, {"3.4 µs", 3400 * Nanosecond}, {"2ms", 2 * Millisecond}, {"1 s", Second}, {"5ps", 5},
	} {
		got, err := ParseTime(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		b, _ := got.MarshalText()
		if back, err := ParseTime(string(b)); err != nil || back != got {
			t.Errorf("round trip %v via %q: %v, %v", got, b, back, err)
		}
	}
	if _, err := ParseTime("10"); err == nil {
		t.Error("ParseTime(10) accepted a number without a unit")
	}
}

func TestTransferTime(t *testing.T) {
	// The paper's flat SOL at rho = 2: 2 x 7.168e9 B over 16 x 50 GB/s = 17.92 ms.
	if got := TransferTime(2*7168*MB, 16*GBps(50)); got != 17920*Microsecond {
		t.Errorf("TransferTime = %v, want 17.92 ms", got)
	}
	if got := TransferTime(1, GBps(3)); got != 334 {
		t.Errorf("TransferTime rounds up: got %d ps, want 334", got)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"4 MiB", "400 Gb/s", "10us", "1e308 TB", "1e-9 s", "Gbps"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if b, err := ParseBytes(s); err == nil && b < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, b)
		}
		if w, err := ParseBandwidth(s); err == nil && w < 0 {
			t.Fatalf("ParseBandwidth(%q) = %v", s, w)
		}
		if d, err := ParseTime(s); err == nil && d < 0 {
			t.Fatalf("ParseTime(%q) = %v", s, d)
		}
	})
}
