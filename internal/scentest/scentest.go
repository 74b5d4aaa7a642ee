// Package scentest loads the scenarios built into m2n for tests: parsed
// with the built-in models, their sweep points. Tests only.
package scentest

import (
	"testing"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/scenarios"
)

// Points returns the sweep points of the built-in scenario of that name,
// failing the test if it is missing or does not parse.
func Points(tb testing.TB, name string) []*scenario.Point {
	tb.Helper()
	data, ok := scenarios.Lookup(name)
	if !ok {
		tb.Fatalf("no built-in scenario %s", name)
	}
	sc, err := scenario.ParseWith(name+".toml", data, scenarios.LoadModel)
	if err != nil {
		tb.Fatal(err)
	}
	ps, err := sc.Points()
	if err != nil {
		tb.Fatal(err)
	}
	return ps
}
