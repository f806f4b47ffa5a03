package httpwire

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// Errors are problem documents (RFC 9457): Content-Type
// application/problem+json, with type, title, status and detail, and the
// extra members of their type.

// ProblemType is the prefix of the "type" member of every problem.
const ProblemType = "urn:leasehold:problem:"

// ProblemContentType is the media type of problem documents.
const ProblemContentType = "application/problem+json"

// The problem types (after ProblemType), as docs/http-api.md lists them.
const (
	Held                 = "held"
	NotHeld              = "not-held"
	NotFound             = "not-found"
	Invalid              = "invalid"
	BadProof             = "bad-proof"
	NoSession            = "no-session"
	Unauthorized         = "unauthorized"
	Forbidden            = "forbidden"
	MisdirectedHost      = "misdirected-host"
	RateLimited          = "rate-limited"
	QuotaExceeded        = "quota-exceeded"
	TooLarge             = "too-large"
	UnsupportedMediaType = "unsupported-media-type"
	NoRoute              = "no-route"
	MethodNotAllowed     = "method-not-allowed"
	Unavailable          = "unavailable"
	Timeout              = "timeout"
	Internal             = "internal"

	PreconditionFailed   = "precondition-failed"
	PreconditionRequired = "precondition-required"
	Conflict             = "conflict"
	RecordsUnsupported   = "records-unsupported"
	TxnUnsupported       = "txn-unsupported"

	WrongState     = "wrong-state"
	NotAllowed     = "not-allowed"
	Exists         = "exists"
	Contended      = "contended"
	OutcomeUnknown = "outcome-unknown"
	RequestReused  = "request-reused"
	WorkflowRecord = "workflow-record"
)

// ProblemTypes are all the problem types the server answers with.
var ProblemTypes = []string{
	Held, NotHeld, NotFound, Invalid, BadProof, NoSession, Unauthorized, Forbidden, MisdirectedHost,
	RateLimited, QuotaExceeded, TooLarge, UnsupportedMediaType, NoRoute, MethodNotAllowed, Unavailable, Timeout, Internal,
	PreconditionFailed, PreconditionRequired, Conflict, RecordsUnsupported, TxnUnsupported,
	WrongState, NotAllowed, Exists, Contended, OutcomeUnknown, RequestReused, WorkflowRecord,
}

// EncodeProblem is a problem document of type typ (without the prefix):
// type, title, status and detail first, then the members of extra sorted
// by name, and a newline.
func EncodeProblem(typ, title string, status int, detail string, extra map[string]any) []byte {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{ProblemType + typ, title, status, detail})
	if len(extra) > 0 {
		ex, _ := json.Marshal(extra)
		b = append(append(b[:len(b)-1], ','), ex[1:]...)
	}
	return append(b, '\n')
}

// Problem is a problem document as a client reads it: the members every
// problem has, and the extra members of the types a client maps to
// errors.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`

	// invalid
	Field  string `json:"field"`
	Reason string `json:"reason"`
	// held (a semaphore's also has permits)
	Holder  *Holder `json:"holder"`
	Permits int     `json:"permits"`
	// precondition-failed, conflict
	Key             string `json:"key"`
	ExpectedVersion uint64 `json:"expected_version"`
	CurrentVersion  uint64 `json:"current_version"`
}

// DecodeProblem reads an answer's body as a problem document: ok is false
// unless the content type is a problem's and the body is one of this API
// (its type has the ProblemType prefix).
func DecodeProblem(contentType string, body []byte) (p Problem, ok bool) {
	if !strings.HasPrefix(contentType, ProblemContentType) || json.Unmarshal(body, &p) != nil || !strings.HasPrefix(p.Type, ProblemType) {
		return Problem{}, false
	}
	return p, true
}

// Name is the problem's type without the prefix ("held", ...).
func (p *Problem) Name() string { return strings.TrimPrefix(p.Type, ProblemType) }

// HeldMembers are the extra members of a held problem.
func HeldMembers(he *leasehold.HeldError) map[string]any {
	return map[string]any{"holder": HolderOf(he)}
}

// HeldError is the error of a held problem about the lease name.
func (p *Problem) HeldError(name string) *leasehold.HeldError {
	he := &leasehold.HeldError{Name: name}
	if h := p.Holder; h != nil {
		he.Owner, he.Token, he.Remaining = h.Owner, h.Token, time.Duration(h.RemainingMS)*time.Millisecond
		he.Acquired, _ = ParseTime(h.Acquired)
	}
	return he
}

// InvalidMembers are the extra members of an invalid problem.
func InvalidMembers(inv *leasehold.InvalidError) map[string]any {
	return map[string]any{"field": inv.Field, "reason": inv.Reason}
}

// InvalidError is the error of an invalid problem.
func (p *Problem) InvalidError() *leasehold.InvalidError {
	field, reason := p.Field, p.Reason
	if field == "" {
		field = "request"
	}
	if reason == "" {
		reason = p.Detail
	}
	return &leasehold.InvalidError{Field: field, Reason: reason}
}

// ConflictMembers are the extra members of a precondition-failed or
// conflict problem.
func ConflictMembers(ce *leasehold.ConflictError) map[string]any {
	return map[string]any{"key": ce.Key, "expected_version": ce.Expected, "current_version": ce.Actual}
}

// ConflictError is the error of a precondition-failed or conflict problem
// about key (the problem's own key, if it names one).
func (p *Problem) ConflictError(key string) *leasehold.ConflictError {
	if p.Key != "" {
		key = p.Key
	}
	return &leasehold.ConflictError{Key: key, Expected: p.ExpectedVersion, Actual: p.CurrentVersion}
}
