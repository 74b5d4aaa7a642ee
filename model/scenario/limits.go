package scenario

import "fmt"

// Limits on a scenario document, checked before it is parsed: a TOML
// parser's cost can grow much faster than the document (inline tables
// nested 100,000 deep in 400 KB take gigabytes), so m2n refuses what no
// scenario needs.
const (
	// MaxFileBytes bounds the size of a scenario document.
	MaxFileBytes = 4 << 20
	// MaxNesting bounds how deep arrays and inline tables nest.
	MaxNesting = 32
)

// checkShape refuses a document over MaxFileBytes, or one whose arrays and
// inline tables nest deeper than MaxNesting, naming the line. It scans the
// text once: brackets and braces count outside strings and comments.
func checkShape(origin string, doc string) error {
	if len(doc) > MaxFileBytes {
		return fmt.Errorf("%s: %d bytes: a scenario may have at most %d (%d MiB)", origin, len(doc), MaxFileBytes, MaxFileBytes>>20)
	}
	depth, line := 0, 1
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; c {
		case '\n':
			line++
		case '#':
			for i+1 < len(doc) && doc[i+1] != '\n' {
				i++
			}
		case '"', '\'':
			delim := string(c)
			if i+2 < len(doc) && doc[i+1] == c && doc[i+2] == c {
				delim = string([]byte{c, c, c})
			}
			i += len(delim)
			for ; i < len(doc); i++ {
				if doc[i] == '\n' {
					line++
					if len(delim) == 1 {
						break // an unterminated string: the parser reports it
					}
				}
				if c == '"' && doc[i] == '\\' {
					i++
					if i < len(doc) && doc[i] == '\n' {
						line++
					}
					continue
				}
				if doc[i] == c && (len(delim) == 1 || (i+2 < len(doc) && doc[i+1] == c && doc[i+2] == c)) {
					i += len(delim) - 1
					break
				}
			}
		case '[', '{':
			if depth++; depth > MaxNesting {
				return fmt.Errorf("%s:%d: arrays and inline tables nest deeper than %d", origin, line, MaxNesting)
			}
		case ']', '}':
			depth = max(depth-1, 0)
		}
	}
	return nil
}
