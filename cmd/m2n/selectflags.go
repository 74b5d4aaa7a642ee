package main

import (
	"errors"
	"strings"

	"github.com/m2n-project/m2n/model/scenario"
)

// routeList is the value of --route: a comma-separated list of route
// names. An empty list or an empty name (--route "", --route ",") is an
// error: leaving the flag out is how to ask for the scenario's routes.
type routeList string

func (r *routeList) String() string { return string(*r) }

func (r *routeList) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		if name == "" {
			return errors.New("want route names separated by commas, e.g. flat,hierarchical (leave --route out for the scenario's routes)")
		}
	}
	*r = routeList(v)
	return nil
}

// matchPoints reports whether a point passes the --point filters: for
// each sweep named, its value is one of the values given (repeating a
// name selects the union of its values), and every sweep named must match.
func matchPoints(p *scenario.Point, filters []string) (bool, error) {
	hit := map[string]bool{} // per sweep name: some value matched
	for _, f := range filters {
		ok, err := p.Match([]string{f})
		if err != nil {
			return false, err
		}
		name, _, _ := strings.Cut(f, "=")
		hit[name] = hit[name] || ok
	}
	for _, ok := range hit {
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// unmatchedPoint returns the first filter that matches none of the
// points on its own, so that a mistyped value among several is not
// silently dropped from the union.
func unmatchedPoint(all []*scenario.Point, filters []string) string {
	for _, f := range filters {
		hit := false
		for _, p := range all {
			if ok, err := p.Match([]string{f}); err == nil && ok {
				hit = true
				break
			}
		}
		if !hit {
			return f
		}
	}
	return ""
}
