package ir

import "github.com/m2n-project/m2n/model/layout"

// Stats summarizes a schedule: what moves over which class of path, and
// the heaviest rank of each.
type Stats struct {
	Ops       int // all ops
	Transfers int // send/recv pairs
	// Bytes moved per path class: transfers over NVLink and the network,
	// and local copies, packs and unpacks (bytes copied, counted once).
	Bytes [3]int64
	// MaxEgress and MaxIngress are the most bytes one rank sends or
	// receives over each class; for Local, the most bytes one rank copies.
	MaxEgress, MaxIngress [3]int64
	// StagingBytes is the staging memory of all ranks; MaxStaging, of the
	// rank that needs the most (arena buffers that share memory counted
	// once: [Schedule.StagingByRank]).
	StagingBytes, MaxStaging int64
}

// Stats computes the schedule's summary, in time linear in its size.
func (s *Schedule) Stats() Stats {
	st := Stats{Ops: len(s.Ops)}
	ranks := make([]int, len(s.World))
	for i, r := range s.World {
		ranks[i] = r.Rank
	}
	wi := layout.NewRankIndex(ranks)
	// Per rank of the world, its loads; a rank outside the world (in a
	// schedule that does not validate) gets a slot of its own.
	egress := make([][3]int64, len(s.World))
	ingress := make([][3]int64, len(s.World))
	other := map[int32]int{}
	at := func(r int32) int {
		if i := wi.Pos(int(r)); i >= 0 {
			return i
		}
		i, ok := other[r]
		if !ok {
			i = len(egress)
			other[r] = i
			egress, ingress = append(egress, [3]int64{}), append(ingress, [3]int64{})
		}
		return i
	}
	rankOf := func(r int32) Rank {
		if i := wi.Pos(int(r)); i >= 0 {
			return s.World[i]
		}
		return Rank{}
	}
	for i := range s.Ops {
		op := &s.Ops[i]
		switch op.Kind {
		case Send:
			a, b := rankOf(op.Rank), rankOf(op.Peer)
			c := Net
			switch {
			case a.GPU == b.GPU:
				c = Local
			case a.Domain == b.Domain:
				c = NVLink
			}
			st.Transfers++
			st.Bytes[c] += op.Src.Bytes
			egress[at(op.Rank)][c] += op.Src.Bytes
			ingress[at(op.Peer)][c] += op.Src.Bytes
		case Recv:
		default:
			st.Bytes[Local] += op.Src.Bytes
			egress[at(op.Rank)][Local] += op.Src.Bytes
			ingress[at(op.Rank)][Local] += op.Src.Bytes
		}
	}
	for _, v := range egress {
		for c := range v {
			st.MaxEgress[c] = max(st.MaxEgress[c], v[c])
		}
	}
	for _, v := range ingress {
		for c := range v {
			st.MaxIngress[c] = max(st.MaxIngress[c], v[c])
		}
	}
	for _, v := range s.StagingByRank() {
		st.StagingBytes += v
		st.MaxStaging = max(st.MaxStaging, v)
	}
	return st
}
