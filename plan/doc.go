// Package plan derives which bytes each destination rank needs and builds
// the schedule that moves them: the M-to-N planner.
//
// The pipeline, for a batch of tensors with a source and a destination
// layout each, on a topology:
//
//   - regions.go: [Derive] intersects the two layouts into contributions
//     (a box of the tensor, from a source slot to a destination slot) and
//     each destination rank's needs.
//   - route.go: a route is one way to move the contributions, one file
//     each: flat.go (straight from a source rank), agbcast.go (gather whole,
//     then broadcast along a ring), hierarchical.go (the NCCL M2N paper's:
//     one network copy per NVLink domain, replication over NVLink) and
//     legacy.go (nemo-legacy: all-gather, then broadcast). Each builds the
//     tensor's ops, counts them before building and bounds them ([Bound]).
//     A new route is one file and one line of registry.
//   - build.go: [Build] runs the route's builder over the tensors through
//     the builder's op and buffer writers (deliver.go pipelines chunks
//     along paths), within the ops limit (limits.go) and the staging cap
//     (staging.go), quantizes where the destination is fp8 (quant.go), and
//     coalesces a pair's small transfers into staging slabs (coalesce.go).
//   - The result is an [ir.Schedule], verified before it is returned:
//     every executor and the simulator read only that.
//
// Planning is pure and deterministic: the same input gives the same
// schedule, byte for byte.
package plan
