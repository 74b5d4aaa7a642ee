// Package scenarios embeds the scenario files shipped with m2n, so the
// binary can run them by name without the source tree.
package scenarios

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.toml
var files embed.FS

// Default is the scenario `m2n` runs when none is named.
const Default = "paper-ffn-moe"

// Lookup returns the embedded scenario of that name (without ".toml").
func Lookup(name string) ([]byte, bool) {
	b, err := files.ReadFile(strings.TrimSuffix(name, ".toml") + ".toml")
	return b, err == nil
}

// Names lists the embedded scenarios, sorted.
func Names() []string {
	ents, _ := fs.ReadDir(files, ".")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".toml"))
	}
	sort.Strings(out)
	return out
}
