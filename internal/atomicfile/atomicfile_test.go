package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.json")
	for _, data := range []string{"old", "new"} {
		if err := Write(path, []byte(data)); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != data {
			t.Errorf("read %q, want %q", got, data)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode())
	}
	if err := Write(filepath.Join(dir, "no", "such", "dir", "x"), nil); err == nil {
		t.Error("a missing folder: no error")
	}
	leftovers(t, dir, 1)
}

// A failure leaves the old files as they were and no temporary file.
func TestWriteAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
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
		t.Errorf("%d entries, want %d", len(es), n)
	}
}
