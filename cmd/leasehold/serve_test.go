package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	lh "github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// startServer runs `leasehold serve` on dir and returns its HTTP URL once
// /readyz answers.
func startServer(t *testing.T, dir, addr string) (url string, kill func()) {
	t.Helper()
	cmd := leasehold(context.Background(), "serve", "--data-dir", dir, "--addr", addr, "--resp-addr", "", "--log-level", "warn")
	startGroup(t, cmd)
	url = "http://" + addr
	proctest.WaitReady(t, url+"/readyz", 30*time.Second)
	return url, func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

// TestServerKilled SIGKILLs a durable server while leases are held, grants
// are being acknowledged and waiters are queued, restarts it on the same
// data, and checks that every acknowledged holder is still recognised,
// that nobody else gets a held lease, and that tokens never go back.
func TestServerKilled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	addr := proctest.FreeAddr(t)
	url, kill := startServer(t, dir, addr)
	s, err := remote.OpenHTTP(url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const ttl = time.Minute

	// Long-held leases.
	held := map[string]lh.Record{}
	for i := 0; i < 5; i++ {
		name := fmt.Sprintf("kill/held/%d", i)
		rec, err := s.TryAcquire(ctx, lh.AcquireRequest{Name: name, Owner: "holder", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		held[name] = rec
	}
	// Queued waiters on two of them.
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.AcquireWait(ctx, lh.AcquireRequest{Name: fmt.Sprintf("kill/held/%d", i), Owner: fmt.Sprint("waiter", i), TTL: ttl})
			if err == nil {
				t.Errorf("waiter %d was granted a held lease", i)
			}
		}()
	}
	// Grants acknowledged right up to the kill.
	var mu sync.Mutex
	acked := map[string]lh.Record{}
	var maxToken uint64
	stop := make(chan struct{})
	var churn sync.WaitGroup
	for w := 0; w < 4; w++ {
		churn.Add(1)
		go func() {
			defer churn.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("kill/churn/%d/%d", w, i)
				rec, err := s.TryAcquire(ctx, lh.AcquireRequest{Name: name, Owner: "churner", TTL: ttl})
				if err != nil {
					return // the server died
				}
				mu.Lock()
				acked[name] = rec
				maxToken = max(maxToken, rec.Token)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	kill()
	close(stop)
	churn.Wait()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, rec := range held {
		maxToken = max(maxToken, rec.Token)
	}
	t.Logf("killed with %d held, %d churn grants acknowledged, last token %d", len(held), len(acked), maxToken)
	if len(acked) == 0 {
		t.Fatal("no grant was acknowledged before the kill")
	}

	startServer(t, dir, addr)
	for name, rec := range held {
		got, err := s.Get(ctx, name)
		if err != nil || got.Owner != "holder" || got.Token != rec.Token {
			t.Errorf("%s after restart: %+v, %v; want holder with token %d", name, got, err, rec.Token)
		}
		if err := s.Renew(ctx, name, "holder", rec.Token, ttl); err != nil {
			t.Errorf("holder's renewal of %s after restart: %v", name, err)
		}
		_, err = s.TryAcquire(ctx, lh.AcquireRequest{Name: name, Owner: "intruder", TTL: ttl})
		if !errors.Is(err, lh.ErrHeld) {
			t.Errorf("intruder's acquire of %s after restart: %v, want ErrHeld", name, err)
		}
	}
	lost := 0
	for name, rec := range acked {
		got, err := s.Get(ctx, name)
		if err != nil || got.Token != rec.Token || got.Owner != "churner" {
			lost++
			if lost < 5 {
				t.Errorf("acknowledged grant %s (token %d) after restart: %+v, %v", name, rec.Token, got, err)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged grants lost", lost, len(acked))
	}
	// Tokens go on from above every token handed out before the kill.
	rec := held["kill/held/0"]
	if err := s.Release(ctx, "kill/held/0", "holder", rec.Token); err != nil {
		t.Fatal(err)
	}
	next, err := s.TryAcquire(ctx, lh.AcquireRequest{Name: "kill/held/0", Owner: "next", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if next.Token <= maxToken {
		t.Errorf("token after restart %d, want > %d", next.Token, maxToken)
	}
}

// TestRunThroughServer runs the `leasehold run` exclusion test with the
// server's HTTP API as the store (the remote store, FIFO waiting).
func TestRunThroughServer(t *testing.T) {
	url, _ := startServer(t, filepath.Join(t.TempDir(), "data"), proctest.FreeAddr(t))
	mutualExclusion(t, url)
	if ls := status(t, url, "e2e/"); len(ls) != 0 {
		t.Errorf("leases left after every run ended: %+v", ls)
	}
}

// TestServeWorkflows: `leasehold serve --workflows FILE` serves the
// definitions: two admins approving at once, one applies, the other is told
// who did; the approval survives a restart.
func TestServeWorkflows(t *testing.T) {
	markTrees(t)
	tmp := t.TempDir()
	defs := filepath.Join(tmp, "workflows.json")
	if err := os.WriteFile(defs, []byte(`{"workflows": [{"name": "approval", "initial": "PENDING",
		"transitions": {"PENDING": ["APPROVED", "REJECTED"]}, "strategy": "adaptive"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := proctest.FreeAddr(t)
	start := func() func() {
		cmd := leasehold(context.Background(), "serve", "--data-dir", filepath.Join(tmp, "data"), "--addr", addr, "--resp-addr", "", "--workflows", defs)
		startGroup(t, cmd)
		proctest.WaitReady(t, "http://"+addr+"/readyz", 30*time.Second)
		return func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }
	}
	kill := start()
	base := "http://" + addr + "/v1/workflows/approval/req-1"
	// Every request bounded: a server that takes the connection and never
	// answers fails the test instead of holding it up for ever.
	client := &http.Client{Timeout: time.Minute}
	post := func(url, body string) (int, map[string]any) {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, out := post(base, `{}`); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("create: %d %v", code, out)
	}
	code, first := post(base+"/transition", `{"from":"PENDING","to":"APPROVED","actor":"alice","request_id":"a-1"}`)
	if code != http.StatusOK || first["outcome"] != "applied" {
		t.Fatalf("alice: %d %v", code, first)
	}
	code, second := post(base+"/transition", `{"from":"PENDING","to":"APPROVED","actor":"bob","request_id":"b-1"}`)
	if code != http.StatusOK || second["outcome"] != "already-done" || second["by"] != "alice" {
		t.Fatalf("bob: %d %v, want already-done by alice", code, second)
	}
	code, again := post(base+"/transition", `{"from":"PENDING","to":"APPROVED","actor":"alice","request_id":"a-1"}`)
	if code != http.StatusOK || again["outcome"] != "repeated" {
		t.Fatalf("alice's retry: %d %v, want repeated", code, again)
	}
	kill()
	start()
	resp, err := client.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var inst map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&inst)
	if inst["state"] != "APPROVED" {
		t.Fatalf("after restart: %v, want APPROVED", inst)
	}
}
