package reports

import (
	"math"
	"strconv"
	"strings"
)

// timeUnits are the units times print in, largest first.
var timeUnits = []struct {
	seconds float64
	name    string
}{{1, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}}

// timeUnit picks the largest unit that keeps |s| at least 1.
func timeUnit(s float64) (scale float64, name string) {
	for _, u := range timeUnits {
		if math.Abs(s) >= u.seconds {
			return u.seconds, u.name
		}
	}
	return 1e-9, "ns"
}

// FormatSeconds writes a time with the largest unit that keeps it at least
// 1, to sig significant digits: "9.395 ms", "150.3 ms", "2.621 us".
func FormatSeconds(s float64, sig int) string {
	if s == 0 {
		return "0 s"
	}
	// Round first, so that 999.96 ms prints as 1.000 s.
	s, _ = strconv.ParseFloat(strconv.FormatFloat(s, 'g', sig, 64), 64)
	scale, name := timeUnit(s)
	v := s / scale
	digits := sig - 1 - int(math.Floor(math.Log10(math.Abs(v))))
	if digits < 0 {
		digits = 0
	}
	return strconv.FormatFloat(v, 'f', digits, 64) + " " + name
}

// FormatMeasured writes a measured time as the scenario gave it, in its
// unit with no rounding beyond a nanosecond: "10.251 ms", "39.4 ms".
func FormatMeasured(s float64) string {
	scale, name := timeUnit(s)
	v := math.Round(s*1e9) / 1e9 / scale
	// Drop float noise below the picosecond.
	v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	return strconv.FormatFloat(v, 'f', -1, 64) + " " + name
}

// formatTick writes a tick value compactly, to at most three significant
// digits: "10 ms", "2.5 us".
func formatTick(s float64) string {
	if s == 0 {
		return "0"
	}
	scale, name := timeUnit(s)
	return trimFloat(s/scale) + " " + name
}

// trimFloat writes v to three significant digits, without trailing zeros
// (and without an exponent from 1000 up: "1024", not "1.02e+03").
func trimFloat(v float64) string {
	if math.Abs(v) >= 1000 {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// formatBytesTick writes a byte count with a binary unit: "1 MiB",
// "1.5 GiB".
func formatBytesTick(b float64) string {
	for _, u := range []struct {
		v    float64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if math.Abs(b) >= u.v {
			return trimFloat(b/u.v) + " " + u.name
		}
	}
	return trimFloat(b) + " B"
}

// formatRateTick writes bytes per second in decimal GB/s: "50 GB/s".
func formatRateTick(w float64) string {
	return trimFloat(w/1e9) + " GB/s"
}

// formatPercent writes a signed percentage to one decimal: "+2.5%".
func formatPercent(f float64) string {
	return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
}

func signedPercent(f float64) string {
	s := formatPercent(f)
	if !strings.HasPrefix(s, "-") {
		s = "+" + s
	}
	return s
}

// formatFloat writes v exactly (the shortest text that reads back equal).
func formatFloat(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// mdEscape makes text safe inside a Markdown table cell.
func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
