package scenarios

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

// models holds the model configs shipped with m2n: Hugging Face style
// config.json files written from each model's published values, named by
// the model's short name (models/deepseek-v3.json).
//
//go:embed models/*.json
var models embed.FS

// Model returns the embedded config.json of a built-in model, by its short
// name ("deepseek-v3").
func Model(name string) ([]byte, bool) {
	if name == "" || strings.ContainsAny(name, "/\\") {
		return nil, false
	}
	b, err := models.ReadFile("models/" + strings.TrimSuffix(name, ".json") + ".json")
	return b, err == nil
}

// ModelNames lists the built-in models, sorted.
func ModelNames() []string {
	ents, _ := fs.ReadDir(models, "models")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(out)
	return out
}
