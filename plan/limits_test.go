package plan

import (
	"strings"
	"testing"
)

// A count over the limit that rounds to the limit's text is written
// exactly, so the error never reads "at least 1e7 ops (limit 1e7)".
func TestOpsLimitErrorNeverReadsEqual(t *testing.T) {
	for _, tc := range []struct {
		ops, limit int64
		want       string
	}{
		{10_000_001, 10_000_000, "at least 10000001 ops at a 4 MiB chunk (limit 10000000)"},
		{25_000_000, 10_000_000, "at least 2.5e7 ops at a 4 MiB chunk (limit 1e7)"},
		{1_500, 1_000, "at least 1500 ops at a 4 MiB chunk (limit 1000)"},
	} {
		got := (&OpsLimitError{Route: Flat, Ops: tc.ops, Limit: tc.limit, Chunk: 4 << 20}).Error()
		if !strings.Contains(got, tc.want) {
			t.Errorf("%d over %d: %q, want it to contain %q", tc.ops, tc.limit, got, tc.want)
		}
	}
}
