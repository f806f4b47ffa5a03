//go:build linux

package stores_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/stores"
)

// roChildEnv names the store URL for TestReadOnlyChild, which
// TestOpenExistingNotWritable runs as another user.
const roChildEnv = "LEASEHOLD_TEST_RO_CHILD"

// roReport is what TestReadOnlyChild found, on one line of its stdout
// after "RO-CHILD ".
type roReport struct {
	Open, List, Release, OpenForWriting string // errors ("" for none)
	Names                               []string
}

// TestReadOnlyChild is TestOpenExistingNotWritable's child, run as uid
// 65534: it opens the store as status does (OpenExisting), lists it,
// tries a release, and opens it as run does (Open). It does nothing in an
// ordinary run of the tests.
func TestReadOnlyChild(t *testing.T) {
	u := os.Getenv(roChildEnv)
	if u == "" {
		t.Skip("the child of TestOpenExistingNotWritable")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	str := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	var r roReport
	s, err := stores.OpenExisting(ctx, u)
	r.Open = str(err)
	if err == nil {
		recs, err := s.List(ctx, "")
		r.List = str(err)
		for _, rec := range recs {
			r.Names = append(r.Names, rec.Name)
		}
		r.Release = str(s.Release(ctx, "x/1", "o", 1))
		s.Close()
	}
	w, err := stores.Open(ctx, u)
	r.OpenForWriting = str(err)
	if err == nil {
		w.Close()
	}
	b, _ := json.Marshal(r)
	fmt.Printf("RO-CHILD %s\n", b)
}

// TestOpenExistingNotWritable (red team of issue 29, item 12): a store
// made by root (the file 0644, its directory 0755) could not be listed by
// another user: "sqlite: create schema in ...: attempt to write a readonly
// database (1544)", exit 70. OpenExisting (status) opens it read-only and
// lists it, with no process holding it open (no -wal file: the file is
// read as it is) and with one that does (SQLite reads it with the -wal and
// -shm files, and sees the lease only they hold); it creates no file. A
// release in it, and Open (run, hold), fail saying that write access to
// the file and its directory is needed.
func TestOpenExistingNotWritable(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to run a process as another user (uid 65534)")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, "stores.test")
	copyFile(t, exe)
	storeDir := filepath.Join(dir, "store")
	if err := os.Mkdir(storeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(storeDir, "leases.db")
	u := "sqlite://" + path
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acquire := func(s *sqlite.Store, name string) {
		if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "o", TTL: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	acquire(s, "x/1")
	s.Close()
	files := func() []string {
		es, err := os.ReadDir(storeDir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	child := func(what string, want []string) {
		t.Helper()
		before := files()
		cmd := exec.CommandContext(ctx, exe, "-test.run=^TestReadOnlyChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), roChildEnv+"="+u, "HOME=/nonexistent")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		_, line, ok := strings.Cut(string(out), "RO-CHILD ")
		line, _, _ = strings.Cut(line, "\n")
		var r roReport
		if !ok || json.Unmarshal([]byte(line), &r) != nil {
			t.Fatalf("%s: the child (uid 65534) said %q (%v)", what, out, err)
		}
		if r.Open != "" || r.List != "" || !slices.Equal(r.Names, want) {
			t.Errorf("%s: OpenExisting and List as uid 65534: open error %q, list error %q, names %q; want %q", what, r.Open, r.List, r.Names, want)
		}
		if !strings.Contains(r.Release, "read-only") || !strings.Contains(r.Release, "write access to the file and to its directory") {
			t.Errorf("%s: Release in the read-only store: %q, want it refused saying what access is needed", what, r.Release)
		}
		if !strings.Contains(r.OpenForWriting, "uid 65534") || !strings.Contains(r.OpenForWriting, "write access to the file and to its directory") {
			t.Errorf("%s: Open as uid 65534: %q, want an error saying what access is needed", what, r.OpenForWriting)
		}
		if after := files(); !slices.Equal(after, before) {
			t.Errorf("%s: the child changed the store's directory: %q, before %q", what, after, before)
		}
	}
	child("no process has the store open", []string{"x/1"})

	// A process holds the store open, with a lease only its -wal file has.
	s, err = sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acquire(s, "x/2")
	if !slices.Contains(files(), "leases.db-wal") {
		t.Fatalf("no -wal file while the store is open: %q", files())
	}
	child("a process has the store open", []string{"x/1", "x/2"})
}

// copyFile copies this test binary to dst, executable by anyone (the
// go test build directory is not).
func copyFile(t *testing.T, dst string) {
	t.Helper()
	src, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
