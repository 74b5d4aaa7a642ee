//go:build unix

package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A link to a character device is written into the device: the device and
// the link stay as they are. The test passes only the link, in its own
// folder, and confine refuses any rename or temporary file outside it, so
// that even a wrong change cannot replace the device.
func TestWriteSymlinkToDevice(t *testing.T) {
	const dev = "/dev/null"
	before, err := os.Lstat(dev)
	if err != nil || before.Mode()&os.ModeCharDevice == 0 {
		t.Skipf("%s is not a character device here", dev)
	}
	dir := t.TempDir()
	confine(t, dir)
	link := filepath.Join(dir, "out.json")
	if err := os.Symlink(dev, link); err != nil {
		t.Fatal(err)
	}
	if err := Write(link, []byte("into the device"), nil); err != nil {
		t.Fatal(err)
	}
	after, err := os.Lstat(dev)
	if err != nil || after.Mode() != before.Mode() || !sameFile(before, after) {
		t.Errorf("%s changed: %v, was %v (%v)", dev, after, before, err)
	}
	if to, err := os.Readlink(link); err != nil || to != dev {
		t.Errorf("the link points to %q (%v), want %s", to, err, dev)
	}
	if err := WriteAll(dir, []File{{"out.json", []byte("again")}, {"b", []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	if after, err := os.Lstat(dev); err != nil || after.Mode() != before.Mode() || !sameFile(before, after) {
		t.Errorf("%s changed by WriteAll: %v (%v)", dev, after, err)
	}
	leftovers(t, dir, 2)
}

// sameFile compares device and inode numbers and, for a device node, the
// device it stands for.
func sameFile(a, b os.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Dev == sb.Dev && sa.Ino == sb.Ino && sa.Rdev == sb.Rdev
}

// A FIFO is written into, not renamed over; so is a link to one.
func TestWriteFIFO(t *testing.T) {
	dir := t.TempDir()
	confine(t, dir)
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("pipe", link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link} {
		got := make(chan string, 1)
		go func() {
			f, err := os.Open(fifo) // blocks until the writer opens it
			if err != nil {
				got <- err.Error()
				return
			}
			b, err := io.ReadAll(f)
			// Closed before the result is sent: a reader still open when
			// the next round's writer opens the FIFO would take its
			// bytes with it when it closes.
			err = errors.Join(err, f.Close())
			if err != nil {
				got <- err.Error()
				return
			}
			got <- string(b)
		}()
		if err := Write(p, []byte("through the pipe"), nil); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if s != "through the pipe" {
				t.Errorf("writing %s: the reader got %q", p, s)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("writing %s: the reader got nothing in 10 s", p)
		}
		if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("the FIFO is no longer one: %v %v", fi, err)
		}
	}
	leftovers(t, dir, 2)
}

// A path to the file the standard output writes to (/dev/stdout, or the
// file it is redirected to) is written through the standard output.
func TestWriteStdoutsFile(t *testing.T) {
	dir := t.TempDir()
	confine(t, dir)
	path := filepath.Join(dir, "out.txt")
	stdout, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	before, _ := os.Stat(path)
	if _, err := stdout.WriteString("table\n"); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "stdout")
	if err := os.Symlink("out.txt", link); err != nil {
		t.Fatal(err)
	}
	if err := Write(link, []byte("file\n"), stdout); err != nil {
		t.Fatal(err)
	}
	stdout.WriteString("more\n")
	after, _ := os.Stat(path)
	if !os.SameFile(before, after) {
		t.Error("the standard output's file was replaced")
	}
	if b, _ := os.ReadFile(path); string(b) != "table\nfile\nmore\n" {
		t.Errorf("the file holds %q", b)
	}
	leftovers(t, dir, 2)
}
