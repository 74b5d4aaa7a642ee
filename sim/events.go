package sim

import "github.com/m2n-project/m2n/model/units"

// The engine's two event queues: flow starts by (time, creation), and
// each group's next completion by (time, group), indexed so that a level
// change moves it in place. (A group's own flows are a heap in the engine,
// by the served amount at which each is done.)

// event is a flow's start.
type event struct {
	at   units.Time
	seq  int64
	flow int32
}

// eventHeap orders flow starts by (time, sequence): deterministic on
// ties. It is a typed binary heap: container/heap would box every event in
// an interface.
type eventHeap struct {
	q []event
}

func (h *eventHeap) Len() int { return len(h.q) }

func (a event) before(b event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (h *eventHeap) push(ev event) {
	h.q = append(h.q, ev)
	i := len(h.q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !ev.before(h.q[p]) {
			break
		}
		h.q[i] = h.q[p]
		i = p
	}
	h.q[i] = ev
}

func (h *eventHeap) pop() event {
	top := h.q[0]
	n := len(h.q) - 1
	last := h.q[n]
	h.q = h.q[:n]
	if n == 0 {
		return top
	}
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.q[r].before(h.q[l]) {
			m = r
		}
		if !h.q[m].before(last) {
			break
		}
		h.q[i] = h.q[m]
		i = m
	}
	h.q[i] = last
	return top
}

// groupEvent is a group's next completion.
type groupEvent struct {
	at    units.Time
	group int32
}

// groupHeap orders the groups' next completions by (time, group); pos
// locates each group's entry, so that a rate change moves it in place.
type groupHeap struct {
	q   []groupEvent
	pos []int32 // per group: its index in q, or -1
}

func (h *groupHeap) Len() int { return len(h.q) }

func (a groupEvent) before(b groupEvent) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.group < b.group
}

func (h *groupHeap) place(i int, ev groupEvent) {
	h.q[i] = ev
	h.pos[ev.group] = int32(i)
}

func (h *groupHeap) up(i int) {
	ev := h.q[i]
	for i > 0 {
		p := (i - 1) / 2
		if !ev.before(h.q[p]) {
			break
		}
		h.place(i, h.q[p])
		i = p
	}
	h.place(i, ev)
}

func (h *groupHeap) down(i int) {
	n := len(h.q)
	ev := h.q[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.q[r].before(h.q[l]) {
			m = r
		}
		if !h.q[m].before(ev) {
			break
		}
		h.place(i, h.q[m])
		i = m
	}
	h.place(i, ev)
}

// set puts group g's next completion at at.
func (h *groupHeap) set(g int32, at units.Time) {
	ev := groupEvent{at, g}
	i := h.pos[g]
	if i < 0 {
		h.q = append(h.q, ev)
		h.up(len(h.q) - 1)
		return
	}
	old := h.q[i]
	h.q[i] = ev
	if ev.before(old) {
		h.up(int(i))
	} else {
		h.down(int(i))
	}
}

// remove drops group g's entry, if any.
func (h *groupHeap) remove(g int32) {
	i := h.pos[g]
	if i < 0 {
		return
	}
	h.pos[g] = -1
	n := len(h.q) - 1
	last := h.q[n]
	h.q = h.q[:n]
	if int(i) == n {
		return
	}
	h.place(int(i), last)
	h.down(int(i))
	h.up(int(h.pos[last.group]))
}

func (h *groupHeap) pop() groupEvent {
	top := h.q[0]
	h.remove(top.group)
	return top
}
