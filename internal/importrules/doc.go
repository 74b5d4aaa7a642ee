// Package importrules holds the check of the import rules that
// docs/architecture.md states: the pure core (models, planner, simulator,
// evaluation, reports) never reaches the GPU package, the simulator reads
// the Schedule IR (and the executor's program of it) and never the planner, and only the GPU package uses cgo.
// `make lint` runs it.
package importrules
