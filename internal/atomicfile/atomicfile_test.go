package atomicfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// confine makes every temporary file and rename of the test stay inside
// the folders given: one elsewhere fails the test and is not done, so that
// a wrong change here can never replace a file outside the test's folders
// (a device, say).
func confine(t *testing.T, dirs ...string) {
	t.Helper()
	inside := func(path string) bool {
		abs, err := filepath.Abs(path)
		if err != nil {
			return false
		}
		for _, d := range dirs {
			if abs == d || strings.HasPrefix(abs, d+string(os.PathSeparator)) {
				return true
			}
		}
		return false
	}
	rename = func(from, to string) error {
		if !inside(from) || !inside(to) {
			t.Errorf("rename %s to %s: outside the test's folders", from, to)
			return errors.New("refused by the test")
		}
		return os.Rename(from, to)
	}
	createTemp = func(dir, pattern string) (*os.File, error) {
		if !inside(dir) {
			t.Errorf("temporary file in %s: outside the test's folders", dir)
			return nil, errors.New("refused by the test")
		}
		return os.CreateTemp(dir, pattern)
	}
	t.Cleanup(func() { rename, createTemp = os.Rename, os.CreateTemp })
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	confine(t, dir)
	path := filepath.Join(dir, "a.json")
	for _, data := range []string{"old", "new"} {
		if err := Write(path, []byte(data), nil); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != data {
			t.Errorf("read %q, want %q", got, data)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode())
	}
	// An old file keeps its permissions.
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("newer"), nil); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after a rewrite, want the old 0600", fi.Mode())
	}
	if err := Write(filepath.Join(dir, "no", "such", "dir", "x"), nil, nil); err == nil ||
		!strings.Contains(err.Error(), "cannot write "+filepath.Join(dir, "no", "such", "dir", "x")+": no such file or directory") {
		t.Errorf("a missing folder: %v", err)
	}
	if err := Write(dir, nil, nil); err == nil || !strings.Contains(err.Error(), "a folder of that name is in the way") {
		t.Errorf("a folder: %v", err)
	}
	leftovers(t, dir, 1)
}

// A symbolic link to a regular file is written through: the link stays,
// its target gets the new bytes, and the temporary file is made beside the
// target. A link to nothing creates its target.
func TestWriteThroughSymlink(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	confine(t, dir, other)
	target := filepath.Join(other, "target.json")
	if err := os.WriteFile(target, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	// A relative link, through a second link.
	link2 := filepath.Join(dir, "link2.json")
	if err := os.Symlink("link.json", link2); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, link2} {
		if err := Write(p, []byte("new via "+filepath.Base(p)), nil); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(target); string(got) != "new via "+filepath.Base(p) {
			t.Errorf("target holds %q after writing %s", got, p)
		}
	}
	for _, l := range []struct{ link, to string }{{link, target}, {link2, "link.json"}} {
		if fi, err := os.Lstat(l.link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a link: %v %v", l.link, fi, err)
		}
		if to, _ := os.Readlink(l.link); to != l.to {
			t.Errorf("%s points to %s, want %s", l.link, to, l.to)
		}
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o640 {
		t.Errorf("target's mode %v, want the old 0640", fi.Mode())
	}
	// A link to nothing yet.
	dangling := filepath.Join(dir, "dangling.json")
	made := filepath.Join(other, "made.json")
	if err := os.Symlink(made, dangling); err != nil {
		t.Fatal(err)
	}
	if err := Write(dangling, []byte("made"), nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(made); string(got) != "made" {
		t.Errorf("the link's target holds %q", got)
	}
	if fi, err := os.Lstat(dangling); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s is no longer a link", dangling)
	}
	leftovers(t, dir, 3)
	leftovers(t, other, 2)
	// A loop of links is an error, not a hang.
	loop := filepath.Join(dir, "loop")
	if err := os.Symlink("loop", loop); err != nil {
		t.Fatal(err)
	}
	if err := Write(loop, nil, nil); err == nil || !strings.Contains(err.Error(), "symbolic links") {
		t.Errorf("a loop of links: %v", err)
	}
}

// "-" is the standard output the caller gives; no file is made.
func TestWriteStdout(t *testing.T) {
	confine(t, t.TempDir())
	var out bytes.Buffer
	if err := Write("-", []byte("to stdout\n"), &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "to stdout\n" {
		t.Errorf("stdout got %q", out.String())
	}
	if _, err := os.Lstat("-"); err == nil {
		t.Error("a file named - was made")
	}
	if err := Write("-", nil, nil); err == nil {
		t.Error("- without a standard output: no error")
	}
}

// A folder that cannot be written gives a clear error and leaves nothing.
func TestWriteUnwritable(t *testing.T) {
	dir := t.TempDir()
	confine(t, dir)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Under a regular file: fails for every user, root too.
	err := Write(filepath.Join(file, "sub"), []byte("data"), nil)
	if err == nil || err.Error() != "cannot write "+filepath.Join(file, "sub")+": not a directory" {
		t.Errorf("a path under a file: %v", err)
	}
	leftovers(t, dir, 1)
	if os.Geteuid() == 0 {
		t.Log("running as root, who may write into any folder: skipping the read-only folder")
		return
	}
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(ro, 0o755) })
	err = Write(filepath.Join(ro, "x.json"), []byte("data"), nil)
	if err == nil || err.Error() != "cannot write "+filepath.Join(ro, "x.json")+": permission denied" {
		t.Errorf("a read-only folder: %v", err)
	}
	leftovers(t, ro, 0)
}

// A failed rename removes the temporary file and leaves the old file.
func TestWriteRenameFails(t *testing.T) {
	dir := t.TempDir()
	confine(t, dir)
	path := filepath.Join(dir, "a.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	rename = func(string, string) error { return errors.New("disk on fire") }
	if err := Write(path, []byte("new"), nil); err == nil || err.Error() != "cannot write "+path+": disk on fire" {
		t.Errorf("got %v", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("the file holds %q after a failed write, want the old bytes", got)
	}
	leftovers(t, dir, 1)
}

// A failure leaves the old files as they were and no temporary file.
func TestWriteAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	confine(t, filepath.Dir(dir))
	if err := WriteAll(dir, []File{{"a", []byte("1")}, {"b", []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := WriteAll(dir, []File{{"a", []byte("new")}, {"c", []byte("3")}})
	if err == nil || !strings.Contains(err.Error(), "cannot write c there: a folder of that name is in the way") {
		t.Errorf("got %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "a")); string(got) != "1" {
		t.Errorf("a is %q after a failed write, want the old 1", got)
	}
	leftovers(t, dir, 3)
	file := filepath.Join(dir, "a")
	if err := WriteAll(filepath.Join(file, "sub"), nil); err == nil || !strings.Contains(err.Error(), "cannot create the folder") {
		t.Errorf("a folder under a file: %v", err)
	}
}

// WriteAll writes through a link in the folder as Write does.
func TestWriteAllThroughSymlink(t *testing.T) {
	base := t.TempDir()
	confine(t, base)
	dir, other := filepath.Join(base, "report"), filepath.Join(base, "other")
	for _, d := range []string{dir, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(other, "kept.md")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := WriteAll(dir, []File{{"a", []byte("new a")}, {"b", []byte("new b")}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); string(got) != "new a" {
		t.Errorf("the link's target holds %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "a")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link was replaced")
	}
	leftovers(t, dir, 2)
	leftovers(t, other, 1)
}

// leftovers checks dir holds n entries and no temporary file.
func leftovers(t *testing.T, dir string, n int) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	if len(es) != n {
		t.Errorf("%d entries in %s, want %d", len(es), dir, n)
	}
}
