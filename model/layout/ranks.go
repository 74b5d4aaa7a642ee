package layout

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxRank bounds global rank numbers (about a million), so that a typo such
// as "0-1e9" is an error rather than an allocation of a billion ranks.
const MaxRank = 1 << 20

// RankRange is the n consecutive ranks first, first+1, ..., first+n-1.
func RankRange(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

// ParseRanks reads a rank list such as "0-15" or "16-79,96": comma-separated
// single ranks and inclusive ranges, in the order written. Duplicates are
// kept (a mesh rejects them with a better message).
func ParseRanks(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("rank list %q is empty", s)
	}
	var spans [][2]int
	total := 0
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseRank(lo)
		if err != nil {
			return nil, fmt.Errorf("rank list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = parseRank(hi); err != nil {
				return nil, fmt.Errorf("rank list %q: %w", s, err)
			}
			if b < a {
				return nil, fmt.Errorf("rank list %q: range %q runs backwards", s, part)
			}
		}
		if total += b - a + 1; total > MaxRank {
			return nil, fmt.Errorf("rank list %q: more than %d ranks", s, MaxRank)
		}
		spans = append(spans, [2]int{a, b})
	}
	out := make([]int, 0, total)
	for _, sp := range spans {
		for r := sp[0]; r <= sp[1]; r++ {
			out = append(out, r)
		}
	}
	return out, nil
}

func parseRank(s string) (int, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v >= MaxRank {
		return 0, fmt.Errorf("%q is not a rank in [0, %d)", s, MaxRank)
	}
	return v, nil
}

// FormatRanks writes ranks compactly, merging ascending runs: [0 1 2 3 7] is
// "0-3,7". ParseRanks(FormatRanks(r)) == r.
func FormatRanks(ranks []int) string {
	var b strings.Builder
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ranks[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ranks[j]))
		}
		i = j + 1
	}
	return b.String()
}

// RankIndex finds the position of a rank in a list of distinct ranks in
// constant time: a table over [min, max] of the ranks when they fill at
// least an eighth of it, else a hash map. Building it is linear in the
// list; a rank listed twice keeps its last position.
type RankIndex struct {
	lo    int
	dense []int32 // position+1 of rank lo+i; 0 when absent
	m     map[int]int32
}

// NewRankIndex indexes ranks by their position in the list.
func NewRankIndex(ranks []int) *RankIndex {
	x := &RankIndex{}
	if len(ranks) == 0 {
		return x
	}
	lo, hi := ranks[0], ranks[0]
	for _, r := range ranks {
		lo, hi = min(lo, r), max(hi, r)
	}
	if span := uint64(hi) - uint64(lo); hi >= lo && span < 8*uint64(len(ranks))+1024 {
		x.lo, x.dense = lo, make([]int32, span+1)
		for i, r := range ranks {
			x.dense[r-lo] = int32(i) + 1
		}
		return x
	}
	x.m = make(map[int]int32, len(ranks))
	for i, r := range ranks {
		x.m[r] = int32(i)
	}
	return x
}

// Pos returns the position of rank in the list, or -1 when it is absent.
func (x *RankIndex) Pos(rank int) int {
	if x.m != nil {
		if i, ok := x.m[rank]; ok {
			return int(i)
		}
		return -1
	}
	if i := uint64(rank) - uint64(x.lo); rank >= x.lo && i < uint64(len(x.dense)) {
		return int(x.dense[i]) - 1
	}
	return -1
}
