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
