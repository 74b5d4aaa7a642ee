// Package atomicfile writes files so that a reader sees the old file or the
// whole new one, never part of one: each file is written in full to a
// temporary name beside its place, then renamed into place. It is for the
// command line; the pure core never touches files.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data to path atomically.
func Write(path string, data []byte) error {
	tmp, err := stage(filepath.Dir(path), filepath.Base(path), data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// File is a file to write: its name in a folder, and its bytes.
type File struct {
	Name string
	Data []byte
}

// WriteAll writes files into dir, creating it if needed. Every file is
// first written in full to a temporary name beside its place; only when
// all are written are they renamed into place, so a failure leaves the old
// files (if any) as they were and nothing half written.
func WriteAll(dir string, files []File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create the folder: %w", err)
	}
	for _, f := range files {
		if fi, err := os.Lstat(filepath.Join(dir, f.Name)); err == nil && fi.IsDir() {
			return fmt.Errorf("cannot write %s there: a folder of that name is in the way", f.Name)
		}
	}
	var tmps []string
	cleanup := func() {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	for _, f := range files {
		tmp, err := stage(dir, f.Name, f.Data)
		if err != nil {
			cleanup()
			return fmt.Errorf("cannot write %s there: %w", f.Name, err)
		}
		tmps = append(tmps, tmp)
	}
	for i, f := range files {
		if err := os.Rename(tmps[i], filepath.Join(dir, f.Name)); err != nil {
			cleanup()
			return fmt.Errorf("cannot write %s there: %w", f.Name, err)
		}
	}
	return nil
}

// stage writes data to a new temporary file in dir, named after name, and
// returns its path.
func stage(dir, name string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}
