package plan

import (
	"fmt"
	"strings"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
)

// A route is one way to move a batch of tensors from their source layouts
// to their destination layouts. Each lives in one file, with its build, its
// count of ops before building and its SOL bound (flat.go, agbcast.go,
// hierarchical.go, legacy.go), and is one line of registry.
type route interface {
	// name is the route's name (Options.Route, the reports' rows).
	name() string
	// gathers reports whether the route gathers each whole tensor on one
	// rank: a tensor's buffers are then as large as the tensor, and under
	// a staging cap each tensor is one wave (plan/staging.go).
	gathers() bool
	// quantizesAtEntry reports whether a tensor quantized at its
	// destination is gathered in its source dtype at one replica set,
	// quantized there and spread in fp8 (plan/quant.go); otherwise each
	// destination quantizes what it receives.
	quantizesAtEntry() bool
	// builder returns the route's state for building one schedule with b.
	builder(b *builder) routeBuilder
	// bounder returns the route's state for bounding one batch (tensors:
	// the batch, before quantization expands it) on tp.
	bounder(tensors []ir.Tensor, tp *topo.Topology) routeBounder
}

// routeBuilder builds one schedule's tensors, in order, for a route.
type routeBuilder interface {
	// minOps is a lower bound on the ops the route emits for tensor ti,
	// from the chunk counts alone; past limit it may stop counting early.
	minOps(ti int, limit int64) int64
	// count is the number of ops the route emits for tensor ti but for
	// quantize ops and a quantized tensor's spread, from the geometry; 0
	// where it is not known before building (minOps then sizes the pools).
	count(ti int) int64
	// emit appends tensor ti's ops and buffers.
	emit(ti int)
}

// routeBounder adds one batch's tensors to a route's SOL bound ([Bound]).
type routeBounder interface {
	// add puts tensor t's bytes (its regions r) on the ports move charges.
	add(t *ir.Tensor, r *Regions, move func(a, b int, bytes float64))
	// chain is a bound that is not a port load (nemo-legacy's longest
	// all-gather then broadcast), in seconds, and its term; 0 for none.
	chain() (float64, string)
}

// registry lists the routes, in the order reports show them.
var registry = []route{flatRoute{}, agbcastRoute{}, hierRoute{}, legacyRoute{}}

// Routes lists every route's name, in the order reports show them.
var Routes = routeNames()

func routeNames() []string {
	out := make([]string, len(registry))
	for i, r := range registry {
		out[i] = r.name()
	}
	return out
}

// lookup returns the route of that name.
func lookup(name string) (route, error) {
	for _, r := range registry {
		if r.name() == name {
			return r, nil
		}
	}
	return nil, fmt.Errorf("unknown route %q (known: %s)", name, strings.Join(routeNames(), ", "))
}
