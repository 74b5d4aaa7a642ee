// Package reports turns evaluated routes and plans into tables and charts:
// Markdown, CSV and gonum/plot figures for `m2n report`, and the text
// tables and JSON records of `m2n plan` and `m2n sim` (docs/cli.md). It
// returns bytes or writes to a writer it is given; callers own the files.
package reports
