package scenario

import (
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/m2n-project/m2n/model/topo"
)

// Measured presets are TOML files written by `m2n calibrate`: a [topology]
// table in the scenario schema (a base preset and the constants measured
// over it) and one [[measurement]] per constant, with its spread, the
// command and the date (docs/calibration.md). They are embedded, so a
// scenario names them as it names a preset of model/topo.
//
//go:embed presets/*.toml
var presetFiles embed.FS

// PresetFile is a measured preset's document.
type PresetFile struct {
	Name         string            `toml:"name"`
	Description  string            `toml:"description"`
	Topology     TopologySpec      `toml:"topology"`
	Measurements []MeasurementSpec `toml:"measurement"`
}

// MeasurementSpec is where one constant of a measured preset comes from.
type MeasurementSpec struct {
	Constant string  `toml:"constant"` // its key in [topology], e.g. "executor.one_process.host_group"
	Value    string  `toml:"value"`    // the value set, with its unit
	Min      string  `toml:"min"`      // the spread of the samples it came from
	Max      string  `toml:"max"`
	Samples  int     `toml:"samples"`
	Fit      string  `toml:"fit"`               // how the value follows from the samples
	Residual float64 `toml:"residual,omitzero"` // the fit's largest relative residual
	Command  string  `toml:"command"`
	Date     string  `toml:"date"`
	Machine  string  `toml:"machine"`
	// Launch is the launch mode the record was measured in: "one-process"
	// or "per-gpu". A machine constant (memory, nvlink, ...) is measured in
	// both; the preset holds the one-process value where it has one.
	Launch string `toml:"launch,omitempty"`
	// Derived, for a constant set from another rather than measured,
	// names what it is set from: a constant of the preset, or a base
	// preset's rate.
	Derived string `toml:"derived,omitempty"`
}

// ParsePreset reads a measured preset's document and the topology it
// defines (one domain; a scenario sets the rest). origin names it in
// errors.
func ParsePreset(origin string, data []byte) (*PresetFile, *topo.Topology, error) {
	if err := checkShape(origin, string(data)); err != nil {
		return nil, nil, err
	}
	var f PresetFile
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", origin, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		var errs []error
		for _, k := range und {
			errs = append(errs, fmt.Errorf("%s: unknown key %q", origin, k.String()))
		}
		return nil, nil, errors.Join(errs...)
	}
	if f.Name == "" {
		return nil, nil, fmt.Errorf("%s: name: missing", origin)
	}
	if f.Topology.Preset == "" || slices.Contains(filePresetNames(), f.Topology.Preset) {
		return nil, nil, fmt.Errorf("%s: topology.preset = %q: a measured preset builds on one of %s", origin, f.Topology.Preset, strings.Join(topo.PresetNames(), ", "))
	}
	if f.Topology.Domains != nil || f.Topology.Placement != nil {
		return nil, nil, fmt.Errorf("%s: topology: a preset sets no domains or placement (the scenario does)", origin)
	}
	t, err := topo.Preset(f.Topology.Preset)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: topology.preset: %w", origin, err)
	}
	if err := applyTopology(t, f.Topology); err != nil {
		return nil, nil, fmt.Errorf("%s: topology: %w", origin, err)
	}
	t.Preset = f.Name
	for i, m := range f.Measurements {
		if m.Launch != "" && m.Launch != topo.OneProcess.String() && m.Launch != topo.PerGPU.String() {
			return nil, nil, fmt.Errorf("%s: measurement %d (%s): launch = %q: one of %s, %s", origin, i+1, m.Constant, m.Launch, topo.OneProcess, topo.PerGPU)
		}
	}
	if err := t.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%s: topology: %w", origin, err)
	}
	return &f, t, nil
}

// lookupPreset returns the named preset with one domain: a measured one
// (embedded file) or one of model/topo.
func lookupPreset(name string) (*topo.Topology, error) {
	data, err := presetFiles.ReadFile("presets/" + name + ".toml")
	if err != nil {
		t, err := topo.Preset(name)
		if err != nil {
			return nil, fmt.Errorf("unknown topology preset %q (known: %s)", name, strings.Join(PresetNames(), ", "))
		}
		return t, nil
	}
	_, t, err := ParsePreset(name+".toml", data)
	return t, err
}

// Preset returns the named preset (measured or from the literature) with
// one domain.
func Preset(name string) (*topo.Topology, error) { return lookupPreset(name) }

// PresetFileData returns a measured preset's embedded document.
func PresetFileData(name string) ([]byte, bool) {
	b, err := presetFiles.ReadFile("presets/" + name + ".toml")
	return b, err == nil
}

func filePresetNames() []string {
	ents, _ := presetFiles.ReadDir("presets")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".toml"))
	}
	return out
}

// PresetNames lists every preset, measured and from the literature, sorted.
func PresetNames() []string {
	names := append(topo.PresetNames(), filePresetNames()...)
	slices.Sort(names)
	return slices.Compact(names)
}
