// Package units holds the quantities m2n reads and prints, each with its
// unit in its type: byte counts, bandwidths in bytes per second, and time in
// integer picoseconds. Each parses from text with an explicit unit ("4 MiB",
// "400 Gb/s", "10us"), so a bare number can never be misread.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Bytes is a byte count.
type Bytes int64

// Common byte multiples.
const (
	KiB Bytes = 1 << 10
	MiB Bytes = 1 << 20
	GiB Bytes = 1 << 30
	TiB Bytes = 1 << 40
	KB  Bytes = 1e3
	MB  Bytes = 1e6
	GB  Bytes = 1e9
	TB  Bytes = 1e12
)

var byteUnits = map[string]float64{
	"b": 1, "": 1,
	"kib": float64(KiB), "mib": float64(MiB), "gib": float64(GiB), "tib": float64(TiB),
	"kb": float64(KB), "mb": float64(MB), "gb": float64(GB), "tb": float64(TB),
}

// ParseBytes reads a size such as "4 MiB", "7168MiB", "1.5 GB" or "4096"
// (bytes). Binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB) units are
// case-insensitive.
func ParseBytes(s string) (Bytes, error) {
	num, unit := splitNumber(s)
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number and a unit such as \"4 MiB\"", s)
	}
	mul, ok := byteUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s, unit)
	}
	v := f * mul
	if v < 0 || math.IsNaN(v) || v > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: out of range", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
	}
	return Bytes(v), nil
}

// String writes the size with a binary unit when it is a whole multiple of
// one, else in bytes: "4 MiB", "1000 B".
func (b Bytes) String() string {
	for _, u := range []struct {
		v    Bytes
		name string
	}{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
		if b != 0 && b%u.v == 0 {
			return fmt.Sprintf("%d %s", b/u.v, u.name)
		}
	}
	return fmt.Sprintf("%d B", int64(b))
}

// Human writes the size rounded to three significant digits with the
// largest binary unit that keeps it at least 1: "7.00 GiB", "56.0 MiB".
func (b Bytes) Human() string {
	v := float64(b)
	for _, u := range []struct {
		v    float64
		name string
	}{{float64(TiB), "TiB"}, {float64(GiB), "GiB"}, {float64(MiB), "MiB"}, {float64(KiB), "KiB"}} {
		if math.Abs(v) >= u.v {
			return sig3(v/u.v) + " " + u.name
		}
	}
	return fmt.Sprintf("%d B", int64(b))
}

// MarshalText writes [Bytes.String].
func (b Bytes) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText reads what [ParseBytes] reads.
func (b *Bytes) UnmarshalText(t []byte) error {
	v, err := ParseBytes(string(t))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Bandwidth is a data rate in bytes per second.
type Bandwidth float64

// GBps returns a bandwidth of g decimal gigabytes (1e9 bytes) per second.
func GBps(g float64) Bandwidth { return Bandwidth(g * 1e9) }

// GBps is the bandwidth in decimal gigabytes per second.
func (w Bandwidth) GBps() float64 { return float64(w) / 1e9 }

var rateUnits = map[string]float64{
	"b/s": 1, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12,
	"kib/s": 1 << 10, "mib/s": 1 << 20, "gib/s": 1 << 30, "tib/s": 1 << 40,
}

// ParseBandwidth reads a rate with its unit: bytes ("50 GB/s", "1.6 TB/s",
// "48 GiB/s", "GBps") or bits ("400 Gb/s", "400 Gbps"). A capital B means
// bytes and a lower-case b bits, as in the units' usual spelling.
func ParseBandwidth(s string) (Bandwidth, error) {
	num, unit := splitNumber(s)
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) {
		return 0, fmt.Errorf("bandwidth %q: want a number and a unit such as \"50 GB/s\" or \"400 Gb/s\"", s)
	}
	u := strings.ReplaceAll(unit, "ps", "/s")
	bits := false
	if i := strings.IndexAny(u, "bB"); i >= 0 && u[i] == 'b' {
		bits = true
		u = u[:i] + "B" + u[i+1:]
	}
	mul, ok := rateUnits[strings.ToLower(u)]
	if !ok {
		return 0, fmt.Errorf("bandwidth %q: unknown unit %q (use e.g. GB/s, GiB/s, Gb/s)", s, unit)
	}
	v := f * mul
	if bits {
		v /= 8
	}
	if math.IsInf(v, 0) {
		return 0, fmt.Errorf("bandwidth %q: too large (beyond a float64)", s)
	}
	return Bandwidth(v), nil
}

// String writes the rate in decimal GB/s: "50 GB/s", "721.8 GB/s".
func (w Bandwidth) String() string {
	return strconv.FormatFloat(w.GBps(), 'f', -1, 64) + " GB/s"
}

// MarshalText writes [Bandwidth.String].
func (w Bandwidth) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// UnmarshalText reads what [ParseBandwidth] reads.
func (w *Bandwidth) UnmarshalText(t []byte) error {
	v, err := ParseBandwidth(string(t))
	if err != nil {
		return err
	}
	*w = v
	return nil
}

// Time is simulated time, or a duration, in integer picoseconds. An int64
// holds about 106 days.
type Time int64

// Time units.
const (
	Picosecond  Time = 1
	Nanosecond  Time = 1e3
	Microsecond Time = 1e6
	Millisecond Time = 1e9
	Second      Time = 1e12
)

var timeUnits = map[string]Time{
	"ps": Picosecond, "ns": Nanosecond, "us": Microsecond, "µs": Microsecond,
	"ms": Millisecond, "s": Second,
}

// ParseTime reads a duration with its unit: "10us", "3.4 µs", "2ms".
func ParseTime(s string) (Time, error) {
	num, unit := splitNumber(s)
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("time %q: want a non-negative number and a unit such as \"10us\"", s)
	}
	mul, ok := timeUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("time %q: unknown unit %q (use ps, ns, us, ms, s)", s, unit)
	}
	v := f * float64(mul)
	if v > math.MaxInt64/4 {
		return 0, fmt.Errorf("time %q: out of range", s)
	}
	return Time(math.Round(v)), nil
}

// Seconds is the time in seconds.
func (t Time) Seconds() float64 { return float64(t) / float64(Second) }

// String writes the time with the largest unit that keeps it at least 1,
// to three significant digits: "9.40 ms", "10.0 us".
func (t Time) String() string {
	for _, u := range []struct {
		v    Time
		name string
	}{{Second, "s"}, {Millisecond, "ms"}, {Microsecond, "us"}, {Nanosecond, "ns"}} {
		if t >= u.v || -t >= u.v {
			return sig3(float64(t)/float64(u.v)) + " " + u.name
		}
	}
	return fmt.Sprintf("%d ps", int64(t))
}

// MarshalText writes the time in exact picoseconds ("10000000ps") when it is
// not a whole number of a larger unit, so that it reads back equal.
func (t Time) MarshalText() ([]byte, error) {
	for _, u := range []struct {
		v    Time
		name string
	}{{Second, "s"}, {Millisecond, "ms"}, {Microsecond, "us"}, {Nanosecond, "ns"}} {
		if t != 0 && t%u.v == 0 {
			return []byte(fmt.Sprintf("%d%s", t/u.v, u.name)), nil
		}
	}
	return []byte(fmt.Sprintf("%dps", int64(t))), nil
}

// UnmarshalText reads what [ParseTime] reads.
func (t *Time) UnmarshalText(b []byte) error {
	v, err := ParseTime(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// TransferTime is the time to move n bytes at rate w, rounded up to a whole
// picosecond. It is 0 for n <= 0 and panics on a non-positive rate.
func TransferTime(n Bytes, w Bandwidth) Time {
	if n <= 0 {
		return 0
	}
	if w <= 0 {
		panic("units: transfer at a non-positive bandwidth")
	}
	return Time(math.Ceil(float64(n) / float64(w) * float64(Second)))
}

func splitNumber(s string) (num, unit string) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' || s[i] == '-' || s[i] == '+' || s[i] == 'e' || s[i] == 'E') {
		// 'e' is an exponent only when a digit follows; "5 e4m3" never reaches here.
		if (s[i] == 'e' || s[i] == 'E') && (i+1 >= len(s) || !(s[i+1] >= '0' && s[i+1] <= '9' || s[i+1] == '-' || s[i+1] == '+')) {
			break
		}
		i++
	}
	return s[:i], strings.TrimSpace(s[i:])
}

func sig3(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
