// Package sim is m2n's bandwidth-accurate, flow-level discrete-event
// simulator of schedules, and the speed-of-light model of each route. It is
// pure: no files, clocks, devices or global randomness.
package sim
