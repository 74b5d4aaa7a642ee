package plan

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/m2n-project/m2n/model/layout"
)

// DefaultMaxOps is the most ops one schedule may have unless
// [Options.MaxOps] says otherwise: about what m2n plans, validates and
// simulates within seconds and a few GB (an op and what the validator and
// the simulator keep of it take some 200 bytes).
const DefaultMaxOps = 10_000_000

// OpBytes is the memory one op takes while planned and checked, with its
// dependencies, boxes and the validator's state: about 0.3 GB a million
// ops (docs/cli.md, --max-ops).
const OpBytes = 300

// MemoryLimitError is the error of a schedule whose projected planning
// memory (its op count, counted from its chunks before anything is built,
// times OpBytes) exceeds Options.MaxMemoryBytes.
type MemoryLimitError struct {
	Route        string
	Ops, Bytes   int64
	Limit, Chunk int64
}

func (e *MemoryLimitError) Error() string {
	return fmt.Sprintf("the schedule would have at least %s ops at a %s chunk, about %s to plan, more than this machine's %s of memory: use a larger --chunk",
		FormatCount(e.Ops), chunkName(e.Chunk), humanBytes(e.Bytes), humanBytes(e.Limit))
}

// humanBytes writes a size in GiB (or MiB below one GiB).
func humanBytes(b int64) string {
	if b >= 1<<30 {
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + " GiB"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB"
}

// satMul is a x b, saturated at MaxInt64 (both non-negative).
func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// OpsLimitError is the error of a schedule that would have more ops than
// the limit: the route (or, with Route empty, the regions of one tensor's
// layouts) would emit at least Ops, counted from the chunk counts before
// anything is built.
type OpsLimitError struct {
	Route string // empty: the regions of one tensor's layouts, from Derive
	Ops   int64  // at least this many (saturated at MaxInt64)
	Limit int64
	Chunk int64 // the chunk size in bytes
}

func (e *OpsLimitError) Error() string {
	if e.Route == "" {
		return fmt.Sprintf("the source and destination layouts meet in %s regions, each at least one op (limit %s ops): raise the limit with --max-ops",
			FormatCount(e.Ops), FormatCount(e.Limit))
	}
	ops, limit := FormatCount(e.Ops), FormatCount(e.Limit)
	if ops == limit { // rounded alike: say both exactly
		ops, limit = strconv.FormatInt(e.Ops, 10), strconv.FormatInt(e.Limit, 10)
	}
	return fmt.Sprintf("the schedule would have at least %s ops at a %s chunk (limit %s): use a larger --chunk, or raise the limit with --max-ops",
		ops, chunkName(e.Chunk), limit)
}

func chunkName(b int64) string {
	if b%(1<<20) == 0 {
		return strconv.FormatInt(b>>20, 10) + " MiB"
	}
	if b%(1<<10) == 0 {
		return strconv.FormatInt(b>>10, 10) + " KiB"
	}
	return strconv.FormatInt(b, 10) + " B"
}

// FormatCount writes a count exactly below a million and as 1.2e12 above.
func FormatCount(n int64) string {
	if n < 1_000_000 {
		return strconv.FormatInt(n, 10)
	}
	m, e := float64(n), 0
	for m >= 10 {
		m /= 10
		e++
	}
	s := strconv.FormatFloat(math.Floor(m*10)/10, 'f', -1, 64)
	return s + "e" + strconv.Itoa(e)
}

// addSat and mulSat are int64 arithmetic on non-negative values that
// saturates at MaxInt64 instead of overflowing.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func mulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// ChunkCount is len(Chunks(g, elem, chunkBytes)), computed without building
// the chunks, in time linear in the box's rank.
func ChunkCount(g layout.Box, elem, chunkBytes int64) int64 {
	d, _, n := chunkGrid(g, elem, chunkBytes)
	for k := range d {
		n = mulSat(n, g.Size[k])
	}
	return n
}
