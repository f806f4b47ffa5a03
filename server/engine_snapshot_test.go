package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server/wal"
)

// forceSnapshot makes e write a snapshot of its state now, as it does when
// its log has grown past SnapshotBytes, and waits until it is durable (the
// segments it covers are then deleted).
func forceSnapshot(t testing.TB, e *Engine) {
	t.Helper()
	if err := e.snapshotNow(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(e.cfg.Dir, "log-*"))
	snaps, _ := filepath.Glob(filepath.Join(e.cfg.Dir, "snap-*"))
	if len(snaps) != 1 || len(segs) != 1 {
		t.Fatalf("after the snapshot: %d snapshots, %d segments; want 1 and 1 (the log before it deleted)", len(snaps), len(segs))
	}
}

// TestRepeatedReleaseAfterSnapshot: a grant released or expired before a
// snapshot is remembered by the snapshot, so its holder's repeated release
// after a restart still answers ok (as after a restart that replays the
// log), while anyone else's release is refused and the lease is free.
func TestRepeatedReleaseAfterSnapshot(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	dir := t.TempDir()
	open := func() *Engine {
		e, err := OpenEngine(EngineConfig{Dir: dir, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	acquire := func(name, owner string, ttl time.Duration) leasehold.Record {
		t.Helper()
		rec, err := e.Acquire(ctx, pxReq(name, owner, ttl))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	released := acquire("released", "a", time.Minute)
	if err := e.Release(ctx, "released", "a", released.Token); err != nil {
		t.Fatal(err)
	}
	expired := acquire("expired", "a", time.Second)
	retaken := acquire("retaken", "a", time.Minute)
	if err := e.Release(ctx, "retaken", "a", retaken.Token); err != nil {
		t.Fatal(err)
	}
	held := acquire("held", "a", time.Hour)
	clk.Advance(2 * time.Second)
	// The renewal meets the expiry and applies it, if the expiry loop has
	// not yet.
	if err := e.Renew(ctx, "expired", "a", expired.Token, time.Second); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Fatalf("renewal of an expired lease: %v, want ErrNotHeld", err)
	}

	forceSnapshot(t, e)
	// After the snapshot, in the log: "retaken" is taken again by b.
	again := acquire("retaken", "b", time.Minute)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e = open()
	defer e.Close()
	for _, c := range []struct {
		name, owner string
		token       uint64
		want        error
	}{
		{"released", "a", released.Token, nil},
		{"released", "b", released.Token, leasehold.ErrNotHeld},
		{"released", "a", released.Token + 100, leasehold.ErrNotHeld},
		{"expired", "a", expired.Token, nil},
		{"expired", "b", expired.Token, leasehold.ErrNotHeld},
		{"retaken", "a", retaken.Token, leasehold.ErrNotHeld}, // b holds it now
		{"held", "b", held.Token, leasehold.ErrNotHeld},
	} {
		if err := e.Release(ctx, c.name, c.owner, c.token); !errors.Is(err, c.want) {
			t.Errorf("release of %s by %s (token %d) after the restart: %v, want %v", c.name, c.owner, c.token, err, c.want)
		}
	}
	list, err := e.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "held" || list[0].Token != held.Token || list[1].Name != "retaken" || list[1].Token != again.Token {
		t.Fatalf("leases after the restart: %+v; want held (token %d) and retaken (token %d)", list, held.Token, again.Token)
	}
	// The freed names are free, with higher tokens.
	for _, name := range []string{"released", "expired"} {
		if rec := acquire(name, "c", time.Minute); rec.Token <= again.Token {
			t.Errorf("%s granted with token %d after the restart, want above %d", name, rec.Token, again.Token)
		}
	}
}

// TestTombstoneBounds: a freed grant is remembered for TombstoneTTL after
// it was freed, a restart (with or without a snapshot) gives every
// remembered one TombstoneTTL again, and at most MaxTombstones are
// remembered, the oldest forgotten first.
func TestTombstoneBounds(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Minute
	for _, snapshot := range []bool{false, true} {
		t.Run(fmt.Sprint("snapshot=", snapshot), func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			dir := t.TempDir()
			open := func() *Engine {
				e, err := OpenEngine(EngineConfig{Dir: dir, Clock: clk, TombstoneTTL: ttl, MaxTombstones: 3})
				if err != nil {
					t.Fatal(err)
				}
				return e
			}
			e := open()
			defer func() { e.Close() }()
			tokens := map[string]uint64{}
			free := func(names ...string) {
				t.Helper()
				for _, name := range names {
					rec, err := e.Acquire(ctx, pxReq(name, "a", time.Hour))
					if err != nil {
						t.Fatal(err)
					}
					if err := e.Release(ctx, name, "a", rec.Token); err != nil {
						t.Fatal(err)
					}
					tokens[name] = rec.Token
				}
			}
			// repeat returns which names a repeated release still answers
			// ok, each name's release repeated exactly once.
			repeat := func(names ...string) (ok []string) {
				t.Helper()
				for _, name := range names {
					err := e.Release(ctx, name, "a", tokens[name])
					switch {
					case err == nil:
						ok = append(ok, name)
					case !errors.Is(err, leasehold.ErrNotHeld):
						t.Fatalf("repeated release of %s: %v", name, err)
					}
				}
				return ok
			}
			restart := func() {
				t.Helper()
				if snapshot {
					forceSnapshot(t, e)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				e = open()
				// Its expiry loop is asleep (on the one timer of this
				// clock) before the test moves time.
				clk.WaitForTimers(1)
			}
			check := func(when string, got []string, want ...string) {
				t.Helper()
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s: repeated releases answered ok for %v, want %v", when, got, want)
				}
			}

			// By number: of five freed grants the newest three are remembered,
			// before and after a restart.
			free("n1", "n2", "n3", "n4", "n5")
			check("five freed, three kept", repeat("n1", "n2", "n3", "n4", "n5"), "n3", "n4", "n5")
			restart()
			check("after a restart", repeat("n1", "n2", "n3", "n4", "n5"), "n3", "n4", "n5")

			// By age: remembered until TombstoneTTL has passed since the release.
			clk.Advance(ttl + time.Second) // the expiry loop forgets n3–n5
			free("t1")
			inMemory(t, e, func() bool { return e.nTombs == 1 })
			check("after TombstoneTTL", repeat("n3", "n4", "n5", "t1"), "t1")
			clk.Advance(ttl / 2)
			restart()
			// A restart gives t1 a full TombstoneTTL again.
			clk.Advance(ttl / 2)
			check("after a restart at half its TombstoneTTL", repeat("t1"), "t1")
			clk.Advance(ttl / 2)
			inMemory(t, e, func() bool { return e.nTombs == 0 })
			check("TombstoneTTL after the restart", repeat("t1"))
		})
	}
}

// TestRepeatedReleaseThroughServer: end to end, through the HTTP API and
// the remote store that `leasehold run` uses: acquire, release, snapshot,
// restart the server, release again: ok.
func TestRepeatedReleaseThroughServer(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	serve := func() (*Engine, leasehold.Store, func()) {
		e := openEngine(t, dir)
		srv, stop := startServe(t, e, Config{})
		st, err := remote.OpenHTTP("http://" + srv.HTTPAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		return e, st, func() {
			st.Close()
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	e, st, stop := serve()
	rec, err := st.TryAcquire(ctx, leasehold.AcquireRequest{Name: "jobs/nightly", Owner: "runner", RequestID: "r1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, rec.Name, rec.Owner, rec.Token); err != nil {
		t.Fatal(err)
	}
	forceSnapshot(t, e)
	stop()

	_, st, stop = serve()
	defer stop()
	if err := st.Release(ctx, rec.Name, rec.Owner, rec.Token); err != nil {
		t.Fatalf("repeated release after a restart that followed a snapshot: %v, want ok", err)
	}
	if err := st.Release(ctx, rec.Name, "someone else", rec.Token); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Fatalf("someone else's release: %v, want ErrNotHeld", err)
	}
}

// oldSnapshot is the content of a snapshot written by the engine before
// snapshots kept tombstones: last token 3; a session
// c0b892e76863c2e4e78fca2b87f285b0 (TTL 1 minute) holding "old/sess" (owner
// b, token 3); "old/held" (owner a, token 2, TTL 1 hour); the record
// "rec/k" = "v"; and nothing of "old/freed" (token 1, released before it).
const oldSnapshot = "020603280480b09dc2df012063306238393265373638363363326534653738666361326238376632383562303f010280c0e285e36880c0e285e3688080d0e2c6bfce972f086f6c642f68656c6401610a722d6f6c642f68656c64001064617461206f66206f6c642f68656c645f010380c0e285e36880c0e285e3688080d0e2c6bfce972f086f6c642f7365737301620a722d6f6c642f736573732063306238393265373638363363326534653738666361326238376632383562301064617461206f66206f6c642f736573730209000c080101057265632f6b010176"

// TestOldSnapshotLoads: a snapshot written before tombstones were kept in
// snapshots loads as before (its released grants are not remembered), and a
// snapshot written now holds only the record types the log always had (a
// tombstone is its grant followed by its release), so that an older engine
// reads it too.
func TestOldSnapshotLoads(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	content, err := hex.DecodeString(oldSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(wal.Options{Dir: dir, NoSync: true}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := l.Rotate()
	if err == nil {
		err = l.WriteSnapshot(seq, func(w io.Writer) error { _, err := w.Write(content); return err })
	}
	if err := errors.Join(err, l.Close()); err != nil {
		t.Fatal(err)
	}

	e := openEngine(t, dir)
	defer e.Close()
	list, err := e.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "old/held" || list[0].Owner != "a" || list[0].Token != 2 || string(list[0].Data) != "data of old/held" ||
		list[1].Name != "old/sess" || list[1].Owner != "b" || list[1].Token != 3 {
		t.Fatalf("leases from the old snapshot: %+v", list)
	}
	if _, err := e.KeepAlive(ctx, "c0b892e76863c2e4e78fca2b87f285b0"); err != nil {
		t.Errorf("the old snapshot's session: %v", err)
	}
	if v, err := e.GetRecord(ctx, "rec/k"); err != nil || string(v.Value) != "v" || v.Version != 1 {
		t.Errorf("the old snapshot's record: %+v, %v", v, err)
	}
	if err := e.Release(ctx, "old/freed", "a", 1); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Errorf("release of a grant freed before an old snapshot: %v, want ErrNotHeld (old snapshots hold no tombstones)", err)
	}
	if err := e.Release(ctx, "old/held", "a", 2); err != nil {
		t.Fatal(err)
	}
	rec, err := e.Acquire(ctx, pxReq("new", "c", time.Minute))
	if err != nil || rec.Token != 4 {
		t.Fatalf("first grant after the old snapshot: token %d, %v; want 4", rec.Token, err)
	}

	// The snapshot written now: "old/held" is a tombstone.
	e.lock()
	buf := e.encodeState()
	e.unlock()
	known := map[byte]bool{recGrant: true, recRelease: true, recToken: true, recSessionOpen: true, recRecords: true, recRecEpoch: true}
	var prev []byte
	tombs := 0
	for r := bytes.NewReader(buf); r.Len() > 0; {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			t.Fatal(err)
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(r, rec); err != nil {
			t.Fatal(err)
		}
		if !known[rec[0]] {
			t.Fatalf("snapshot record of type %d, which older engines do not read", rec[0])
		}
		if rec[0] == recRelease {
			if name, token := grantOf(prev); name != "old/held" || token != 2 {
				t.Fatalf("a release in the snapshot not right after its grant (after %q, token %d)", name, token)
			}
			tombs++
		}
		prev = rec
	}
	if tombs != 1 {
		t.Fatalf("%d tombstones in the snapshot, want 1 (old/held)", tombs)
	}
}

// grantOf returns the name and token of a grant record (nothing for any
// other record).
func grantOf(rec []byte) (name string, token uint64) {
	if len(rec) == 0 || rec[0] != recGrant {
		return "", 0
	}
	r := &reader{b: rec[1:]}
	token = r.uvarint()
	r.uvarint() // ttl
	r.uvarint() // logged ttl
	r.varint()  // acquired
	return r.string(), token
}
