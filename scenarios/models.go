package scenarios

import (
	"embed"
	"fmt"
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

// LoadModel loads a built-in model's config by name, as a scenario's model
// loader does (scenario.ModelLoader: the origin to name it by, its bytes);
// a name that is not built in is an error listing those that are.
func LoadModel(name string) (string, []byte, error) {
	if b, ok := Model(name); ok {
		return name + ".json", b, nil
	}
	return "", nil, fmt.Errorf("model %q: not a built-in model (built in: %s)", name, strings.Join(ModelNames(), ", "))
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
