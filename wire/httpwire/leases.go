package httpwire

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
)

// Leases, semaphores, elections, sessions and events.

// Lease is a grant: the answer of acquire, force-release, GET
// /v1/leases/{name} and an election's leader, and an item of List.
type Lease struct {
	Name        string `json:"name"`
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	TTLMS       int64  `json:"ttl_ms"`
	RemainingMS int64  `json:"remaining_ms"`
	Acquired    string `json:"acquired"`
	// Data is the lease's data when it is valid UTF-8; otherwise it is in
	// DataBase64. Neither is set when the lease has no data.
	Data       *string `json:"data,omitempty"`
	DataBase64 *string `json:"data_base64,omitempty"`
	Session    string  `json:"session,omitempty"`
	Permit     *int    `json:"permit,omitempty"` // semaphore acquires
	Term       uint64  `json:"term,omitempty"`   // an election's leader
	// Secret is the grant's holder proof: acquire answers only.
	Secret  string    `json:"secret,omitempty"`
	Waiters *[]Waiter `json:"waiters,omitempty"` // GET only: always a list there
}

// LeaseOf is the answer for a grant.
func LeaseOf(r leasehold.Record) Lease {
	l := Lease{
		Name: r.Name, Owner: r.Owner, Token: r.Token,
		TTLMS:       CeilMS(r.TTL),
		RemainingMS: LeftMS(r.Remaining),
		Acquired:    Time(r.Acquired),
	}
	if len(r.Data) > 0 {
		l.Data, l.DataBase64 = EncodeBytes(r.Data, utf8.Valid(r.Data))
	}
	return l
}

// Record is the grant l describes.
func (l *Lease) Record() (leasehold.Record, error) {
	r := leasehold.Record{
		Name: l.Name, Owner: l.Owner, Token: l.Token,
		TTL: MS(l.TTLMS), Remaining: MS(l.RemainingMS),
	}
	var err error
	if r.Acquired, err = ParseTime(l.Acquired); err != nil {
		return r, fmt.Errorf("bad acquired time %q", l.Acquired)
	}
	if r.Data, err = DecodeBytes("data", l.Data, l.DataBase64); err != nil {
		return r, err
	}
	return r, nil
}

// Waiter is an acquirer queued for a lease (Lease.Waiters).
type Waiter struct {
	Owner    string `json:"owner"`
	Session  string `json:"session,omitempty"`
	Since    string `json:"since"`
	WaitedMS int64  `json:"waited_ms"`
}

// Holder is the holder of a lease in a "held" problem.
type Holder struct {
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	RemainingMS int64  `json:"remaining_ms"`
	Acquired    string `json:"acquired,omitempty"`
}

// HolderOf is the holder a *leasehold.HeldError names.
func HolderOf(he *leasehold.HeldError) Holder {
	return Holder{Owner: he.Owner, Token: he.Token, RemainingMS: LeftMS(he.Remaining), Acquired: Time(he.Acquired)}
}

// List is the answer of GET /v1/leases: one page.
type List struct {
	Leases []Lease `json:"leases"`
	// Next, when more leases remain, is the last name of this page: ask
	// again with ?after=Next.
	Next string `json:"next,omitempty"`
}

// AcquireBody is the body of POST /v1/leases/{name}/acquire.
type AcquireBody struct {
	Owner      string  `json:"owner"`
	TTLMS      int64   `json:"ttl_ms"`
	Data       *string `json:"data,omitempty"`
	DataBase64 *string `json:"data_base64,omitempty"`
	RequestID  string  `json:"request_id,omitempty"`
	WaitMS     int64   `json:"wait_ms,omitempty"`
	Session    string  `json:"session,omitempty"`
	// GiveUp gives up the wait of RequestID instead of acquiring: see
	// server.AcquireRequest.GiveUp.
	GiveUp Flag `json:"give_up,omitempty"`
}

// Flag is a JSON boolean that, when given, is true or false: null is
// refused (a "give_up": null was taken as absent, and the acquire took
// the lease it was meant never to take; the red team of 55bc5e7).
type Flag bool

// UnmarshalJSON takes true or false; anything else is an
// *json.UnmarshalTypeError.
func (f *Flag) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*f = true
	case "false":
		*f = false
	default:
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[bool]()}
	}
	return nil
}

// AcquireBodyOf is the body that asks for req, waiting up to wait (rounded
// up to milliseconds), attached to session (if not "").
func AcquireBodyOf(req leasehold.AcquireRequest, wait time.Duration, session string) AcquireBody {
	b := AcquireBody{Owner: req.Owner, TTLMS: CeilMS(req.TTL), RequestID: req.RequestID, WaitMS: CeilMS(wait), Session: session}
	if len(req.Data) > 0 {
		b.Data, b.DataBase64 = EncodeBytes(req.Data, PlainText(req.Data))
	}
	return b
}

// Bytes is the lease data the body gives (nil if none), or an
// *leasehold.InvalidError.
func (a *AcquireBody) Bytes() ([]byte, error) { return DecodeBytes("data", a.Data, a.DataBase64) }

// SemaphoreBody is the body of POST /v1/semaphores/{name}/acquire: an
// acquire of one of Permits permits.
type SemaphoreBody struct {
	AcquireBody
	Permits int `json:"permits"`
}

// RenewBody is the body of POST /v1/leases/{name}/renew. Secret is the
// grant's holder proof (the acquire answer's secret).
type RenewBody struct {
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	TTLMS  int64  `json:"ttl_ms"`
	Secret string `json:"secret,omitempty"`
}

// Renewed is the answer of a renew.
type Renewed struct {
	Name  string `json:"name"`
	Token uint64 `json:"token"`
	TTLMS int64  `json:"ttl_ms"`
}

// ReleaseBody is the body of POST /v1/leases/{name}/release.
type ReleaseBody struct {
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	Secret string `json:"secret,omitempty"`
}

// SessionBody is the body of POST /v1/sessions.
type SessionBody struct {
	TTLMS int64 `json:"ttl_ms"`
}

// Session is the answer of opening a session and of its keepalives.
type Session struct {
	ID          string `json:"id"`
	TTLMS       int64  `json:"ttl_ms"`
	RemainingMS int64  `json:"remaining_ms"`
	Leases      int    `json:"leases"`
}

// Event is the data of an event of GET /v1/events (whose SSE event name
// is its Type) and an item of Events.
type Event struct {
	Type      string  `json:"type"`
	Name      string  `json:"name,omitempty"`
	Owner     string  `json:"owner,omitempty"`
	Token     uint64  `json:"token,omitempty"`
	Time      string  `json:"time"`
	HandoffMS float64 `json:"handoff_ms,omitempty"`
	Waiters   int     `json:"waiters"`
}

// MayFree reports whether an event of type typ (Event.Type, the SSE event
// name) may have left its lease free for a waiter: released, expired,
// forced, dequeued (a waiter ahead gave up) or overflow (the stream missed
// events).
func MayFree(typ string) bool {
	switch typ {
	case "released", "expired", "forced", "dequeued", "overflow":
		return true
	}
	return false
}

// Events is the answer of GET /v1/events/recent.
type Events struct {
	Events []Event `json:"events"`
}

// Stats is the answer of GET /v1/stats.
type Stats struct {
	Held     int  `json:"held"`
	Waiters  int  `json:"waiters"`
	Sessions int  `json:"sessions"`
	Durable  bool `json:"durable"`
	// Started is when the server's API started (RFC 3339): the dashboard
	// draws nothing it cannot know from before it.
	Started string `json:"started,omitempty"`
}
