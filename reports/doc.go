// Package reports turns planner and simulator results into tables and
// charts: Markdown, CSV, and gonum/plot figures. It returns bytes; callers
// write files.
package reports
