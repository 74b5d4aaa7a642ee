package ir

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

// Stats computes the schedule's summary.
func (s *Schedule) Stats() Stats {
	st := Stats{Ops: len(s.Ops)}
	world := s.WorldMap()
	egress := map[int32]*[3]int64{}
	ingress := map[int32]*[3]int64{}
	get := func(m map[int32]*[3]int64, r int32) *[3]int64 {
		if v, ok := m[r]; ok {
			return v
		}
		v := &[3]int64{}
		m[r] = v
		return v
	}
	for i := range s.Ops {
		op := &s.Ops[i]
		switch op.Kind {
		case Send:
			c := s.ClassOf(op, world)
			st.Transfers++
			st.Bytes[c] += op.Src.Bytes
			get(egress, op.Rank)[c] += op.Src.Bytes
			get(ingress, op.Peer)[c] += op.Src.Bytes
		case Recv:
		default:
			st.Bytes[Local] += op.Src.Bytes
			get(egress, op.Rank)[Local] += op.Src.Bytes
			get(ingress, op.Rank)[Local] += op.Src.Bytes
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
