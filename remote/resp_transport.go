package remote

import (
	"context"
	"errors"
	"fmt"
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

func (s *RESPStore) check() error {
	if s.closed.Load() {
		return leasehold.ErrClosed
	}
	return nil
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
	n := 4
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
	b = resp.AppendBulkString(b, "LH.ACQUIRE")
	b = resp.AppendBulkString(b, req.Name)
	b = resp.AppendBulkString(b, req.Owner)
	b = resp.AppendBulkInt(b, resp.Millis(req.TTL))
	if len(req.Data) > 0 {
		b = resp.AppendBulkString(b, "DATA")
		b = resp.AppendBulk(b, req.Data)
	}
	if req.RequestID != "" {
		b = resp.AppendBulkString(b, "REQID")
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
