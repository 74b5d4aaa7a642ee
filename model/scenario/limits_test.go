package scenario

import (
	"strings"
	"testing"
	"time"
)

// Documents a TOML parser would take gigabytes over are refused before
// parsing, within a second, naming the file, the line and the limit.
func TestShapeLimits(t *testing.T) {
	deep := func(n int, open, close string) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
	}
	many := strings.Repeat("[", 40)
	for _, tc := range []struct {
		name string
		doc  string
		err  string // "" when the document is well formed
	}{
		{"inline tables 100k deep", "name = \"t\"\na = " + deep(100_000, "{b = ", "}") + "\n", "t.toml:2: arrays and inline tables nest deeper than 32"},
		{"arrays 100k deep", "name = \"t\"\n\na = " + deep(100_000, "[", "]") + "\n", "t.toml:3: arrays and inline tables nest deeper than 32"},
		{"arrays 33 deep", minimal + "x = " + deep(33, "[", "]"), "t.toml:17: arrays and inline tables nest deeper than 32"},
		{"too large", minimal + strings.Repeat("# padding\n", MaxFileBytes/10+1), "t.toml: 4194577 bytes: a scenario may have at most 4194304 (4 MiB)"},
		{"brackets in strings and comments", strings.Replace(minimal, `name = "t"`,
			"name = \"t\"\ndescription = \"\"\"\n"+many+"\n\"\"\" # "+many+"\n# "+many+"\n", 1), ""},
		{"brackets in literal strings", strings.Replace(minimal, `name = "t"`, "name = '"+many+"'\ndescription = '''"+many+"\n'''", 1), ""},
		{"escaped quote", strings.Replace(minimal, `name = "t"`, `name = "t\"`+many+`"`, 1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			_, err := Parse("t.toml", []byte(tc.doc))
			if d := time.Since(t0); d > time.Second {
				t.Errorf("took %v, want under 1 s", d)
			}
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse() = %v\nwant an error containing %q", err, tc.err)
			}
		})
	}
}
