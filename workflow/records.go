package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
)

// The records of one instance, on any leasehold.RecordStore:
//
//	wf/NAME/i/INSTANCE            the instance (state, version, last transition)
//	wf/NAME/h/INSTANCE/VERSION    one history entry per transition (VERSION: 20 digits)
//	wf/NAME/r/INSTANCE/REQUEST    the transition a request id applied
//
// Every transition writes all three in one leasehold.Txn: the instance
// conditioned on the version read, the history entry and the request record
// conditioned on being absent. Names contain no '/', so keys never collide.

type instRec struct {
	State   string          `json:"state"`
	Version uint64          `json:"version"`
	Created time.Time       `json:"created"`
	Last    *Entry          `json:"last,omitempty"`
	Extra   json.RawMessage `json:"extra,omitempty"` // reserved
}

func (w *Workflows) instKey(id string) string { return "wf/" + w.def.Name + "/i/" + id }
func (w *Workflows) histKey(id string, version uint64) string {
	return fmt.Sprintf("wf/%s/h/%s/%020d", w.def.Name, id, version)
}
func (w *Workflows) reqKey(id, request string) string {
	return "wf/" + w.def.Name + "/r/" + id + "/" + request
}
func (w *Workflows) leaseName(id string) string { return "wf/" + w.def.Name + "/lock/" + id }
func (w *Workflows) queueLeaseName(id string) string {
	return "wf/" + w.def.Name + "/queue/" + id
}

// readInstance returns the instance record and its record version.
func (w *Workflows) readInstance(ctx context.Context, id string) (instRec, uint64, error) {
	v, err := w.records.GetRecord(ctx, w.instKey(id))
	if errors.Is(err, leasehold.ErrNotFound) {
		return instRec{}, 0, fmt.Errorf("workflow %q instance %q: %w", w.def.Name, id, ErrNoInstance)
	}
	if err != nil {
		return instRec{}, 0, err
	}
	rec, err := decodeInstance(v.Value)
	if err != nil {
		return instRec{}, 0, fmt.Errorf("workflow %q instance %q: %w", w.def.Name, id, err)
	}
	return rec, v.Version, nil
}

func decodeInstance(b []byte) (instRec, error) {
	var r instRec
	if err := json.Unmarshal(b, &r); err != nil || r.State == "" {
		return instRec{}, fmt.Errorf("the instance record is not a workflow instance (%.40q)", b)
	}
	return r, nil
}

// readRequest returns the entry a request id applied, or found false.
func (w *Workflows) readRequest(ctx context.Context, id, request string) (Entry, bool, error) {
	v, err := w.records.GetRecord(ctx, w.reqKey(id, request))
	if errors.Is(err, leasehold.ErrNotFound) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	var e Entry
	if err := json.Unmarshal(v.Value, &e); err != nil {
		return Entry{}, false, fmt.Errorf("workflow %q instance %q: request record %q is not a transition: %w", w.def.Name, id, request, err)
	}
	return e, true, nil
}

// plan is one transaction's worth of transitions on one instance.
type plan struct {
	id      string
	version uint64  // the instance record's version the plan is conditioned on
	next    instRec // the instance after the applied entries
	applied []Entry
	// checked are request ids of refused commands whose absence the
	// transaction also checks (so a refusal is never given to a request
	// that was applied before).
	checked []string
}

func (p *plan) ops() int { return 2 + 4*len(p.applied) + len(p.checked) }

func (w *Workflows) txn(p *plan) (leasehold.Txn, error) {
	inst, err := json.Marshal(p.next)
	if err != nil {
		return leasehold.Txn{}, err
	}
	t := leasehold.Txn{
		If:   make([]leasehold.Condition, 0, 1+2*len(p.applied)+len(p.checked)),
		Then: make([]leasehold.Write, 0, 1+2*len(p.applied)),
	}
	t.If = append(t.If, leasehold.Condition{Key: w.instKey(p.id), Version: p.version})
	t.Then = append(t.Then, leasehold.Write{Key: w.instKey(p.id), Value: inst})
	for _, e := range p.applied {
		b, err := json.Marshal(e)
		if err != nil {
			return leasehold.Txn{}, err
		}
		hk, rk := w.histKey(p.id, e.Version), w.reqKey(p.id, e.RequestID)
		t.If = append(t.If, leasehold.Condition{Key: hk}, leasehold.Condition{Key: rk})
		t.Then = append(t.Then, leasehold.Write{Key: hk, Value: b}, leasehold.Write{Key: rk, Value: b})
	}
	for _, r := range p.checked {
		t.If = append(t.If, leasehold.Condition{Key: w.reqKey(p.id, r)})
	}
	return t, nil
}

// conflictKind classifies the key a *leasehold.ConflictError names.
type conflictKind int

const (
	conflictNone     conflictKind = iota
	conflictInstance              // someone else wrote the instance
	conflictRequest               // a request id was applied before
	conflictHistory               // a history entry exists (should not happen)
)

func (w *Workflows) classify(id string, err error) (conflictKind, string) {
	var ce *leasehold.ConflictError
	if !errors.As(err, &ce) {
		return conflictNone, ""
	}
	prefix := "wf/" + w.def.Name + "/r/" + id + "/"
	switch {
	case ce.Key == w.instKey(id):
		return conflictInstance, ""
	case len(ce.Key) > len(prefix) && ce.Key[:len(prefix)] == prefix:
		return conflictRequest, ce.Key[len(prefix):]
	default:
		return conflictHistory, ""
	}
}

// History returns the instance's transitions, oldest first.
func (w *Workflows) History(ctx context.Context, instance string) ([]Entry, error) {
	if err := checkName("instance", instance); err != nil {
		return nil, err
	}
	rec, _, err := w.readInstance(ctx, instance)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, rec.Version)
	errs := make([]error, rec.Version)
	next := make(chan uint64)
	done := make(chan struct{})
	workers := min(8, int(rec.Version))
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for v := range next {
				r, err := w.records.GetRecord(ctx, w.histKey(instance, v))
				if err != nil {
					errs[v-1] = fmt.Errorf("history entry %d: %w", v, err)
					continue
				}
				if err := json.Unmarshal(r.Value, &out[v-1]); err != nil {
					errs[v-1] = fmt.Errorf("history entry %d: %w", v, err)
				}
			}
		}()
	}
	for v := uint64(1); v <= rec.Version; v++ {
		next <- v
	}
	close(next)
	for range workers {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("workflow %q instance %q: %w", w.def.Name, instance, err)
	}
	return out, nil
}
