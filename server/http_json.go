package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/httpwire"
	"time"
)

// Request bodies in, JSON and problem documents out.

// decode reads a JSON request body into v: at most maxBody bytes, strict
// (httpStrictJSON: UTF-8, no unknown, duplicate or case-variant keys), one
// value. Every route that takes a JSON body decodes it here. An empty body
// decodes as {}. A content type
// other than JSON gets 415; a missing one is accepted, and so is curl's
// default for -d (application/x-www-form-urlencoded), whose body must
// still be JSON. (Cross-site form posts from browsers are refused before
// this, by ServeHTTP's cross-origin checks.)
func (h *httpAPI) decode(q *httpReq, v any) bool {
	if ct := q.r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "application/x-www-form-urlencoded") {
			h.problem(q, http.StatusUnsupportedMediaType, httpwire.UnsupportedMediaType, "Unsupported media type",
				fmt.Sprintf("request bodies are JSON (Content-Type: application/json), not %q", ct), nil)
			return false
		}
	}
	// The body's read deadline (BodyTimeout) was set when the request
	// came in (bodyDeadline).
	body, err := io.ReadAll(http.MaxBytesReader(q.w, q.r.Body, h.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.problem(q, http.StatusRequestEntityTooLarge, httpwire.TooLarge, "Request body too large",
				fmt.Sprintf("request bodies are limited to %d bytes", h.maxBody), nil)
			return false
		}
		h.fail(q, &leasehold.InvalidError{Field: "body", Reason: "reading the request body: " + err.Error()})
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := httpStrictJSON(body, reflect.TypeOf(v)); err != nil {
		h.fail(q, err)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		h.fail(q, httpJSONError(err, reflect.TypeOf(v)))
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		h.fail(q, &leasehold.InvalidError{Field: "body", Reason: "more than one JSON value"})
		return false
	}
	return true
}

// httpJSONError turns an error decoding into type t into an *InvalidError
// naming the field.
func httpJSONError(err error, t reflect.Type) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := httpJSONPath(t, te.Field)
		if field == "" {
			field = "body"
		}
		return &leasehold.InvalidError{Field: field, Reason: fmt.Sprintf("want a JSON %s, got %s", te.Type, te.Value)}
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return &leasehold.InvalidError{Field: strings.Trim(f, `"`), Reason: "unknown field"}
	}
	return &leasehold.InvalidError{Field: "body", Reason: "malformed JSON: " + strings.TrimPrefix(msg, "json: ")}
}

// httpJSONPath is the JSON path of a field of t that encoding/json names
// by its Go path: without the names of embedded structs (such as the
// AcquireBody in httpwire.SemaphoreBody), whose fields are at the top.
func httpJSONPath(t reflect.Type, path string) string {
	if path == "" {
		return ""
	}
	var out []string
	for _, seg := range strings.Split(path, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) {
			t = t.Elem()
		}
		if t != nil && t.Kind() == reflect.Struct {
			if f, ok := t.FieldByName(seg); ok && f.Anonymous && f.Tag.Get("json") == "" {
				t = f.Type
				continue
			}
			fields := map[string]reflect.Type{}
			httpFields(t, fields)
			t = fields[seg]
		} else {
			t = nil
		}
		out = append(out, seg)
	}
	return strings.Join(out, ".")
}

func (h *httpAPI) json(q *httpReq, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		h.fail(q, err)
		return
	}
	q.w.Header().Set("Content-Type", "application/json")
	q.w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	h.respond(q, status, buf.Bytes())
}

// respond writes the status and body (none for HEAD) under the write
// deadline, so that a client that does not read cannot hold the answer
// in memory for longer than WriteTimeout.
func (h *httpAPI) respond(q *httpReq, status int, body []byte) {
	_ = http.NewResponseController(q.w).SetWriteDeadline(time.Now().Add(h.writeTimeout))
	q.w.WriteHeader(status)
	if q.r.Method != http.MethodHead {
		q.w.Write(body)
	}
}

// fail answers with the problem that err stands for.
func (h *httpAPI) fail(q *httpReq, err error) {
	q.err = err
	var held *leasehold.HeldError
	var inv *leasehold.InvalidError
	var quota *QuotaError
	switch {
	case errors.As(err, &quota):
		h.problem(q, http.StatusTooManyRequests, httpwire.QuotaExceeded, "Quota exceeded", quota.Error(),
			map[string]any{"resource": quota.Resource, "limit": quota.Limit})
	case errors.As(err, &held):
		h.problem(q, http.StatusConflict, httpwire.Held, "Lease held", held.Error(), httpwire.HeldMembers(held))
	case errors.Is(err, leasehold.ErrNotHeld):
		h.problem(q, http.StatusConflict, httpwire.NotHeld, "Lease not held",
			"the lease is not held by that owner and token (never granted, released, expired or taken over); nothing was changed", nil)
	case errors.Is(err, leasehold.ErrNotFound):
		h.problem(q, http.StatusNotFound, httpwire.NotFound, "Not found", "no live lease with that name", nil)
	case errors.As(err, &inv):
		h.problem(q, http.StatusBadRequest, httpwire.Invalid, "Invalid request", inv.Error(), httpwire.InvalidMembers(inv))
	case errors.Is(err, ErrBadProof):
		h.problem(q, http.StatusForbidden, httpwire.BadProof, "Bad holder proof",
			"renewing or releasing a lease needs the secret returned with its grant (\"secret\" in the acquire response); it is missing or does not match; nothing was changed", nil)
	case errors.Is(err, ErrNoSession):
		h.problem(q, http.StatusNotFound, httpwire.NoSession, "No such session", ErrNoSession.Error(), nil)
	case errors.Is(err, leasehold.ErrClosed):
		q.w.Header().Set("Retry-After", "1")
		h.problem(q, http.StatusServiceUnavailable, httpwire.Unavailable, "Unavailable", "the server is shutting down", nil)
	case errors.Is(err, context.Canceled) && h.drain.Err() != nil && q.r.Context().Err() == nil:
		q.w.Header().Set("Retry-After", "1")
		h.problem(q, http.StatusServiceUnavailable, httpwire.Unavailable, "Unavailable", "the server is shutting down; the wait was ended", nil)
	case errors.Is(err, context.Canceled) && q.r.Context().Err() != nil:
		// The client went away; nobody reads this answer.
		h.problem(q, 499, httpwire.Timeout, "Client closed request", "the request was cancelled by the client", nil)
	case errors.Is(err, context.DeadlineExceeded):
		h.problem(q, http.StatusGatewayTimeout, httpwire.Timeout, "Timeout", "the backend did not answer in time; the outcome is unknown", nil)
	default:
		h.problem(q, http.StatusInternalServerError, httpwire.Internal, "Internal error", "internal error; see the server's log", nil)
	}
}

// problem writes an RFC 9457 problem document (httpwire.EncodeProblem).
func (h *httpAPI) problem(q *httpReq, status int, typ, title, detail string, extra map[string]any) {
	b := httpwire.EncodeProblem(typ, title, status, detail, extra)
	q.w.Header().Set("Content-Type", httpwire.ProblemContentType)
	q.w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	q.w.Header().Set("Cache-Control", "no-store")
	h.respond(q, status, b)
}

// httpStatusWriter records the status code; Unwrap lets
// http.ResponseController reach the connection (flush, deadlines).
type httpStatusWriter struct {
	http.ResponseWriter
	status int
}

func (w *httpStatusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *httpStatusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *httpStatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *httpStatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
