package cli

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
)

// TestReleaseBadProof (issue 29, item 2): release through a lease server
// with holder proofs, with a wrong secret or none, says that the server
// refused the proof (it said the lease "is not held by" its very holder
// and guessed it expired), exits 76 and changes nothing; the right secret
// releases.
func TestReleaseBadProof(t *testing.T) {
	key := make([]byte, server.HolderKeyLen)
	proofs, err := server.NewHolderProofs(key)
	if err != nil {
		t.Fatal(err)
	}
	proofs.Required = true // as with auth on: a missing secret is refused too
	eng, err := server.OpenEngine(server.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ts := httptest.NewServer(server.NewHandler(eng, server.HandlerOptions{Holders: proofs}))
	defer ts.Close()
	ctx := context.Background()
	rec, err := eng.Acquire(ctx, server.AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: "deploy", Owner: "me/deploy", TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	base := []string{"release", "--store", ts.URL, "--owner", "me/deploy", "--token", "1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--secret", "nope"}, "the lease server refused: the secret given (holder proof, from --secret) does not match the grant of deploy to me/deploy with token 1; nothing changed"},
		{nil, "the lease server refused: no secret (holder proof) was given for deploy"},
	} {
		r := h.run(append(append(base[:len(base):len(base)], c.args...), "deploy")...)
		if r.code != ExitLost || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "expired") {
			t.Errorf("release %q: exit %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, ExitLost, c.want)
		}
	}
	if got, err := eng.Get(ctx, "deploy"); err != nil || got.Token != rec.Token {
		t.Fatalf("after the refused releases: %+v, %v; want still held", got, err)
	}
	r := h.run(append(base, "--secret", proofs.Secret("deploy", "me/deploy", rec.Token), "deploy")...)
	if r.code != 0 {
		t.Fatalf("release with the grant's secret: exit %d, stderr %q", r.code, r.stderr)
	}
}
