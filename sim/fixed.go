package sim

import (
	"math"
	"math/bits"
)

// Fixed-point units of the max-min solver. Every sum it forms is an
// integer sum, exact in any order, so a solution depends only on the flows
// and resources, not on the order anything was added or visited.
//
//   - A rate (a flow's rate, a resource's saturation level) is an int64 in
//     units of 2^-40 bytes per picosecond (about 0.91 bytes per second).
//   - A coefficient (bytes of a resource per byte of a flow: 2 for a copy's
//     memory) is an int64 in units of 2^-32.
//   - A load (coefficient x rate) and a capacity are 128-bit integers in
//     units of 2^-72 bytes per picosecond.
//   - An amount of data served is a 128-bit integer in units of 2^-40
//     bytes (a rate times picoseconds).
const (
	rateBits = 40
	coefBits = 32
)

// Ranges the units hold: a capacity up to 2^14 bytes/ps (16 PB/s), a
// coefficient from 2^-8 to 2^12, and a resource's coefficients summing
// below 2^62, so that a level (capacity / coefficients) fits an int64.
const (
	maxCapacityBpps = 1 << 14
	minCoef         = 1.0 / 256
	maxCoef         = 4096.0
	maxWeight       = 1 << 62
)

// noLevel is the level of a resource that does not saturate.
const noLevel = math.MaxInt64

// u128 is an unsigned 128-bit integer.
type u128 struct{ hi, lo uint64 }

func (a u128) add(b u128) u128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, c)
	return u128{hi, lo}
}

func (a u128) sub(b u128) u128 {
	lo, c := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, c)
	return u128{hi, lo}
}

func (a u128) less(b u128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

// mul128 is a x b.
func mul128(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

// floorDiv is floor(a / d) for d > 0, or noLevel when that is noLevel or
// more.
func (a u128) floorDiv(d uint64) int64 {
	if a.hi >= d {
		return noLevel
	}
	q, _ := bits.Div64(a.hi, a.lo, d)
	if q >= noLevel {
		return noLevel
	}
	return int64(q)
}

// ceilDiv is ceil(a / d) for d > 0, or noLevel when that is noLevel or
// more.
func (a u128) ceilDiv(d uint64) int64 {
	if a.hi >= d {
		return noLevel
	}
	q, r := bits.Div64(a.hi, a.lo, d)
	if r > 0 {
		q++
	}
	if q >= noLevel {
		return noLevel
	}
	return int64(q)
}

// fixedFloor is floor(x * 2^shift) for 0 <= x < 2^(127 - shift).
func fixedFloor(x float64, shift int) u128 {
	if !(x > 0) {
		return u128{}
	}
	m, e := math.Frexp(x) // x = m * 2^e, m in [0.5, 1)
	mant := uint64(m * (1 << 53))
	s := e - 53 + shift // x * 2^shift = mant * 2^s
	switch {
	case s <= -64:
		return u128{}
	case s < 0:
		return u128{0, mant >> uint(-s)}
	case s == 0:
		return u128{0, mant}
	case s < 64:
		return u128{mant >> uint(64-s), mant << uint(s)}
	default:
		return u128{mant << uint(s-64), 0}
	}
}

// rateOf is a rate in bytes/ps as a fixed-point rate (floor); 0 for none.
func rateOf(bpps float64) int64 {
	v := fixedFloor(bpps, rateBits)
	if v.hi > 0 || v.lo >= noLevel {
		return noLevel - 1
	}
	return int64(v.lo)
}

// coefOf is a coefficient as a fixed-point one (nearest).
func coefOf(c float64) int64 { return int64(math.Round(c * (1 << coefBits))) }

// bytesServed is n bytes as an amount served.
func bytesServed(n int64) u128 { return u128{uint64(n) >> (64 - rateBits), uint64(n) << rateBits} }
