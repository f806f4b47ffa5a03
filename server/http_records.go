package server

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/httpwire"
)

// Versioned records over HTTP (see docs/http-api.md, "Records"):
//
//	GET    /v1/records/{key}       the value (raw bytes, or JSON with Accept: application/json), ETag: "<version>"
//	PUT    /v1/records/{key}       the body is the value; If-Match: "<version>" (update) or If-None-Match: * (create)
//	DELETE /v1/records/{key}       If-Match: "<version>"
//	POST   /v1/records/{key}/add   {"delta": n} → {"key", "value", "version"}
//	POST   /v1/txn                 {"if": [...], "then": [...]} → {"versions": {...}}
//
// A write without a precondition is refused with 428: every update says
// which version it replaces, so that no writer silently overwrites
// another. A version that does not match is 412 (409 in a transaction,
// whose conditions are in its body), with the current version.

// httpCheckKey is httpCheckName for a record key: the same rules, with
// errors naming the key.
func httpCheckKey(key string) error { return asKey(httpCheckName(key)) }

// asKey names the key in a name check's error.
func asKey(err error) error {
	var inv *leasehold.InvalidError
	if errors.As(err, &inv) && inv.Field == "name" {
		return &leasehold.InvalidError{Field: "key", Reason: inv.Reason}
	}
	return err
}

// records returns the backend's records; when it keeps none it answers
// 501.
func (h *httpAPI) records(q *httpReq) (leasehold.RecordStore, bool) {
	rs, ok := unwrapBackend(h.b).(leasehold.RecordStore)
	if !ok {
		h.recordFail(q, ErrRecordsUnsupported, 0)
		return nil, false
	}
	return rs, true
}

// httpTagVersion parses a strong entity tag "<version>"; weak is whether
// it had the W/ prefix.
func httpTagVersion(tag string) (version uint64, weak, ok bool) {
	tag = strings.TrimSpace(tag)
	if t, found := strings.CutPrefix(tag, "W/"); found {
		weak, tag = true, t
	}
	if len(tag) < 3 || tag[0] != '"' || tag[len(tag)-1] != '"' {
		return 0, weak, false
	}
	v, err := strconv.ParseUint(tag[1:len(tag)-1], 10, 64)
	if err != nil || v == 0 {
		return 0, weak, false
	}
	return v, weak, true
}

// httpNoneMatch reports whether an If-None-Match list (of a GET) matches
// version: "*" or one of its tags, compared weakly.
func httpNoneMatch(list string, version uint64) bool {
	for _, t := range strings.Split(list, ",") {
		if strings.TrimSpace(t) == "*" {
			return true
		}
		if v, _, ok := httpTagVersion(t); ok && v == version {
			return true
		}
	}
	return false
}

// recordExpect reads the precondition of a write: If-Match: "<version>"
// (update that version) or If-None-Match: * (create only, version 0).
// Without one it answers 428; a malformed one is 400.
func (h *httpAPI) recordExpect(q *httpReq, createOK bool) (uint64, bool) {
	im := strings.TrimSpace(strings.Join(q.r.Header.Values("If-Match"), ","))
	inm := strings.TrimSpace(strings.Join(q.r.Header.Values("If-None-Match"), ","))
	bad := func(field, reason string) (uint64, bool) {
		h.fail(q, &leasehold.InvalidError{Field: field, Reason: reason})
		return 0, false
	}
	switch {
	case im != "" && inm != "":
		return bad("If-Match", "give If-Match or If-None-Match, not both")
	case inm != "":
		if !createOK {
			return bad("If-None-Match", `not accepted here; give If-Match: "N"`)
		}
		if inm != "*" {
			return bad("If-None-Match", `only * (create if absent) is accepted on a write; to update, give If-Match: "N"`)
		}
		return 0, true
	case im != "":
		if im == "*" {
			return bad("If-Match", `* is not accepted: give the version the write replaces (the ETag of your read, such as "7")`)
		}
		if strings.Contains(im, ",") {
			return bad("If-Match", "give exactly one entity tag")
		}
		v, weak, ok := httpTagVersion(im)
		switch {
		case weak:
			return bad("If-Match", "a weak entity tag never matches; give the strong ETag of your read")
		case !ok:
			return bad("If-Match", fmt.Sprintf(`%q is not an entity tag of a record version (such as "7", the ETag of a read)`, im))
		}
		return v, true
	}
	detail := `this write needs a precondition: If-Match: "N" (the ETag of your read) to update, or If-None-Match: * to create`
	if !createOK {
		detail = `this delete needs a precondition: If-Match: "N" (the ETag of your read)`
	}
	h.problem(q, http.StatusPreconditionRequired, httpwire.PreconditionRequired, "Precondition required", detail, nil)
	return 0, false
}

// httpWantsJSON reports whether the client asked for JSON: Accept lists
// application/json with a non-zero quality.
func httpWantsJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || mt != "application/json" {
				continue
			}
			if qv, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(qv, 64); err != nil || f <= 0 {
					continue
				}
			}
			return true
		}
	}
	return false
}

func (h *httpAPI) getRecord(q *httpReq, key string) {
	rs, ok := h.records(q)
	if !ok {
		return
	}
	rec, err := rs.GetRecord(q.r.Context(), key)
	if err != nil {
		h.recordFail(q, err, 0)
		return
	}
	hdr := q.w.Header()
	hdr.Set("ETag", httpwire.ETag(rec.Version))
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Vary", "Accept")
	if inm := strings.Join(q.r.Header.Values("If-None-Match"), ","); inm != "" && httpNoneMatch(inm, rec.Version) {
		q.w.WriteHeader(http.StatusNotModified)
		return
	}
	if httpWantsJSON(q.r) {
		h.json(q, http.StatusOK, httpwire.RecordOf(rec))
		return
	}
	hdr.Set("Content-Type", "application/octet-stream")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Length", strconv.Itoa(len(rec.Value)))
	q.w.WriteHeader(http.StatusOK)
	if q.r.Method != http.MethodHead {
		q.w.Write(rec.Value)
	}
}

// recordWrite checks a PUT (createOK) or DELETE of key before it is made:
// the workflow guard, the precondition (recordExpect) and the store's
// records, which it returns with the expected version.
func (h *httpAPI) recordWrite(q *httpReq, key string, createOK bool) (leasehold.RecordStore, uint64, bool) {
	if !h.workflowWrite(q, key) {
		return nil, 0, false
	}
	expect, ok := h.recordExpect(q, createOK)
	if !ok {
		return nil, 0, false
	}
	rs, ok := h.records(q)
	return rs, expect, ok
}

func (h *httpAPI) putRecord(q *httpReq, key string) {
	rs, expect, ok := h.recordWrite(q, key, true)
	if !ok {
		return
	}
	value, ok := h.readValue(q)
	if !ok {
		return
	}
	v, err := rs.PutRecord(q.r.Context(), key, value, expect)
	if err != nil {
		h.recordFail(q, err, http.StatusPreconditionFailed)
		return
	}
	q.w.Header().Set("ETag", httpwire.ETag(v))
	status := http.StatusOK
	if expect == 0 {
		status = http.StatusCreated
	}
	h.json(q, status, httpwire.Version{Key: key, Version: v})
}

// readValue reads a PUT's body: the value, byte for byte, whatever its
// Content-Type. A compressed body (Content-Encoding) gets 415.
func (h *httpAPI) readValue(q *httpReq) ([]byte, bool) {
	if ce := q.r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		h.problem(q, http.StatusUnsupportedMediaType, httpwire.UnsupportedMediaType, "Unsupported media type",
			fmt.Sprintf("the body is stored as sent: send it without Content-Encoding (got %q)", ce), nil)
		return nil, false
	}
	limit := min(h.maxBody, leasehold.MaxValueLen)
	// The body's deadline is bodyDeadline's (BodyTimeout from the
	// request's start): it is cleared once the body was read to its end
	// and stays set otherwise, so net/http's drain of an unread rest
	// after the answer is bounded too.
	value, err := io.ReadAll(http.MaxBytesReader(q.w, q.r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.problem(q, http.StatusRequestEntityTooLarge, httpwire.TooLarge, "Request body too large",
				fmt.Sprintf("record values are limited to %d bytes", limit), nil)
			return nil, false
		}
		h.fail(q, &leasehold.InvalidError{Field: "body", Reason: "reading the request body: " + err.Error()})
		return nil, false
	}
	return value, true
}

func (h *httpAPI) deleteRecord(q *httpReq, key string) {
	rs, expect, ok := h.recordWrite(q, key, false)
	if !ok {
		return
	}
	if err := rs.DeleteRecord(q.r.Context(), key, expect); err != nil {
		h.recordFail(q, err, http.StatusPreconditionFailed)
		return
	}
	q.w.WriteHeader(http.StatusNoContent)
}

func (h *httpAPI) addRecord(q *httpReq, key string) {
	if !h.workflowWrite(q, key) {
		return
	}
	var body httpwire.AddBody
	if !h.decode(q, &body) {
		return
	}
	if body.Delta == nil {
		h.fail(q, &leasehold.InvalidError{Field: "delta", Reason: "required (an integer to add)"})
		return
	}
	rs, ok := h.records(q)
	if !ok {
		return
	}
	n, v, err := rs.AddCounter(q.r.Context(), key, *body.Delta)
	if err != nil {
		h.recordFail(q, err, http.StatusConflict)
		return
	}
	q.w.Header().Set("ETag", httpwire.ETag(v))
	h.json(q, http.StatusOK, httpwire.Counter{Key: key, Value: n, Version: v})
}

// txn serves POST /v1/txn (the route table's preamble has authenticated
// the caller). The caller needs read access to every key it
// conditions on and write access to every key it writes; every check is
// made before anything is done.
func (h *httpAPI) txn(q *httpReq) {
	var body httpwire.TxnBody
	if !h.decode(q, &body) {
		return
	}
	txn, err := body.Txn(httpCheckKey)
	if err == nil {
		err = txn.Validate()
	}
	if err != nil {
		h.fail(q, err)
		return
	}
	for _, c := range txn.If {
		if !h.allow(q, c.Key, AccessRead) {
			return
		}
	}
	for _, w := range txn.Then {
		if !h.allow(q, w.Key, AccessWrite) || !h.workflowWrite(q, w.Key) {
			return
		}
	}
	rs, ok := h.records(q)
	if !ok {
		return
	}
	res, err := rs.Txn(q.r.Context(), txn)
	if err != nil {
		h.recordFail(q, err, http.StatusConflict)
		return
	}
	if res.Versions == nil {
		res.Versions = map[string]uint64{}
	}
	h.json(q, http.StatusOK, httpwire.TxnResult{Versions: res.Versions})
}

// recordFail answers with the problem a record operation's error stands
// for. A version conflict is conflictStatus: 412 when the condition came
// in If-Match or If-None-Match, 409 when it was in a transaction's body.
func (h *httpAPI) recordFail(q *httpReq, err error, conflictStatus int) {
	q.err = err
	var ce *leasehold.ConflictError
	switch {
	case errors.As(err, &ce) && conflictStatus == http.StatusPreconditionFailed:
		h.problem(q, http.StatusPreconditionFailed, httpwire.PreconditionFailed, "Precondition failed",
			ce.Error()+"; nothing was changed", httpwire.ConflictMembers(ce))
	case errors.As(err, &ce):
		h.problem(q, http.StatusConflict, httpwire.Conflict, "Version conflict",
			ce.Error()+"; nothing was changed", httpwire.ConflictMembers(ce))
	case errors.Is(err, leasehold.ErrNotFound):
		h.problem(q, http.StatusNotFound, httpwire.NotFound, "Not found", "no record with that key", nil)
	case errors.Is(err, ErrRecordsUnsupported):
		h.problem(q, http.StatusNotImplemented, httpwire.RecordsUnsupported, "Records not supported", ErrRecordsUnsupported.Error(), nil)
	case errors.Is(err, leasehold.ErrTxnUnsupported):
		h.problem(q, http.StatusNotImplemented, httpwire.TxnUnsupported, "Transactions not supported", leasehold.ErrTxnUnsupported.Error(), nil)
	default:
		h.fail(q, err)
	}
}
