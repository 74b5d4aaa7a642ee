package layout

import (
	"fmt"
	"strings"
)

// Box is an axis-aligned region of a tensor: Start[d] is the first index and
// Size[d] the extent along dim d, in elements. A box is empty when any
// extent is zero.
type Box struct {
	Start []int64
	Size  []int64
}

// NewBox returns a zero box of rank n.
func NewBox(n int) Box { return Box{Start: make([]int64, n), Size: make([]int64, n)} }

// Rank is the number of dims.
func (b Box) Rank() int { return len(b.Size) }

// Elems is the number of elements in the box.
func (b Box) Elems() int64 {
	n := int64(1)
	for _, s := range b.Size {
		n *= s
	}
	return n
}

// Empty reports whether the box holds no element.
func (b Box) Empty() bool {
	for _, s := range b.Size {
		if s == 0 {
			return true
		}
	}
	return false
}

// Clone returns a deep copy.
func (b Box) Clone() Box {
	return Box{Start: append([]int64(nil), b.Start...), Size: append([]int64(nil), b.Size...)}
}

// Equal reports whether two boxes cover the same region (all empty boxes
// of one rank are equal).
func (b Box) Equal(o Box) bool {
	if len(b.Size) != len(o.Size) {
		return false
	}
	if b.Empty() || o.Empty() {
		return b.Empty() && o.Empty()
	}
	for d := range b.Size {
		if b.Start[d] != o.Start[d] || b.Size[d] != o.Size[d] {
			return false
		}
	}
	return true
}

// Intersect returns the overlap of two boxes of equal rank and whether it
// is non-empty.
func (b Box) Intersect(o Box) (Box, bool) {
	r := NewBox(len(b.Size))
	for d := range b.Size {
		lo := max(b.Start[d], o.Start[d])
		hi := min(b.Start[d]+b.Size[d], o.Start[d]+o.Size[d])
		if hi <= lo {
			return Box{}, false
		}
		r.Start[d], r.Size[d] = lo, hi-lo
	}
	return r, true
}

// Contains reports whether o lies inside b.
func (b Box) Contains(o Box) bool {
	for d := range b.Size {
		if o.Start[d] < b.Start[d] || o.Start[d]+o.Size[d] > b.Start[d]+b.Size[d] {
			return false
		}
	}
	return true
}

// Sub returns o in coordinates relative to b's start (o must lie inside b).
func (b Box) Sub(o Box) Box {
	r := o.Clone()
	for d := range r.Start {
		r.Start[d] -= b.Start[d]
	}
	return r
}

// String writes the box as half-open ranges, "[0:16, 256:512, 0:7168]".
func (b Box) String() string {
	parts := make([]string, len(b.Size))
	for d := range b.Size {
		parts[d] = fmt.Sprintf("%d:%d", b.Start[d], b.Start[d]+b.Size[d])
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Runs describes how a box of a row-major array of shape full lies in memory:
// it is Count runs of RunElems contiguous elements each. A box that is one
// contiguous range has Count == 1.
func (b Box) Runs(full []int64) (count, runElems int64) {
	n := len(b.Size)
	if b.Empty() {
		return 0, 0
	}
	// Innermost dims that the box spans entirely merge into one run, plus
	// the first dim (from the inside) that it spans only partly.
	run := int64(1)
	d := n - 1
	for ; d >= 0; d-- {
		run *= b.Size[d]
		if b.Size[d] != full[d] {
			d--
			break
		}
	}
	// Outer dims that have extent 1 add no runs.
	count = 1
	for ; d >= 0; d-- {
		count *= b.Size[d]
	}
	return count, run
}

// ForEachRun calls f(first, n) for each contiguous run of the box inside a
// row-major array of shape full, in increasing order: first is the element
// offset of the run in the array and n its length in elements.
func (b Box) ForEachRun(full []int64, f func(first, n int64)) {
	count, run := b.Runs(full)
	if count == 0 {
		return
	}
	nd := len(full)
	stride := make([]int64, nd)
	acc := int64(1)
	for d := nd - 1; d >= 0; d-- {
		stride[d] = acc
		acc *= full[d]
	}
	// The dims outside the run iterate; they are those whose sizes multiply
	// to count.
	outer := nd
	for prod := int64(1); outer > 0 && prod < run; {
		outer--
		prod *= b.Size[outer]
	}
	base := int64(0)
	for d := range nd {
		base += b.Start[d] * stride[d]
	}
	idx := make([]int64, outer)
	off := base
	for range count {
		f(off, run)
		for d := outer - 1; d >= 0; d-- {
			idx[d]++
			off += stride[d]
			if idx[d] < b.Size[d] {
				break
			}
			off -= idx[d] * stride[d]
			idx[d] = 0
		}
	}
}

// BoxArena hands out boxes from large blocks, so code that makes millions
// of small boxes (the verifier) makes few allocations. A box from an arena
// must not be grown with append. The zero value is ready.
type BoxArena struct {
	block []int64 // the current block
	used  int     // its values handed out since it was made or reset
}

// New returns a zeroed box of rank nd.
func (a *BoxArena) New(nd int) Box {
	b := a.take(nd)
	clear(b.Start) // a block is reused after Reset
	clear(b.Size)
	return b
}

// take returns a box of rank nd whose values are those last written there.
func (a *BoxArena) take(nd int) Box {
	if len(a.block)-a.used < 2*nd {
		a.block, a.used = make([]int64, max(2*nd, 1<<16)), 0
	}
	v := a.block[a.used : a.used+2*nd : a.used+2*nd]
	a.used += 2 * nd
	return Box{Start: v[:nd:nd], Size: v[nd:]}
}

// Reset hands out the current block again, for boxes that live a short
// while: every box New or Clone returned before must no longer be used.
func (a *BoxArena) Reset() { a.used = 0 }

// Clone returns a copy of b from the arena.
func (a *BoxArena) Clone(b Box) Box {
	c := a.take(len(b.Size))
	copy(c.Start, b.Start)
	copy(c.Size, b.Size)
	return c
}
