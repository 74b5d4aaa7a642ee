// Package atomicfile writes the command line's output files so that a
// reader sees the old file or the whole new one, never part of one, and
// never replaces what a path points to:
//
//   - "-" ([Stdout]) is written to the standard output the caller gives,
//     and so is a path to the file that standard output writes to
//     (/dev/stdout, say).
//   - A symbolic link is followed to its target; the link stays as it is.
//   - A regular file, or a path where nothing is yet, is written in full to
//     a temporary name in the same folder, then renamed into place: an old
//     file keeps its permissions (a new one gets 0644); a failure removes
//     the temporary file and leaves the old file as it was.
//   - A device, a FIFO or anything else that is not a regular file or a
//     folder is opened and written directly, never renamed over.
//
// It is for the command line; the pure core never touches files.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Stdout is the path that names the standard output.
const Stdout = "-"

// rename and createTemp are os.Rename and os.CreateTemp; the tests
// replace them to check that nothing is created or renamed outside their
// folders, even when the code is wrong.
var (
	rename     = os.Rename
	createTemp = os.CreateTemp
)

// maxLinks bounds how many symbolic links are followed, as the kernel does.
const maxLinks = 40

// Write writes data to path; "-" writes it to stdout.
func Write(path string, data []byte, stdout io.Writer) error {
	if path == Stdout {
		if stdout == nil {
			return errors.New("cannot write to - (standard output) here")
		}
		_, err := stdout.Write(data)
		return err
	}
	if isFile(stdout, path) {
		_, err := stdout.Write(data)
		return err
	}
	t, err := resolve(path)
	if err == nil {
		if t.direct() {
			err = writeDirect(t.path, data)
		} else {
			var tmp string
			if tmp, err = stage(t, data); err == nil {
				if err = rename(tmp, t.path); err != nil {
					os.Remove(tmp)
				}
			}
		}
	}
	if err != nil {
		where := path
		if t.path != "" && t.path != path {
			where += " (a link to " + t.path + ")"
		}
		return fmt.Errorf("cannot write %s: %w", where, unwrapPath(err))
	}
	return nil
}

// File is a file to write: its name in a folder, and its bytes.
type File struct {
	Name string
	Data []byte
}

// WriteAll writes files into dir, creating it if needed; each file is
// written as [Write] writes it. Every regular file is first written in full
// to a temporary name beside its place; only when all are written (and any
// device or FIFO among them has been written) are they renamed into place,
// so a failure leaves the old files (if any) as they were and nothing half
// written.
func WriteAll(dir string, files []File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create the folder: %w", err)
	}
	targets := make([]target, len(files))
	for i, f := range files {
		t, err := resolve(filepath.Join(dir, f.Name))
		if err != nil {
			return fmt.Errorf("cannot write %s there: %w", f.Name, unwrapPath(err))
		}
		targets[i] = t
	}
	tmps := make([]string, len(files))
	cleanup := func() {
		for _, t := range tmps {
			if t != "" {
				os.Remove(t)
			}
		}
	}
	for i, f := range files {
		if targets[i].direct() {
			continue
		}
		tmp, err := stage(targets[i], f.Data)
		if err != nil {
			cleanup()
			return fmt.Errorf("cannot write %s there: %w", f.Name, unwrapPath(err))
		}
		tmps[i] = tmp
	}
	for i, f := range files {
		if targets[i].direct() {
			if err := writeDirect(targets[i].path, f.Data); err != nil {
				cleanup()
				return fmt.Errorf("cannot write %s there: %w", f.Name, unwrapPath(err))
			}
		}
	}
	for i, f := range files {
		if tmps[i] == "" {
			continue
		}
		if err := rename(tmps[i], targets[i].path); err != nil {
			cleanup()
			return fmt.Errorf("cannot write %s there: %w", f.Name, unwrapPath(err))
		}
		tmps[i] = ""
	}
	return nil
}

// target is where a path leads once its symbolic links are followed.
type target struct {
	path string
	info fs.FileInfo // nil where nothing is yet
}

// direct reports whether the target is written in place: something that is
// there and is not a regular file.
func (t target) direct() bool {
	return t.info != nil && !t.info.Mode().IsRegular()
}

// resolve follows the symbolic links of path (the last component; the
// system follows those of the folders) to what it names. A link to nothing
// resolves to where it points, so that the file is created there. A folder
// is an error. Errors are the reason alone; the caller names the path.
func resolve(path string) (target, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		// Written in place, through the links as the system follows them
		// (/dev/stdout's magic links too).
		return target{path: path, info: fi}, nil
	}
	for range maxLinks {
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return target{path: path}, nil
		}
		if err != nil {
			return target{path: path}, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if fi.IsDir() {
				return target{path: path}, errors.New("a folder of that name is in the way")
			}
			return target{path: path, info: fi}, nil
		}
		link, err := os.Readlink(path)
		if err != nil {
			return target{path: path}, err
		}
		if !filepath.IsAbs(link) {
			// Relative to the link's folder, joined without cleaning: a
			// ".." after a linked folder is the system's to resolve.
			link = path[:strings.LastIndexByte(path, os.PathSeparator)+1] + link
		}
		path = link
	}
	return target{path: path}, fmt.Errorf("more than %d symbolic links to follow", maxLinks)
}

// isFile reports whether path is the file stdout writes to (for example
// /dev/stdout, or the file the standard output is redirected to).
func isFile(stdout io.Writer, path string) bool {
	f, ok := stdout.(*os.File)
	if !ok {
		return false
	}
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// writeDirect writes data into what is at path (a device, a FIFO) without
// creating, truncating or replacing it.
func writeDirect(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// stage writes data to a new temporary file beside t, with t's permissions
// (0644 for a new file), and returns its path.
func stage(t target, data []byte) (string, error) {
	dir, name := filepath.Split(t.path)
	if dir == "" {
		dir = "."
	}
	f, err := createTemp(dir, "."+name+".tmp*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	err = errors.Join(err, f.Close())
	if err == nil {
		mode := fs.FileMode(0o644)
		if t.info != nil {
			mode = t.info.Mode().Perm()
		}
		err = os.Chmod(tmp, mode)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// unwrapPath drops the operation and path of a *fs.PathError or
// *os.LinkError (the caller names the path the user gave), keeping the
// system's reason.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
