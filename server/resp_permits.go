package server

import (
	"bytes"
	"fmt"

	"github.com/leasehold/leasehold/wire/resp"
)

// LH.SEMACQUIRE name owner permits ttl_ms [DATA d] [REQID id] [WAIT ms]
// [SESSION id]: one of the permits of semaphore name, as POST
// /v1/semaphores/{name}/acquire. The preamble has checked write access on
// permit 0 (name/permit/0); the others are checked here. The reply is
// [permit, grant]: the permit's index, then the grant as LH.ACQUIRE's.
func (c *respConn) semAcquire(a *respArgs) {
	var req AcquireRequest
	sem := a.name
	req.Owner = string(a.pos[1])
	n64, ok := resp.ParseInt(a.pos[2])
	var err error
	n := int(min(max(n64, -1), 1<<20))
	if !ok {
		err = invalid("permits", "%q is not an integer", printable(a.pos[2]))
	}
	if err == nil {
		err = validatePermits(sem, n)
	}
	if err == nil {
		req.TTL, err = parseMillis(a.pos[3], "ttl")
	}
	if v := a.opt[0]; len(v) > 0 { // DATA
		req.Data = bytes.Clone(v)
	}
	req.RequestID = string(a.opt[1]) // REQID
	if a.has[2] && err == nil {      // WAIT
		if req.Wait, err = parseMillis(a.opt[2], "wait"); err == nil && (req.Wait < 0 || req.Wait > MaxWait) {
			err = invalid("wait", "must be in [0, %d] ms (wait longer by repeating the command)", MaxWait.Milliseconds())
		}
	}
	if a.has[3] { // SESSION
		if req.Session = string(a.opt[3]); req.Session == "" && err == nil {
			err = invalid("session", "must not be empty")
		}
	}
	req.Name = httpPermitName(sem, 0)
	if err == nil {
		err = req.AcquireRequest.Validate()
	}
	if err == nil {
		err = checkAcquire(c.ident, &req)
	}
	if err != nil {
		c.replyErr(err)
		return
	}
	for i := 1; i < n; i++ {
		if p := httpPermitName(sem, i); !c.ident.Allowed(p, AccessWrite) {
			id := "anonymous"
			if c.ident != nil {
				id = c.ident.Name
			}
			c.replyError(fmt.Sprintf("%s identity %q may not acquire %q", resp.CodeNoPerm, id, p))
			return
		}
	}
	ctx, ok := c.acquireContext(req)
	if !ok {
		return
	}
	srv, resp3 := c.srv, c.resp3
	c.async(req.Name, req.Wait > 0, func(b []byte) []byte {
		rec, err := acquirePermit(ctx, srv.b, sem, n, req)
		if err != nil {
			return srv.appendErr(b, err)
		}
		i, _ := httpPermitIndex(sem, rec.Name)
		b = resp.AppendArray(b, 2)
		b = resp.AppendInt(b, int64(i))
		return srv.appendGrant(b, &rec, resp3)
	})
}
