package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/leasehold/leasehold/storekit"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/resp"
)

// The lease commands (rows in resp_table.go). The preamble has checked
// their arity, options, name and permission; each parses the rest of its
// arguments on the reader goroutine (bad input is answered at once and
// changes nothing), then runs on the backend asynchronously.

func invalid(field, format string, args ...any) error {
	return &leasehold.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// parseMillis reads a duration given in milliseconds.
func parseMillis(b []byte, field string) (time.Duration, error) {
	n, ok := resp.ParseInt(b)
	if !ok {
		return 0, invalid(field, "%q is not an integer number of milliseconds", printable(b))
	}
	const limit = (1<<63 - 1) / int64(time.Millisecond)
	n = max(min(n, limit), -limit)
	return time.Duration(n) * time.Millisecond, nil
}

func parseToken(b []byte) (uint64, error) {
	n, ok := resp.ParseInt(b)
	if !ok || n < 0 {
		return 0, invalid("token", "%q is not a fencing token (a positive integer)", printable(b))
	}
	return uint64(n), nil
}

// giveUpOption reads LH.ACQUIRE's GIVEUP id (option 4 of a), the request
// id whose wait is given up, once the other options are read: a REQID
// beside it must be the same, and it takes no WAIT (but 0) and no SESSION.
func giveUpOption(req *AcquireRequest, a *respArgs) error {
	id := a.opt[4]
	switch {
	case len(id) == 0:
		return invalid("giveup", "needs the request id of the wait to give up")
	case a.has[1] && req.RequestID != string(id):
		return invalid("giveup", "names request id %q, REQID %q", printable(id), printable(a.opt[1]))
	case req.Wait != 0:
		return invalid("giveup", "takes no WAIT")
	case req.Session != "":
		return invalid("giveup", "takes no SESSION (the grant it finds is released)")
	}
	req.RequestID, req.GiveUp = string(id), true
	return nil
}

// LH.ACQUIRE name owner ttl_ms [DATA d] [REQID id] [WAIT ms] [SESSION id] [GIVEUP id]
func (c *respConn) acquire(a *respArgs) {
	var req AcquireRequest
	req.Name, req.Owner = a.name, string(a.pos[1])
	ttl, err := parseMillis(a.pos[2], "ttl")
	if err != nil {
		c.replyErr(err)
		return
	}
	req.TTL = ttl
	if v := a.opt[0]; len(v) > 0 { // DATA
		req.Data = bytes.Clone(v)
	}
	req.RequestID = string(a.opt[1]) // REQID
	if a.has[2] {                    // WAIT
		if req.Wait, err = parseMillis(a.opt[2], "wait"); err == nil && (req.Wait < 0 || req.Wait > MaxWait) {
			// As HTTP's wait_ms: wait longer by repeating the command.
			err = invalid("wait", "must be in [0, %d] ms (wait longer by repeating the command)", MaxWait.Milliseconds())
		}
	}
	if a.has[3] { // SESSION
		if req.Session = string(a.opt[3]); req.Session == "" && err == nil {
			err = invalid("session", "must not be empty")
		}
	}
	if a.has[4] && err == nil { // GIVEUP id: the wait of request id to give up
		err = giveUpOption(&req, a)
	}
	if err == nil {
		err = req.AcquireRequest.Validate()
	}
	if err == nil {
		err = validateGiveUp(req)
	}
	if err == nil {
		err = checkAcquire(c.ident, &req)
	}
	if err != nil {
		c.replyErr(err)
		return
	}
	ctx, ok := c.acquireContext(req)
	if !ok {
		return
	}
	srv, resp3 := c.srv, c.resp3
	reply := func(b []byte, rec *leasehold.Record, err error) []byte {
		if err != nil {
			return srv.appendErr(b, err)
		}
		return srv.appendGrant(b, rec, resp3)
	}
	if srv.async != nil && req.Wait <= 0 {
		if d, ok := c.out.Direct(req.Name); ok {
			srv.async.AcquireAsync(ctx, req, func(rec leasehold.Record, err error) {
				d.Fill(func(b []byte) []byte { return reply(b, &rec, err) })
			})
			return
		}
	}
	c.async(req.Name, req.Wait > 0, func(b []byte) []byte {
		rec, err := srv.b.Acquire(ctx, req)
		return reply(b, &rec, err)
	})
}

// appendGrant appends the reply to a successful LH.ACQUIRE: with holder
// proofs on, the grant and its secret. No other reply carries the secret.
func (s *RESPServer) appendGrant(b []byte, rec *leasehold.Record, resp3 bool) []byte {
	if h := s.opts.Holders; h != nil {
		secret := h.Secret(rec.Name, rec.Owner, rec.Token)
		if resp3 {
			return resp.AppendGrantMapSecret(b, rec, secret)
		}
		return resp.AppendGrantSecret(b, rec, secret)
	}
	if resp3 {
		return resp.AppendGrantMap(b, rec)
	}
	return resp.AppendGrant(b, rec)
}

// badProof is the reply to a renew or release whose secret does not
// prove holding the grant.
const badProof = resp.CodeBadProof + " the holder proof (secret) does not match the grant"

// holder parses "name owner token [SECRET s]" and checks it, the secret
// included; on failure it replies (BADPROOF for the secret).
func (c *respConn) holder(a *respArgs) (owner string, token uint64, ok bool) {
	owner = string(a.pos[1])
	token, err := parseToken(a.pos[2])
	if err == nil {
		err = storekit.ValidateHolder(a.name, owner, token)
	}
	if err == nil && a.has[0] && len(a.opt[0]) == 0 {
		err = invalid("secret", "must not be empty")
	}
	if err != nil {
		c.replyErr(err)
		return "", 0, false
	}
	if c.srv.opts.Holders.Check(a.name, owner, token, string(a.opt[0])) != nil {
		c.replyError(badProof)
		return "", 0, false
	}
	return owner, token, true
}

// LH.RENEW name owner token ttl_ms [SECRET s]
func (c *respConn) renew(a *respArgs) {
	ttl, err := parseMillis(a.pos[3], "ttl")
	if err == nil {
		err = storekit.ValidateTTL(ttl)
	}
	if err != nil {
		c.replyErr(err)
		return
	}
	owner, token, ok := c.holder(a)
	if !ok || !c.workflowWrite("renew", a.name) {
		return
	}
	srv, ctx, name := c.srv, c.ctx, a.name
	c.async(name, false, func(b []byte) []byte {
		if err := srv.b.Renew(ctx, name, owner, token, ttl); err != nil {
			return srv.appendErr(b, err)
		}
		return append(b, "+OK\r\n"...)
	})
}

// LH.RELEASE name owner token [SECRET s]
func (c *respConn) release(a *respArgs) {
	owner, token, ok := c.holder(a)
	if !ok || !c.workflowWrite("release", a.name) {
		return
	}
	srv, ctx, name := c.srv, c.ctx, a.name
	reply := func(b []byte, err error) []byte {
		if err != nil {
			return srv.appendErr(b, err)
		}
		return append(b, "+OK\r\n"...)
	}
	if srv.async != nil {
		if d, ok := c.out.Direct(name); ok {
			srv.async.ReleaseAsync(ctx, name, owner, token, func(err error) {
				d.Fill(func(b []byte) []byte { return reply(b, err) })
			})
			return
		}
	}
	c.async(name, false, func(b []byte) []byte {
		return reply(b, srv.b.Release(ctx, name, owner, token))
	})
}

// LH.GET name: the record, or null.
func (c *respConn) get(a *respArgs) {
	srv, ctx, resp3, name := c.srv, c.ctx, c.resp3, a.name
	c.async(name, false, func(b []byte) []byte {
		rec, err := srv.b.Get(ctx, name)
		switch {
		case errors.Is(err, leasehold.ErrNotFound) && resp3:
			return resp.AppendNull3(b)
		case errors.Is(err, leasehold.ErrNotFound):
			return resp.AppendNull(b)
		case err != nil:
			return srv.appendErr(b, err)
		}
		return appendRecord(b, &rec, resp3)
	})
}

// readable returns the live leases under prefix that id may read, sorted
// by name.
func (s *RESPServer) readable(ctx context.Context, id *Identity, prefix string) ([]leasehold.Record, error) {
	recs, err := listBounded(ctx, s.b, prefix)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, r := range recs {
		if id.Allowed(r.Name, AccessRead) {
			recs[n] = r
			n++
		}
	}
	recs = recs[:n]
	if !slices.IsSortedFunc(recs, byName) {
		slices.SortFunc(recs, byName)
	}
	return recs, nil
}

func byName(a, b leasehold.Record) int { return strings.Compare(a.Name, b.Name) }

// LH.LIST [prefix]: the live leases under prefix that the caller may read,
// sorted by name; TOOMANY when there are more than MaxList.
func (c *respConn) list(a *respArgs) {
	srv, ctx, id, resp3, prefix := c.srv, c.ctx, c.ident, c.resp3, a.name
	c.async("", false, func(b []byte) []byte {
		recs, err := srv.readable(ctx, id, prefix)
		if err != nil {
			return srv.appendErr(b, err)
		}
		if len(recs) > srv.opts.MaxList {
			return resp.AppendError(b, fmt.Sprintf("%s more than %d leases under %q; use LH.SCAN", resp.CodeTooMany, srv.opts.MaxList, prefix))
		}
		size := 0
		for i := range recs {
			size += recordBytes(&recs[i])
		}
		if size > listPageBytes {
			return resp.AppendError(b, fmt.Sprintf("%s the leases under %q come to more than %d bytes; use LH.SCAN", resp.CodeTooMany, prefix, listPageBytes))
		}
		b = resp.AppendArray(b, len(recs))
		for i := range recs {
			b = appendRecord(b, &recs[i], resp3)
		}
		return b
	})
}

// LH.SCAN's page sizes.
const (
	DefaultScanCount = 1000
	MaxScanCount     = 10000
)

// A scan cursor is "0" to start (and when done), else "n" and the last
// name returned, base64url-encoded: the next page starts after it, so a
// lease that lives through the whole scan is returned exactly once. The
// name is only compared, never used as a name: a cursor made up by the
// client can make it skip names it may read, no more.
func scanCursor(last string) string {
	return "n" + base64.RawURLEncoding.EncodeToString([]byte(last))
}

func parseScanCursor(b []byte) (after string, err error) {
	if string(b) == "0" {
		return "", nil
	}
	if len(b) < 2 || b[0] != 'n' {
		return "", invalid("cursor", "%q is not a cursor (start with 0, then pass the one LH.SCAN returned)", printable(b))
	}
	name, derr := base64.RawURLEncoding.DecodeString(string(b[1:]))
	if derr != nil || len(name) == 0 {
		return "", invalid("cursor", "%q is not a cursor (start with 0, then pass the one LH.SCAN returned)", printable(b))
	}
	return string(name), nil
}

// LH.SCAN prefix cursor [COUNT n]: [next-cursor, [records...]], at most n
// records (default DefaultScanCount) that the caller may read, sorted by
// name; next-cursor "0" when there are no more.
func (c *respConn) scan(a *respArgs) {
	after, err := parseScanCursor(a.pos[1])
	if err != nil {
		c.replyErr(err)
		return
	}
	count := DefaultScanCount
	if a.has[0] {
		n, ok := resp.ParseInt(a.opt[0])
		if !ok || n < 1 || n > MaxScanCount {
			c.replyErr(invalid("count", "%q is not a page size (an integer from 1 to %d)", printable(a.opt[0]), MaxScanCount))
			return
		}
		count = int(n)
	}
	srv, ctx, id, resp3, prefix := c.srv, c.ctx, c.ident, c.resp3, a.name
	c.async("", false, func(b []byte) []byte {
		// The page and one more lease (to know more remain): the engine
		// collects no more than that (PageLister), whatever the prefix holds.
		recs, err := listPageBounded(ctx, srv.b, prefix, after, count+1,
			func(name string) bool { return id.Allowed(name, AccessRead) })
		if err != nil {
			return srv.appendErr(b, err)
		}
		page := recs[:min(count, len(recs))]
		size := 0
		for k := range page {
			if size += recordBytes(&page[k]); size > listPageBytes && k > 0 {
				page = page[:k] // the rest on the next page
				break
			}
		}
		next := "0"
		if len(page) < len(recs) {
			next = scanCursor(page[len(page)-1].Name)
		}
		b = resp.AppendArray(b, 2)
		b = resp.AppendBulkString(b, next)
		b = resp.AppendArray(b, len(page))
		for i := range page {
			b = appendRecord(b, &page[i], resp3)
		}
		return b
	})
}

// LH.FORCERELEASE name: frees the lease whoever holds it (admin) and
// returns the grant it ended, or NOTFOUND.
func (c *respConn) forceRelease(a *respArgs) {
	srv, ctx, resp3, name := c.srv, c.ctx, c.resp3, a.name
	c.async(name, false, func(b []byte) []byte {
		rec, err := srv.b.ForceRelease(ctx, name)
		if err != nil {
			return srv.appendErr(b, err)
		}
		return appendRecord(b, &rec, resp3)
	})
}

// appendRecord appends a full record: a map of labelled fields in RESP3,
// a positional array in RESP2.
func appendRecord(b []byte, rec *leasehold.Record, resp3 bool) []byte {
	if resp3 {
		return resp.AppendRecordMap(b, rec)
	}
	return resp.AppendRecord(b, rec)
}

// acquireContext makes the checks an acquiring command (LH.ACQUIRE,
// LH.SEMACQUIRE) shares after parsing: a workflow's keys are written only
// through the workflow API, and a session must be the caller's. It replies
// and returns false when one fails; else the context the acquire runs
// under (the connection's waits' when it waits).
func (c *respConn) acquireContext(req AcquireRequest) (context.Context, bool) {
	if !c.workflowWrite("acquire", req.Name) {
		return nil, false
	}
	if req.Session != "" && !c.srv.ownsSession(c.ident, req.Session) {
		c.replyErr(ErrNoSession)
		return nil, false
	}
	if req.Wait > 0 {
		return c.waitCtx, true
	}
	return c.ctx, true
}
