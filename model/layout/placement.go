package layout

import (
	"fmt"
	"strconv"
	"strings"
)

// Placement says what one mesh axis does to the tensor: replicate it (R) or
// shard tensor dim Dim across the axis (S(Dim)), as PyTorch DTensor's
// Replicate() and Shard(dim).
type Placement struct {
	Shard bool // false: replicate
	Dim   int  // the sharded tensor dim when Shard is true
}

// R is the replicate placement.
var R = Placement{}

// S returns the placement that shards tensor dim d.
func S(d int) Placement { return Placement{Shard: true, Dim: d} }

// String writes "R" or "S(d)".
func (p Placement) String() string {
	if !p.Shard {
		return "R"
	}
	return "S(" + strconv.Itoa(p.Dim) + ")"
}

// ParsePlacement reads "R", "S(d)", or DTensor's spellings "Replicate()" and
// "Shard(d)". Whitespace is ignored.
func ParsePlacement(s string) (Placement, error) {
	t := strings.Join(strings.Fields(s), "")
	switch t {
	case "R", "Replicate", "Replicate()":
		return R, nil
	}
	var body string
	switch {
	case strings.HasPrefix(t, "S(") && strings.HasSuffix(t, ")"):
		body = t[2 : len(t)-1]
	case strings.HasPrefix(t, "Shard(") && strings.HasSuffix(t, ")"):
		body = t[6 : len(t)-1]
	default:
		return Placement{}, fmt.Errorf("placement %q: want R or S(dim)", s)
	}
	d, err := strconv.Atoi(body)
	if err != nil || d < 0 {
		return Placement{}, fmt.Errorf("placement %q: shard dim must be a non-negative integer", s)
	}
	return S(d), nil
}

// MarshalText writes [Placement.String].
func (p Placement) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads what [ParsePlacement] reads.
func (p *Placement) UnmarshalText(b []byte) error {
	v, err := ParsePlacement(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ParsePlacements reads a list such as ["S(0)", "R"].
func ParsePlacements(ss []string) ([]Placement, error) {
	out := make([]Placement, len(ss))
	for i, s := range ss {
		p, err := ParsePlacement(s)
		if err != nil {
			return nil, fmt.Errorf("placements[%d]: %w", i, err)
		}
		out[i] = p
	}
	return out, nil
}

// FormatPlacements writes placements as "[S(0), R]".
func FormatPlacements(ps []Placement) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
