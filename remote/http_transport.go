package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/wire/httpwire"
)

// ProblemError is a problem document (RFC 9457) the server answered with
// that has no leasehold error of its own.
type ProblemError struct {
	Status int    // HTTP status
	Type   string // the problem's type without the urn:leasehold:problem: prefix ("forbidden", ...)
	Title  string
	Detail string
	// RetryAfter is the server's Retry-After, if it sent one.
	RetryAfter time.Duration
}

func (e *ProblemError) Error() string {
	msg := e.Detail
	if msg == "" {
		msg = e.Title
	}
	return fmt.Sprintf("leasehold server: %d %s: %s", e.Status, e.Type, msg)
}

// Is matches the package's sentinel errors by problem type.
func (e *ProblemError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Type == httpwire.Unauthorized
	case ErrForbidden:
		return e.Type == httpwire.Forbidden
	case ErrRateLimited:
		return e.Type == httpwire.RateLimited
	case ErrQuotaExceeded:
		return e.Type == httpwire.QuotaExceeded
	case ErrUnavailable:
		return e.Type == httpwire.Unavailable
	case ErrNoSession:
		return e.Type == httpwire.NoSession
	case ErrBadProof, leasehold.ErrNotHeld:
		return e.Type == httpwire.BadProof
	}
	return false
}

// --- paths (the bodies and answers are wire/httpwire's) ---

// namePath is /v1/{kind}/NAME[/action] with each segment of NAME
// percent-encoded: the server decodes the name once.
func (c *conn) namePath(kind, name string, action string) string {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	p := "/v1/" + kind + "/" + strings.Join(segs, "/")
	if action != "" {
		p += "/" + action
	}
	return p
}

// answerRecord is the grant an answer describes.
func answerRecord(l *httpwire.Lease) (leasehold.Record, error) {
	r, err := l.Record()
	if err != nil {
		return r, fmt.Errorf("leasehold server: malformed lease in the answer: %v", err)
	}
	return r, nil
}

// --- requests ---

type call struct {
	method, path string
	query        url.Values
	body         any
	// replayable lets the transport resend the request on a connection
	// that turned out dead before any answer: set for operations that are
	// safe to repeat (renew, release, an acquire with a request id).
	replayable bool
	// wait is how long the server may hold the request (long-polls); the
	// request's timeout is that plus the default timeout.
	wait time.Duration
	// name is the lease (or record key) the call is about, for errors.
	name string
	// header is set on the request; raw, when set (or for a PUT), is the
	// body as is (a record's value), instead of body's JSON.
	header map[string]string
	raw    []byte
	// records maps problems to record errors too (recordError).
	records bool
}

// do sends c and decodes a 2xx answer's JSON into out (if non-nil). Any
// other answer becomes an error.
func (s *conn) do(ctx context.Context, c call, out any) (int, error) {
	if s.closed.Load() {
		return 0, leasehold.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout+c.wait)
	defer cancel()
	u := s.base + c.path
	if len(c.query) > 0 {
		u += "?" + c.query.Encode()
	}
	var body io.Reader
	ctype := ""
	switch {
	case c.body != nil:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c.body); err != nil {
			return 0, err
		}
		body, ctype = &buf, "application/json"
	case c.raw != nil || c.method == http.MethodPut:
		body, ctype = bytes.NewReader(c.raw), "application/octet-stream"
	}
	req, err := http.NewRequestWithContext(ctx, c.method, u, body)
	if err != nil {
		return 0, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	if c.replayable {
		req.Header.Set("Idempotency-Key", randid.Hex(12))
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, s.transportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, s.transportError(ctx, err)
	}
	if resp.StatusCode/100 != 2 {
		if c.records {
			return resp.StatusCode, recordError(resp, data, c.name)
		}
		return resp.StatusCode, problemError(resp, data, c.name)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("leasehold server: malformed answer to %s %s: %v", c.method, c.path, err)
		}
	}
	return resp.StatusCode, nil
}

// transportError keeps a context's error recognisable and says whether
// the request may have reached the server: not if the connection was never
// made (refused, no route, unknown host: nothing was sent), else the
// outcome is unknown.
func (s *conn) transportError(ctx context.Context, err error) error {
	if s.closed.Load() {
		return leasehold.ErrClosed
	}
	var oe *net.OpError
	dial := errors.As(err, &oe) && oe.Op == "dial"
	if cerr := ctx.Err(); cerr != nil {
		if dial {
			return fmt.Errorf("leasehold server: %w while connecting (nothing was sent)", cerr)
		}
		return fmt.Errorf("leasehold server: %w (the outcome is unknown)", cerr)
	}
	if dial {
		return fmt.Errorf("leasehold server not reached (nothing was sent): %w", err)
	}
	return fmt.Errorf("leasehold server unreachable (the outcome is unknown): %w", err)
}

// problemError maps a problem answer back to leasehold's errors.
func problemError(resp *http.Response, data []byte, name string) error {
	p, ok := httpwire.DecodeProblem(resp.Header.Get("Content-Type"), data)
	if !ok {
		snippet := strings.TrimSpace(string(data))
		if len(snippet) > 200 {
			snippet = snippet[:200] + "..."
		}
		return fmt.Errorf("leasehold server: unexpected answer %s (not a leasehold problem document): %s", resp.Status, snippet)
	}
	typ := p.Name()
	switch typ {
	case httpwire.Held:
		return p.HeldError(name)
	case httpwire.NotHeld:
		return leasehold.ErrNotHeld
	case httpwire.NotFound:
		return leasehold.ErrNotFound
	case httpwire.Invalid:
		return p.InvalidError()
	}
	pe := &ProblemError{Status: resp.StatusCode, Type: typ, Title: p.Title, Detail: p.Detail}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if n, err := strconv.Atoi(ra); err == nil && n >= 0 {
			pe.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return pe
}

// --- the transport of the client core (core.go) ---

var _ transport = (*conn)(nil)

// sendAcquire sends POST /v1/leases/{name}/acquire (with wait_ms for a
// long-poll), replayable when it has a request id. It reads no answer
// after ctx ends (the core reclaims the grant instead), so it ignores
// late.
func (s *conn) sendAcquire(ctx context.Context, req *leasehold.AcquireRequest, session string, wait time.Duration, _ func(grant, error)) (grant, error) {
	return s.postAcquire(ctx, req, httpwire.AcquireBodyOf(*req, wait, session), wait)
}

// sendGiveUp sends POST /v1/leases/{name}/acquire with give_up.
func (s *conn) sendGiveUp(ctx context.Context, req *leasehold.AcquireRequest) (grant, error) {
	body := httpwire.AcquireBodyOf(*req, 0, "")
	body.GiveUp = true
	return s.postAcquire(ctx, req, body, 0)
}

// postAcquire sends body, an acquire of req's lease asking to wait up to
// wait, and reads the grant.
func (s *conn) postAcquire(ctx context.Context, req *leasehold.AcquireRequest, body httpwire.AcquireBody, wait time.Duration) (grant, error) {
	var lj httpwire.Lease
	_, err := s.do(ctx, call{
		method: http.MethodPost, path: s.namePath("leases", req.Name, "acquire"),
		body: body, replayable: req.RequestID != "", wait: wait, name: req.Name,
	}, &lj)
	if err != nil {
		return grant{}, err
	}
	rec, err := answerRecord(&lj)
	if err != nil {
		return grant{}, err
	}
	return grant{rec: rec, secret: lj.Secret}, nil
}

// sendPermit sends POST /v1/semaphores/{name}/acquire, as sendAcquire
// sends a lease's acquire.
func (s *conn) sendPermit(ctx context.Context, sem string, n int, req *leasehold.AcquireRequest, session string, wait time.Duration, _ func(grant, error)) (grant, error) {
	var lj httpwire.Lease
	body := httpwire.SemaphoreBody{AcquireBody: httpwire.AcquireBodyOf(*req, wait, session), Permits: n}
	_, err := s.do(ctx, call{
		method: http.MethodPost, path: s.namePath("semaphores", sem, "acquire"),
		body: body, replayable: req.RequestID != "", wait: wait, name: sem,
	}, &lj)
	if err != nil {
		return grant{}, err
	}
	rec, err := answerRecord(&lj)
	if err != nil {
		return grant{}, err
	}
	if lj.Permit == nil || rec.Name != permitName(sem, *lj.Permit) {
		return grant{}, fmt.Errorf("leasehold server: the answer to a semaphore's acquire names no permit of %q", sem)
	}
	return grant{rec: rec, secret: lj.Secret}, nil
}

// retryUnavailable is the HTTP store's waitPolicy.retry: a server that is
// shutting down or not ready (503 unavailable), with its Retry-After.
func retryUnavailable(err error) (time.Duration, bool) {
	var pe *ProblemError
	if errors.As(err, &pe) && pe.Type == httpwire.Unavailable {
		return pe.RetryAfter, true
	}
	return 0, false
}

// sendHolder sends POST /v1/leases/{name}/renew with ttl, or .../release
// (ttl 0).
func (s *conn) sendHolder(ctx context.Context, name, owner string, token uint64, ttl time.Duration, secret string) error {
	c := call{method: http.MethodPost, replayable: true, name: name}
	if ttl > 0 {
		c.path = s.namePath("leases", name, "renew")
		c.body = httpwire.RenewBody{Owner: owner, Token: token, TTLMS: httpwire.CeilMS(ttl), Secret: secret}
	} else {
		c.path = s.namePath("leases", name, "release")
		c.body = httpwire.ReleaseBody{Owner: owner, Token: token, Secret: secret}
	}
	_, err := s.do(ctx, c, nil)
	return err
}

// sendLease sends GET /v1/leases/{name}, or with force POST
// /v1/leases/{name}/force-release.
func (s *conn) sendLease(ctx context.Context, name string, force bool) (leasehold.Record, error) {
	c := call{method: http.MethodGet, path: s.namePath("leases", name, ""), name: name}
	if force {
		c = call{method: http.MethodPost, path: s.namePath("leases", name, "force-release"), body: struct{}{}, name: name}
	}
	var lj httpwire.Lease
	if _, err := s.do(ctx, c, &lj); err != nil {
		return leasehold.Record{}, err
	}
	return answerRecord(&lj)
}

// sendList reads GET /v1/leases page by page (?after= the last page's
// next).
func (s *conn) sendList(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	var recs []leasehold.Record
	after := ""
	for {
		var out httpwire.List
		q := url.Values{}
		if prefix != "" {
			q.Set("prefix", prefix)
		}
		if after != "" {
			q.Set("after", after)
		}
		if _, err := s.do(ctx, call{method: http.MethodGet, path: "/v1/leases", query: q}, &out); err != nil {
			return nil, err
		}
		if recs == nil {
			recs = make([]leasehold.Record, 0, len(out.Leases))
		}
		for i := range out.Leases {
			r, err := answerRecord(&out.Leases[i])
			if err != nil {
				return nil, err
			}
			recs = append(recs, r)
		}
		if out.Next == "" {
			return recs, nil
		}
		if out.Next <= after {
			return nil, fmt.Errorf("leasehold server: malformed answer to GET /v1/leases: next %q does not follow %q", out.Next, after)
		}
		after = out.Next
	}
}

// sendReady sends GET /readyz.
func (s *conn) sendReady(ctx context.Context) error {
	_, err := s.do(ctx, call{method: http.MethodGet, path: "/readyz"}, nil)
	return err
}

// sendOpenSession sends POST /v1/sessions.
func (s *conn) sendOpenSession(ctx context.Context, ttl time.Duration) (string, error) {
	var sj httpwire.Session
	if _, err := s.do(ctx, call{method: http.MethodPost, path: "/v1/sessions", body: httpwire.SessionBody{TTLMS: httpwire.CeilMS(ttl)}}, &sj); err != nil {
		return "", err
	}
	return sj.ID, nil
}

// sendKeepalive sends POST /v1/sessions/{id}/keepalive.
func (s *conn) sendKeepalive(ctx context.Context, id string) error {
	_, err := s.do(ctx, call{method: http.MethodPost, path: "/v1/sessions/" + url.PathEscape(id) + "/keepalive", replayable: true}, nil)
	return err
}

// sendCloseSession sends DELETE /v1/sessions/{id}.
func (s *conn) sendCloseSession(ctx context.Context, id string) error {
	_, err := s.do(ctx, call{method: http.MethodDelete, path: "/v1/sessions/" + url.PathEscape(id), replayable: true}, nil)
	return err
}
