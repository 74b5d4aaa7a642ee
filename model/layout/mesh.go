package layout

import (
	"fmt"
	"strings"
)

// Mesh is a logical grid of global ranks: Shape gives the size of each axis
// and Ranks lists the ranks filling the grid in row-major order (the last
// axis varies fastest). Ranks need not be contiguous or sorted.
type Mesh struct {
	Shape []int
	Ranks []int
}

// Size is the number of positions in the mesh, the product of Shape.
func (m Mesh) Size() int {
	n := 1
	for _, s := range m.Shape {
		n *= s
	}
	return n
}

// Validate checks that the shape is positive, the rank list has one rank per
// position, and no rank appears twice.
func (m Mesh) Validate() error {
	if len(m.Shape) == 0 {
		return fmt.Errorf("mesh shape is empty")
	}
	n := 1
	for i, s := range m.Shape {
		if s <= 0 {
			return fmt.Errorf("mesh shape[%d] = %d: must be positive", i, s)
		}
		if n > MaxRank/s {
			return fmt.Errorf("mesh shape %v: more than %d positions", m.Shape, MaxRank)
		}
		n *= s
	}
	if len(m.Ranks) != n {
		return fmt.Errorf("mesh shape %v has %d positions but the rank list has %d ranks", m.Shape, n, len(m.Ranks))
	}
	hi := 0
	for i, r := range m.Ranks {
		if r < 0 || r >= MaxRank {
			return fmt.Errorf("mesh rank %d at position %d: not in [0, %d)", r, i, MaxRank)
		}
		hi = max(hi, r)
	}
	seen := make([]uint64, hi/64+1)
	for i, r := range m.Ranks {
		if seen[r/64]&(1<<(r%64)) != 0 {
			for j := range i {
				if m.Ranks[j] == r {
					return fmt.Errorf("rank %d appears twice in the mesh (positions %d and %d)", r, j, i)
				}
			}
		}
		seen[r/64] |= 1 << (r % 64)
	}
	return nil
}

// Coord writes the mesh coordinate of position i into c (len(c) == len(Shape)).
func (m Mesh) Coord(i int, c []int) {
	for a := len(m.Shape) - 1; a >= 0; a-- {
		c[a] = i % m.Shape[a]
		i /= m.Shape[a]
	}
}

// String writes the mesh as "[2 8] ranks 72-87".
func (m Mesh) String() string {
	parts := make([]string, len(m.Shape))
	for i, s := range m.Shape {
		parts[i] = fmt.Sprint(s)
	}
	return "[" + strings.Join(parts, " ") + "] ranks " + FormatRanks(m.Ranks)
}

// Equal reports whether two meshes have the same shape and rank order.
func (m Mesh) Equal(o Mesh) bool {
	if len(m.Shape) != len(o.Shape) || len(m.Ranks) != len(o.Ranks) {
		return false
	}
	for i := range m.Shape {
		if m.Shape[i] != o.Shape[i] {
			return false
		}
	}
	for i := range m.Ranks {
		if m.Ranks[i] != o.Ranks[i] {
			return false
		}
	}
	return true
}
