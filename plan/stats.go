package plan

// RegionStats summarizes a [Regions] for `m2n plan`, with the default
// supplier choice (every destination rank served directly, as the flat
// route does).
type RegionStats struct {
	UniqueBytes   int64 // bytes of the tensor, each counted once
	Contributions int   // distinct (source box, destination box) intersections
	Transfers     int   // per-rank deliveries from another rank
	LocalCopies   int   // per-rank deliveries a rank makes from its own source shard
	TransferBytes int64 // bytes of all transfers
	LocalBytes    int64 // bytes of all local copies
	NeedMin       int64 // fewest bytes any destination rank needs
	NeedMax       int64 // most bytes any destination rank needs
	EgressMin     int64 // fewest bytes any source rank sends to other ranks
	EgressMax     int64 // most bytes any source rank sends to other ranks
}

// Stats computes the summary without visiting every (contribution,
// destination rank) pair where the meshes are disjoint: the egress of a
// source replica is then a closed form of the rotation.
func (r *Regions) Stats() RegionStats {
	var st RegionStats
	st.UniqueBytes = r.Src.Bytes()
	st.Contributions = len(r.Contribs)
	// Need per destination rank: its slot's box; ranks with empty boxes need 0.
	st.NeedMin = -1
	nonEmptyDst := 0
	for _, sl := range r.DstSlots {
		b := sl.Box.Elems() * r.Elem()
		nonEmptyDst += len(sl.Ranks)
		st.NeedMax = max(st.NeedMax, b)
		if st.NeedMin < 0 || b < st.NeedMin {
			st.NeedMin = b
		}
	}
	if nonEmptyDst < len(r.Dst.Mesh.Ranks) || st.NeedMin < 0 {
		st.NeedMin = 0
	}
	egress := make(map[int]int64, len(r.Src.Mesh.Ranks))
	for _, rk := range r.Src.Mesh.Ranks {
		egress[rk] = 0
	}
	overlap := make([]bool, len(r.DstSlots))
	for k, sl := range r.DstSlots {
		for _, rk := range sl.Ranks {
			if r.SrcSlotOf(rk) >= 0 {
				overlap[k] = true
			}
		}
	}
	for j := range r.Contribs {
		c := &r.Contribs[j]
		b := r.Bytes(j)
		rho := len(r.DstSlots[c.Dst].Ranks)
		reps := r.SrcSlots[c.Src].Ranks
		if overlap[c.Dst] {
			for i := range rho {
				s := r.Supplier(j, i)
				if s == r.DstSlots[c.Dst].Ranks[i] {
					st.LocalCopies++
					st.LocalBytes += b
				} else {
					st.Transfers++
					st.TransferBytes += b
					egress[s] += b
				}
			}
			continue
		}
		st.Transfers += rho
		st.TransferBytes += int64(rho) * b
		m := len(reps)
		for i := 0; i < min(rho, m); i++ {
			egress[reps[(c.base+i)%m]] += b * int64((rho-i+m-1)/m)
		}
	}
	first := true
	for _, e := range egress {
		if first || e < st.EgressMin {
			st.EgressMin = e
		}
		if first || e > st.EgressMax {
			st.EgressMax = e
		}
		first = false
	}
	return st
}
