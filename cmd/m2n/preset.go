package main

// Measured presets by name or file, for --model and --executor.

import (
	"fmt"
	"os"
	"strings"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
)

// loadPreset reads a preset by name, or a measured preset's file (a path
// ending in .toml).
func loadPreset(name string) (*topo.Topology, error) {
	if !strings.HasSuffix(name, ".toml") {
		t, err := scenario.Preset(name)
		if err == nil {
			return t, nil
		}
		// Not a preset's name: a file, if one is there.
		if _, serr := os.Stat(name); serr != nil {
			return nil, fmt.Errorf("%w; a measured preset file (one m2n calibrate wrote) is read from a path ending in .toml, or any path that exists", err)
		}
	}
	data, err := readCapped(name, maxPresetBytes, "a preset")
	if err != nil {
		return nil, err
	}
	_, t, err := scenario.ParsePreset(name, data)
	return t, err
}
