package scenario

import (
	"strings"

	"github.com/BurntSushi/toml"
)

// keyLines maps dotted key paths (array indices dropped, as BurntSushi
// reports undecoded keys) to the line of their first definition.
type keyLines map[string]int

// find returns the line of a key, or of its nearest ancestor that has one.
func (kl keyLines) find(k toml.Key) int {
	for n := len(k); n > 0; n-- {
		if ln, ok := kl[strings.Join(k[:n], ".")]; ok {
			return ln
		}
	}
	return 0
}

// locateKeys scans a TOML document for key definitions: table headers,
// key = value lines (dotted and quoted keys included), and keys of inline
// tables. It is a locator for messages, not a parser: on input it does not
// understand it finds fewer keys, never panics.
func locateKeys(doc string) keyLines {
	kl := keyLines{}
	var table []string
	inMulti := "" // the delimiter of an open multi-line string
	for i, line := range strings.Split(doc, "\n") {
		ln := i + 1
		if inMulti != "" {
			if strings.Contains(line, inMulti) {
				inMulti = ""
			}
			continue
		}
		t := strings.TrimSpace(line)
		if t == "" || t[0] == '#' {
			continue
		}
		if t[0] == '[' {
			inner := strings.TrimPrefix(strings.TrimPrefix(t, "["), "[")
			end := strings.Index(inner, "]")
			if end < 0 {
				continue
			}
			table = splitKey(inner[:end])
			add(kl, table, ln)
			continue
		}
		key, rest, ok := cutAssign(t)
		if !ok {
			continue
		}
		path := append(append([]string(nil), table...), splitKey(key)...)
		add(kl, path, ln)
		inlineKeys(kl, path, rest, ln)
		for _, d := range []string{`"""`, `'''`} {
			if strings.Count(rest, d)%2 == 1 {
				inMulti = d
			}
		}
	}
	return kl
}

func add(kl keyLines, path []string, ln int) {
	k := strings.Join(path, ".")
	if _, seen := kl[k]; !seen && k != "" {
		kl[k] = ln
	}
}

// cutAssign splits "key = value" at the first '=' outside quotes.
func cutAssign(s string) (key, value string, ok bool) {
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '"' || c == '\'':
			q = c
		case c == '=':
			return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:]), true
		}
	}
	return "", "", false
}

// splitKey splits a dotted key, honouring quotes: a."b.c".d is [a b.c d].
func splitKey(s string) []string {
	var out []string
	var cur strings.Builder
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			q = c
		case c == '.':
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// inlineKeys records the keys of inline tables in a value, one level deep
// per brace, recursively.
func inlineKeys(kl keyLines, path []string, value string, ln int) {
	if !strings.HasPrefix(value, "{") {
		return
	}
	depth := 0
	start := 1
	var q byte
	for i := 0; i < len(value); i++ {
		c := value[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '"' || c == '\'':
			q = c
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				entry(kl, path, value[start:i], ln)
				return
			}
		case c == ',' && depth == 1:
			entry(kl, path, value[start:i], ln)
			start = i + 1
		}
	}
}

func entry(kl keyLines, path []string, s string, ln int) {
	key, rest, ok := cutAssign(strings.TrimSpace(s))
	if !ok {
		return
	}
	p := append(append([]string(nil), path...), splitKey(key)...)
	add(kl, p, ln)
	inlineKeys(kl, p, rest, ln)
}
