// Package layout describes how a tensor is spread over ranks: its global
// shape and dtype, a mesh of global ranks, and one placement per mesh axis.
//
// The semantics are PyTorch DTensor's. A mesh axis with placement S(d)
// splits tensor dim d across the axis as torch.chunk does (uneven sizes, and
// trailing pieces possibly empty). Several axes may shard different dims, or
// the same dim: then the outer (earlier) axis splits first and each inner
// axis splits the piece the outer ones left. Axes with placement R replicate:
// ranks that differ only in their R coordinates hold equal boxes.
package layout

import (
	"errors"
	"fmt"
	"math/bits"
)

// Layout is a tensor's distribution over a mesh of ranks.
type Layout struct {
	Shape      []int64     // global shape, elements per dim
	DType      DType       // element type
	Mesh       Mesh        // the ranks
	Placements []Placement // one per mesh axis
}

// MaxBytes bounds the size of one tensor so that byte arithmetic in int64
// never overflows, with room for sums over many tensors.
const MaxBytes = int64(1) << 56

// Elems is the number of elements of the global tensor.
func (l Layout) Elems() int64 {
	n := int64(1)
	for _, s := range l.Shape {
		n *= s
	}
	return n
}

// Bytes is the size of the global tensor in bytes.
func (l Layout) Bytes() int64 { return l.Elems() * l.DType.Size() }

// Validate checks the shape, dtype, mesh and placements, and reports every
// problem it finds.
func (l Layout) Validate() error {
	var errs []error
	if len(l.Shape) == 0 {
		errs = append(errs, errors.New("shape is empty (a scalar has shape [1])"))
	}
	n := uint64(1)
	overflow := false
	for d, s := range l.Shape {
		if s <= 0 {
			errs = append(errs, fmt.Errorf("shape[%d] = %d: must be positive", d, s))
			continue
		}
		hi, lo := bits.Mul64(n, uint64(s))
		if hi != 0 {
			overflow = true
		}
		n = lo
	}
	if !l.DType.Valid() {
		errs = append(errs, fmt.Errorf("dtype %v is not valid", l.DType))
	} else if len(errs) == 0 {
		hi, b := bits.Mul64(n, uint64(l.DType.Size()))
		if overflow || hi != 0 || b > uint64(MaxBytes) {
			errs = append(errs, fmt.Errorf("shape %v of %v is larger than %d bytes", l.Shape, l.DType, MaxBytes))
		}
	}
	if err := l.Mesh.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(l.Placements) != len(l.Mesh.Shape) {
		errs = append(errs, fmt.Errorf("%d placements for a mesh of %d axes", len(l.Placements), len(l.Mesh.Shape)))
	}
	for i, p := range l.Placements {
		if p.Shard && (p.Dim < 0 || p.Dim >= len(l.Shape)) {
			errs = append(errs, fmt.Errorf("placements[%d] = %v: shard dim out of range for a tensor of %d dims", i, p, len(l.Shape)))
		}
	}
	return errors.Join(errs...)
}

// ShardAxes returns, for each tensor dim, the mesh axes that shard it, outer
// axis first.
func (l Layout) ShardAxes() [][]int {
	axes := make([][]int, len(l.Shape))
	for a, p := range l.Placements {
		if p.Shard {
			axes[p.Dim] = append(axes[p.Dim], a)
		}
	}
	return axes
}

// LocalBox returns the box of the global tensor held at mesh position i.
// The layout must be valid.
func (l Layout) LocalBox(i int) Box {
	c := make([]int, len(l.Mesh.Shape))
	l.Mesh.Coord(i, c)
	return l.BoxAt(c)
}

// BoxAt returns the box held at mesh coordinate c.
func (l Layout) BoxAt(c []int) Box {
	b := Box{Start: make([]int64, len(l.Shape)), Size: append([]int64(nil), l.Shape...)}
	for a, p := range l.Placements {
		if !p.Shard {
			continue
		}
		s, n := Chunk(b.Size[p.Dim], l.Mesh.Shape[a], c[a])
		b.Start[p.Dim] += s
		b.Size[p.Dim] = n
	}
	return b
}

// LocalBytes is the size of the shard held at mesh position i.
func (l Layout) LocalBytes(i int) int64 { return l.LocalBox(i).Elems() * l.DType.Size() }

// String writes the layout as "[256 2048 7168] bf16 on [16] ranks 0-15 [S(0)]".
func (l Layout) String() string {
	return fmt.Sprintf("%v %v on %v %s", l.Shape, l.DType, l.Mesh, FormatPlacements(l.Placements))
}

// Interval is a half-open range [Start, Start+Size) of one tensor dim.
type Interval struct {
	Start, Size int64
}

// DimPartition is how a layout splits one tensor dim: the mesh axes that
// shard it (outer first), and one interval per combination of their
// coordinates, indexed in mixed radix over those axes (outer axis most
// significant). Intervals are non-decreasing in Start and the non-empty
// ones tile [0, n).
type DimPartition struct {
	Axes      []int
	Intervals []Interval
}

// Partition returns the split of tensor dim d.
func (l Layout) Partition(d int) DimPartition {
	var axes []int
	for a, p := range l.Placements {
		if p.Shard && p.Dim == d {
			axes = append(axes, a)
		}
	}
	ivs := []Interval{{0, l.Shape[d]}}
	for _, a := range axes {
		m := l.Mesh.Shape[a]
		next := make([]Interval, 0, len(ivs)*m)
		for _, iv := range ivs {
			for j := 0; j < m; j++ {
				s, n := Chunk(iv.Size, m, j)
				next = append(next, Interval{iv.Start + s, n})
			}
		}
		ivs = next
	}
	return DimPartition{Axes: axes, Intervals: ivs}
}

// Index returns the interval index of mesh coordinate c in this partition.
func (p DimPartition) Index(meshShape []int, c []int) int {
	k := 0
	for _, a := range p.Axes {
		k = k*meshShape[a] + c[a]
	}
	return k
}
