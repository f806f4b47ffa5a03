package server

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
)

// stallingRecords stalls the first read after stall is armed until the
// reader's context ends: a server paused (SIGSTOP, a VM frozen) in the
// middle of a transition, past its lease's local deadline.
type stallingRecords struct {
	leasehold.RecordStore
	stall *atomic.Bool
}

func (r stallingRecords) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if r.stall.CompareAndSwap(true, false) {
		<-ctx.Done()
		return leasehold.Versioned{}, ctx.Err()
	}
	return r.RecordStore.GetRecord(ctx, key)
}

// armingLeases arms stall when it grants a lease: the transition's next
// read, under the lease, stalls.
type armingLeases struct {
	leasehold.Store
	stall *atomic.Bool
	armed atomic.Bool
}

func (l *armingLeases) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	rec, err := l.Store.TryAcquire(ctx, req)
	if err == nil && l.armed.CompareAndSwap(true, false) {
		l.stall.Store(true)
	}
	return rec, err
}

// TestWorkflowHTTPLeaseLost (issue 28, finding 5): a transition whose
// lease is lost under it (its server paused past the lease's local
// deadline) has an unknown outcome: it is answered 503 outcome-unknown
// with Retry-After, saying that repeating it with the same request_id is
// safe, and repeating it applies it once. Before, it was 500 internal.
func TestWorkflowHTTPLeaseLost(t *testing.T) {
	eng, err := OpenEngine(EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	store := StoreOf(eng)
	stall := &atomic.Bool{}
	leases := &armingLeases{Store: store, stall: stall}
	wf, err := workflow.New(workflow.Definition{Name: "approval", Initial: "DRAFT",
		Transitions: map[string][]string{"DRAFT": {"PENDING"}}},
		workflow.Config{Records: stallingRecords{store.(leasehold.RecordStore), stall}, Leases: leases,
			Strategy: workflow.Lease, LeaseTTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	api := newHTTPAPI(eng, HandlerOptions{Workflows: map[string]*workflow.Workflows{"approval": wf}})
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.cancelDrain()
		srv.CloseClientConnections()
		srv.Close()
	})
	ts := &htServer{t: t, eng: eng, api: api, srv: srv}
	const base = "/v1/workflows/approval/doc-1"
	ts.want(ts.do("POST", base, "", ""), 201, "")
	submit := `{"from":"DRAFT","to":"PENDING","actor":"alice","request_id":"submit-1"}`
	leases.armed.Store(true)
	r := ts.do("POST", base+"/transition", "", submit)
	ts.want(r, 503, "outcome-unknown")
	if r.header.Get("Retry-After") == "" {
		t.Errorf("503 outcome-unknown without Retry-After: %v", r.header)
	}
	r = ts.do("POST", base+"/transition", "", submit)
	ts.want(r, 200, "")
	if o := r.str("outcome"); (o != "applied" && o != "repeated") || r.num("version") != 1 {
		t.Fatalf("repeated with the same request_id: %s", r.body)
	}
}
