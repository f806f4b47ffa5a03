package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/resp"
)

// RESPError is a refusal by the server that has no error of its own in
// package leasehold: authentication (NOAUTH, WRONGPASS: ErrUnauthorized),
// permission (NOPERM: ErrForbidden), rate limit (RATELIMITED:
// ErrRateLimited; nothing was changed), quota (QUOTA: ErrQuotaExceeded;
// nothing was changed), session (NOSESSION: ErrNoSession),
// or anything else (ERR; a shutting-down server matches ErrUnavailable).
type RESPError struct {
	Code string // the reply's first word
	Msg  string // the whole reply
}

func (e *RESPError) Error() string { return "leasehold server: " + e.Msg }

// Is matches the package's sentinel errors by code.
func (e *RESPError) Is(target error) bool {
	switch e.Code {
	case resp.CodeNoAuth, resp.CodeWrongPass:
		return target == ErrUnauthorized
	case resp.CodeNoPerm:
		return target == ErrForbidden
	case resp.CodeRateLimited:
		return target == ErrRateLimited
	case resp.CodeQuota:
		return target == ErrQuotaExceeded
	case resp.CodeNoSession:
		return target == ErrNoSession
	case resp.CodeBadProof:
		return target == ErrBadProof || target == leasehold.ErrNotHeld
	case resp.CodeErr:
		return target == ErrUnavailable && e.Msg == "ERR the server is shutting down"
	}
	return false
}

// replyErr decodes an error reply.
func replyErr(msg []byte, name string) error {
	err := resp.ParseError(msg, name)
	var se *resp.ServerError
	if errors.As(err, &se) {
		return &RESPError{Code: se.Code, Msg: se.Msg}
	}
	return err
}

// mapErr translates the client's own errors.
func (s *RESPStore) mapErr(err error) error {
	var ce *resp.ConnError
	switch {
	case errors.Is(err, resp.ErrClientClosed) && s.closed.Load():
		return leasehold.ErrClosed
	case errors.As(err, &ce):
		return fmt.Errorf("leasehold server %s: %w", s.addr, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	var re *RESPError
	var he *leasehold.HeldError
	var ie *leasehold.InvalidError
	if errors.As(err, &re) || errors.As(err, &he) || errors.As(err, &ie) ||
		errors.Is(err, leasehold.ErrNotHeld) || errors.Is(err, leasehold.ErrNotFound) {
		return err
	}
	return fmt.Errorf("leasehold server %s: %w", s.addr, err)
}

func expectOK(name string) func(v resp.Value) error {
	return func(v resp.Value) error {
		switch {
		case v.Type == resp.Error:
			return replyErr(v.Str, name)
		case v.Type != resp.SimpleString || string(v.Str) != "OK":
			return fmt.Errorf("unexpected reply to a command expecting OK")
		}
		return nil
	}
}

func appendAcquire(b []byte, req *leasehold.AcquireRequest, session string, wait time.Duration) []byte {
	return appendAcquireCmd(b, req, "", 0, session, wait, false)
}

// appendAcquireCmd appends LH.ACQUIRE of req, or (n > 0) LH.SEMACQUIRE of
// one of the n permits of sem; giveUp sends the request id as GIVEUP's
// instead of REQID's (LH.ACQUIRE only).
func appendAcquireCmd(b []byte, req *leasehold.AcquireRequest, sem string, permits int, session string, wait time.Duration, giveUp bool) []byte {
	n := 4
	if permits > 0 {
		n++
	}
	if len(req.Data) > 0 {
		n += 2
	}
	if req.RequestID != "" {
		n += 2
	}
	if wait > 0 {
		n += 2
	}
	if session != "" {
		n += 2
	}
	b = resp.AppendArray(b, n)
	if permits > 0 {
		b = resp.AppendBulkString(b, "LH.SEMACQUIRE")
		b = resp.AppendBulkString(b, sem)
		b = resp.AppendBulkString(b, req.Owner)
		b = resp.AppendBulkInt(b, int64(permits))
	} else {
		b = resp.AppendBulkString(b, "LH.ACQUIRE")
		b = resp.AppendBulkString(b, req.Name)
		b = resp.AppendBulkString(b, req.Owner)
	}
	b = resp.AppendBulkInt(b, resp.Millis(req.TTL))
	if len(req.Data) > 0 {
		b = resp.AppendBulkString(b, "DATA")
		b = resp.AppendBulk(b, req.Data)
	}
	if req.RequestID != "" {
		b = resp.AppendBulkString(b, map[bool]string{false: "REQID", true: "GIVEUP"}[giveUp])
		b = resp.AppendBulkString(b, req.RequestID)
	}
	if wait > 0 {
		b = resp.AppendBulkString(b, "WAIT")
		b = resp.AppendBulkInt(b, max(resp.Millis(wait), 1))
	}
	if session != "" {
		b = resp.AppendBulkString(b, "SESSION")
		b = resp.AppendBulkString(b, session)
	}
	return b
}

// acquireReply decodes the reply to LH.ACQUIRE into rec and the grant's
// secret (if the server gives one).
func acquireReply(req *leasehold.AcquireRequest, rec *leasehold.Record, secret *string) func(v resp.Value) error {
	return func(v resp.Value) error {
		if v.Type == resp.Error {
			return replyErr(v.Str, req.Name)
		}
		rec.Name, rec.Owner = req.Name, req.Owner
		var err error
		*secret, err = resp.DecodeGrant(v, rec)
		return err
	}
}

func secretArgs(secret string) int {
	if secret == "" {
		return 0
	}
	return 2
}

func appendSecret(b []byte, secret string) []byte {
	if secret == "" {
		return b
	}
	b = resp.AppendBulkString(b, "SECRET")
	return resp.AppendBulkString(b, secret)
}

func recordReply(name string, rec *leasehold.Record) func(v resp.Value) error {
	return func(v resp.Value) error {
		switch {
		case v.Type == resp.Error:
			return replyErr(v.Str, name)
		case v.Null:
			return leasehold.ErrNotFound
		}
		return resp.DecodeRecord(v, rec)
	}
}

// --- the transport of the client core (core.go) ---

var _ transport = (*RESPStore)(nil)

// sendAcquire sends LH.ACQUIRE: a try is pipelined; a wait (WAIT) runs on
// a dedicated connection, bounded by the wait plus the store's timeout,
// and its reply, if ctx ends first, is still read: late gets it.
func (s *RESPStore) sendAcquire(ctx context.Context, req *leasehold.AcquireRequest, session string, wait time.Duration, late func(grant, error)) (grant, error) {
	var g grant
	enc := func(b []byte) []byte { return appendAcquire(b, req, session, wait) }
	dec := acquireReply(req, &g.rec, &g.secret)
	if err := s.doAcquire(ctx, wait, enc, dec, &g, late); err != nil {
		return grant{}, s.mapErr(err)
	}
	return g, nil
}

// sendGiveUp sends LH.ACQUIRE with GIVEUP (pipelined: it never waits).
func (s *RESPStore) sendGiveUp(ctx context.Context, req *leasehold.AcquireRequest) (grant, error) {
	var g grant
	enc := func(b []byte) []byte { return appendAcquireCmd(b, req, "", 0, "", 0, true) }
	if err := s.cl.Do(ctx, enc, acquireReply(req, &g.rec, &g.secret)); err != nil {
		return grant{}, s.mapErr(err)
	}
	return g, nil
}

// doAcquire sends an acquire command: at once without wait, else as a
// blocking command that may outlive ctx, whose reply late gets (with g as
// dec filled it) when it comes after the caller gave up.
func (s *RESPStore) doAcquire(ctx context.Context, wait time.Duration, enc func([]byte) []byte, dec func(resp.Value) error, g *grant, late func(grant, error)) error {
	if wait == 0 {
		return s.cl.Do(ctx, enc, dec)
	}
	var lateReply func(error)
	if late != nil {
		lateReply = func(err error) { late(*g, err) }
	}
	return s.cl.DoBlocking(ctx, wait+s.timeout, enc, dec, lateReply)
}

// sendPermit sends LH.SEMACQUIRE, as sendAcquire sends LH.ACQUIRE. A
// server without the command (an older one) is errors.ErrUnsupported.
func (s *RESPStore) sendPermit(ctx context.Context, sem string, n int, req *leasehold.AcquireRequest, session string, wait time.Duration, late func(grant, error)) (grant, error) {
	var g grant
	enc := func(b []byte) []byte { return appendAcquireCmd(b, req, sem, n, session, wait, false) }
	dec := func(v resp.Value) error {
		if v.Type == resp.Error {
			if bytes.HasPrefix(v.Str, []byte("ERR unknown command")) {
				return fmt.Errorf("leasehold server %s has no LH.SEMACQUIRE: %w", s.addr, errors.ErrUnsupported)
			}
			return replyErr(v.Str, sem)
		}
		if v.Type != resp.Array || len(v.Array) != 2 || v.Array[0].Type != resp.Integer || v.Array[0].Int < 0 || v.Array[0].Int >= int64(n) {
			return fmt.Errorf("unexpected reply to LH.SEMACQUIRE: want [permit, grant]")
		}
		g.rec.Name, g.rec.Owner = permitName(sem, int(v.Array[0].Int)), req.Owner
		var err error
		g.secret, err = resp.DecodeGrant(v.Array[1], &g.rec)
		return err
	}
	if err := s.doAcquire(ctx, wait, enc, dec, &g, late); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return grant{}, err
		}
		return grant{}, s.mapErr(err)
	}
	return g, nil
}

// sendHolder sends LH.RENEW with ttl, or LH.RELEASE (ttl 0), with SECRET
// unless secret is "".
func (s *RESPStore) sendHolder(ctx context.Context, name, owner string, token uint64, ttl time.Duration, secret string) error {
	cmd := "LH.RELEASE"
	n := 4 + secretArgs(secret)
	if ttl > 0 {
		cmd = "LH.RENEW"
		n++
	}
	err := s.cl.Do(ctx, func(b []byte) []byte {
		b = resp.AppendArray(b, n)
		b = resp.AppendBulkString(b, cmd)
		b = resp.AppendBulkString(b, name)
		b = resp.AppendBulkString(b, owner)
		b = resp.AppendBulkInt(b, int64(token))
		if ttl > 0 {
			b = resp.AppendBulkInt(b, resp.Millis(ttl))
		}
		return appendSecret(b, secret)
	}, expectOK(name))
	if err != nil {
		return s.mapErr(err)
	}
	return nil
}

// sendLease sends LH.GET, or LH.FORCERELEASE with force, and returns the
// record it answers (a null answer is leasehold.ErrNotFound).
func (s *RESPStore) sendLease(ctx context.Context, name string, force bool) (leasehold.Record, error) {
	cmd := "LH.GET"
	if force {
		cmd = "LH.FORCERELEASE"
	}
	var rec leasehold.Record
	err := s.cl.Do(ctx, func(b []byte) []byte { return resp.AppendCommand(b, cmd, name) }, recordReply(name, &rec))
	if err != nil {
		return leasehold.Record{}, s.mapErr(err)
	}
	return rec, nil
}

// sendList reads the leases page by page with LH.SCAN.
func (s *RESPStore) sendList(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	out := []leasehold.Record{}
	cursor := "0"
	for {
		var next string
		err := s.cl.Do(ctx, func(b []byte) []byte {
			return resp.AppendCommand(b, "LH.SCAN", prefix, cursor, "COUNT", strconv.Itoa(scanCount))
		}, func(v resp.Value) error {
			if v.Type == resp.Error {
				return replyErr(v.Str, prefix)
			}
			if v.Type != resp.Array || v.Null || len(v.Array) != 2 || v.Array[0].Type != resp.BulkString ||
				v.Array[0].Null || v.Array[1].Type != resp.Array || v.Array[1].Null {
				return errors.New("unexpected reply to LH.SCAN: not [cursor, [records]]")
			}
			next = string(v.Array[0].Str)
			for _, e := range v.Array[1].Array {
				var rec leasehold.Record
				if err := resp.DecodeRecord(e, &rec); err != nil {
					return err
				}
				out = append(out, rec)
			}
			return nil
		})
		if err != nil {
			return nil, s.mapErr(err)
		}
		if next == "0" {
			return out, nil
		}
		if next == cursor {
			return nil, fmt.Errorf("leasehold server %s: LH.SCAN returned the cursor it was given", s.addr)
		}
		cursor = next
	}
}

// scanCount is List's LH.SCAN page size.
const scanCount = 5000

func (s *RESPStore) sendReady(ctx context.Context) error {
	err := s.cl.Do(ctx, func(b []byte) []byte { return resp.AppendCommand(b, "LH.READY") }, expectOK(""))
	if err != nil {
		return s.mapErr(err)
	}
	return nil
}

// sendOpenSession sends LH.SESSION OPEN.
func (s *RESPStore) sendOpenSession(ctx context.Context, ttl time.Duration) (string, error) {
	var id string
	err := s.cl.Do(ctx, func(b []byte) []byte {
		b = resp.AppendArray(b, 3)
		b = resp.AppendBulkString(b, "LH.SESSION")
		b = resp.AppendBulkString(b, "OPEN")
		// Rounded up, as the HTTP store does: the server's session must not
		// end before the deadline the client keeps for it.
		return resp.AppendBulkInt(b, resp.CeilMillis(ttl))
	}, func(v resp.Value) error {
		switch {
		case v.Type == resp.Error:
			return replyErr(v.Str, "")
		case v.Type != resp.BulkString || v.Null || len(v.Str) == 0:
			return errors.New("unexpected reply to LH.SESSION OPEN")
		}
		id = string(v.Str)
		return nil
	})
	if err != nil {
		return "", s.mapErr(err)
	}
	return id, nil
}

// sendKeepalive sends LH.SESSION KEEPALIVE.
func (s *RESPStore) sendKeepalive(ctx context.Context, id string) error {
	err := s.cl.Do(ctx, func(b []byte) []byte {
		return resp.AppendCommand(b, "LH.SESSION", "KEEPALIVE", id)
	}, func(v resp.Value) error {
		if v.Type == resp.Error {
			return replyErr(v.Str, "")
		}
		return nil
	})
	if err != nil {
		return s.mapErr(err)
	}
	return nil
}

// sendCloseSession sends LH.SESSION CLOSE.
func (s *RESPStore) sendCloseSession(ctx context.Context, id string) error {
	err := s.cl.Do(ctx, func(b []byte) []byte {
		return resp.AppendCommand(b, "LH.SESSION", "CLOSE", id)
	}, expectOK(""))
	if err != nil {
		return s.mapErr(err)
	}
	return nil
}
