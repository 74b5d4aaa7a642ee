package main

import (
	"fmt"
	"io"
	"os"

	"github.com/m2n-project/m2n/model/units"
)

// Ceilings on what m2n reads from a file, checked as it reads: a device or
// a FIFO given by mistake (or a runaway file) is refused after at most the
// ceiling, never read whole.
const (
	// maxConfigBytes bounds a model's config.json (a Hugging Face config is
	// a few KiB).
	maxConfigBytes = 1 << 20
	// maxPresetBytes bounds a measured preset (TOML, as a scenario).
	maxPresetBytes = 4 << 20
	// maxSimJSONBytes bounds m2n sim --json output read back by report
	// --from (a record is a few KiB; a sweep of thousands fits).
	maxSimJSONBytes = 256 << 20
)

// readCapped reads the file at path, at most limit bytes: a larger file is
// an error naming it, the size (or, when it cannot be known beforehand,
// that there is more) and the limit, before more than limit+1 bytes are
// read. what says what the file is, for the error ("a scenario").
func readCapped(path string, limit int64, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooBig := func(size string) error {
		return fmt.Errorf("%s: %s: %s may have at most %d bytes (%s)", path, size, what, limit, units.Bytes(limit).Human())
	}
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > limit {
		return nil, tooBig(fmt.Sprintf("%d bytes", st.Size()))
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, tooBig(fmt.Sprintf("more than %d bytes", limit))
	}
	return data, nil
}
