package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestHolderProofs(t *testing.T) {
	p := RandomHolderProofs()
	s := p.Secret("a/b", "alice", 7)
	if len(s) != 22 {
		t.Fatalf("secret %q: want 22 characters", s)
	}
	if err := p.Check("a/b", "alice", 7, s); err != nil {
		t.Fatalf("own secret refused: %v", err)
	}
	for _, c := range []struct {
		name, owner string
		token       uint64
	}{{"a/c", "alice", 7}, {"a/b", "bob", 7}, {"a/b", "alice", 8}, {"a/balice", "", 7}} {
		if err := p.Check(c.name, c.owner, c.token, s); !errors.Is(err, ErrBadProof) {
			t.Errorf("%+v: secret of another grant accepted (%v)", c, err)
		}
	}
	if err := p.Check("a/b", "alice", 7, ""); err != nil {
		t.Errorf("missing secret refused while not required: %v", err)
	}
	p.Required = true
	if err := p.Check("a/b", "alice", 7, ""); !errors.Is(err, ErrBadProof) {
		t.Errorf("missing secret accepted while required: %v", err)
	}
	if err := RandomHolderProofs().Check("a/b", "alice", 7, s); !errors.Is(err, ErrBadProof) {
		t.Errorf("another key accepted the secret: %v", err)
	}
	var off *HolderProofs
	if err := off.Check("a/b", "alice", 7, "x"); err != nil {
		t.Errorf("nil proofs refused: %v", err)
	}
}

func TestLoadHolderKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d", "holder.key")
	p1, err := LoadHolderKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, fi.Mode())
	}
	p2, err := LoadHolderKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if p1.Secret("n", "o", 1) != p2.Secret("n", "o", 1) {
		t.Fatal("reloaded key gives other secrets")
	}
	bad := filepath.Join(t.TempDir(), "bad.key")
	os.WriteFile(bad, []byte("zz\n"), 0o600)
	if _, err := LoadHolderKey(bad); err == nil {
		t.Fatal("malformed key file accepted")
	}
	if _, err := NewHolderProofs([]byte("short")); err == nil {
		t.Fatal("short key accepted")
	}
}
