// Package sim is m2n's bandwidth-accurate, flow-level discrete-event
// simulator of schedules. It reads the Schedule IR alone (ir), never
// the planner; each route's speed-of-light bound lives beside the route, in
// plan. It is pure: no files, clocks, devices or global randomness.
package sim
