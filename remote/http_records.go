package remote

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold"
)

// Versioned records over the server's HTTP API (/v1/records/{key},
// /v1/txn; see docs/http-api.md).

var _ leasehold.RecordStore = (*HTTPStore)(nil)

// ErrRecordsUnsupported reports a server that keeps no versioned records
// (a proxy in front of a store without them): it answered 501
// records-unsupported.
var ErrRecordsUnsupported = errors.New("leasehold server: versioned records are not supported by this server's store")

type recordJSON struct {
	Key         string  `json:"key"`
	Value       *string `json:"value"`
	ValueBase64 string  `json:"value_base64"`
	Version     uint64  `json:"version"`
}

type recordProblemJSON struct {
	Key             string `json:"key"`
	ExpectedVersion uint64 `json:"expected_version"`
	CurrentVersion  uint64 `json:"current_version"`
}

// recordCall is one request of the records API.
type recordCall struct {
	method, path string
	header       map[string]string
	raw          []byte // the body as is (PUT), or
	json         any    // a JSON body
	key          string // the key the call is about, for errors
}

// recordDo sends c and decodes a 2xx answer's JSON into out (if non-nil).
// Record writes are never resent by the transport: a PUT repeated after a
// lost answer would meet its own write as a conflict.
func (s *HTTPStore) recordDo(ctx context.Context, c recordCall, out any) error {
	if s.closed.Load() {
		return leasehold.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var body io.Reader
	ctype := ""
	switch {
	case c.json != nil:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c.json); err != nil {
			return err
		}
		body, ctype = &buf, "application/json"
	case c.raw != nil || c.method == http.MethodPut:
		body, ctype = bytes.NewReader(c.raw), "application/octet-stream"
	}
	req, err := http.NewRequestWithContext(ctx, c.method, s.base+c.path, body)
	if err != nil {
		return err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return s.transportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return s.transportError(ctx, err)
	}
	if resp.StatusCode/100 != 2 {
		return recordError(resp, data, c.key)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("leasehold server: malformed answer to %s %s: %v", c.method, c.path, err)
		}
	}
	return nil
}

// recordError maps a problem answer to leasehold's record errors: 412
// precondition-failed and 409 conflict to a *leasehold.ConflictError with
// the server's current version, 501 txn-unsupported to
// leasehold.ErrTxnUnsupported; the rest as for leases (404 ErrNotFound,
// 400 *InvalidError, else a *ProblemError).
func recordError(resp *http.Response, data []byte, key string) error {
	var p struct {
		problemJSON
		recordProblemJSON
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") && json.Unmarshal(data, &p) == nil {
		switch strings.TrimPrefix(p.Type, problemPrefix) {
		case "precondition-failed", "conflict":
			ce := &leasehold.ConflictError{Key: p.Key, Expected: p.ExpectedVersion, Actual: p.CurrentVersion}
			if ce.Key == "" {
				ce.Key = key
			}
			return ce
		case "txn-unsupported":
			return leasehold.ErrTxnUnsupported
		case "records-unsupported":
			return ErrRecordsUnsupported
		}
	}
	return problemError(resp, data, key)
}

func (r *recordJSON) versioned() (leasehold.Versioned, error) {
	v := leasehold.Versioned{Key: r.Key, Version: r.Version}
	switch {
	case r.Value != nil:
		v.Value = []byte(*r.Value)
	case r.ValueBase64 != "":
		b, err := base64.StdEncoding.DecodeString(r.ValueBase64)
		if err != nil {
			return v, fmt.Errorf("leasehold server: bad value_base64: %v", err)
		}
		v.Value = b
	}
	return v, nil
}

func etag(version uint64) string { return `"` + strconv.FormatUint(version, 10) + `"` }

// GetRecord implements leasehold.RecordStore (GET /v1/records/{key}).
func (s *HTTPStore) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if err := leasehold.ValidateKey(key); err != nil {
		return leasehold.Versioned{}, err
	}
	var rj recordJSON
	if err := s.recordDo(ctx, recordCall{method: http.MethodGet, path: s.namePath("records", key, ""), key: key}, &rj); err != nil {
		return leasehold.Versioned{}, err
	}
	return rj.versioned()
}

// PutRecord implements leasehold.RecordStore: PUT /v1/records/{key} with
// If-Match: "<expect>", or If-None-Match: * when expect is 0.
func (s *HTTPStore) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if err := leasehold.ValidateKey(key); err != nil {
		return 0, err
	}
	if err := leasehold.ValidateValue(value); err != nil {
		return 0, err
	}
	hdr := map[string]string{"If-None-Match": "*"}
	if expect != 0 {
		hdr = map[string]string{"If-Match": etag(expect)}
	}
	if value == nil {
		value = []byte{}
	}
	var out struct {
		Version uint64 `json:"version"`
	}
	if err := s.recordDo(ctx, recordCall{method: http.MethodPut, path: s.namePath("records", key, ""), header: hdr, raw: value, key: key}, &out); err != nil {
		return 0, err
	}
	return out.Version, nil
}

// DeleteRecord implements leasehold.RecordStore: DELETE
// /v1/records/{key} with If-Match: "<expect>". With expect 0 ("delete if
// absent", which never deletes anything) it only reads the key: ErrNotFound
// when it is absent, a *ConflictError when it is not.
func (s *HTTPStore) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	if err := leasehold.ValidateKey(key); err != nil {
		return err
	}
	if expect == 0 {
		cur, err := s.GetRecord(ctx, key)
		if err != nil {
			return err
		}
		return &leasehold.ConflictError{Key: key, Expected: 0, Actual: cur.Version}
	}
	return s.recordDo(ctx, recordCall{method: http.MethodDelete, path: s.namePath("records", key, ""),
		header: map[string]string{"If-Match": etag(expect)}, key: key}, nil)
}

// AddCounter implements leasehold.RecordStore (POST
// /v1/records/{key}/add).
func (s *HTTPStore) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	if err := leasehold.ValidateKey(key); err != nil {
		return 0, 0, err
	}
	var out struct {
		Value   int64  `json:"value"`
		Version uint64 `json:"version"`
	}
	if err := s.recordDo(ctx, recordCall{method: http.MethodPost, path: s.namePath("records", key, "add"),
		json: map[string]int64{"delta": delta}, key: key}, &out); err != nil {
		return 0, 0, err
	}
	return out.Value, out.Version, nil
}

type txnConditionJSON struct {
	Key     string `json:"key"`
	Version uint64 `json:"version"`
}

type txnWriteJSON struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	Delete      bool    `json:"delete,omitempty"`
	Add         int64   `json:"add,omitempty"`
}

// Txn implements leasehold.RecordStore (POST /v1/txn). A condition that
// does not hold is a *leasehold.ConflictError naming its key.
func (s *HTTPStore) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	if err := txn.Validate(); err != nil {
		return leasehold.TxnResult{}, err
	}
	body := struct {
		If   []txnConditionJSON `json:"if"`
		Then []txnWriteJSON     `json:"then"`
	}{If: make([]txnConditionJSON, 0, len(txn.If)), Then: make([]txnWriteJSON, 0, len(txn.Then))}
	for _, c := range txn.If {
		body.If = append(body.If, txnConditionJSON{Key: c.Key, Version: c.Version})
	}
	for _, w := range txn.Then {
		wj := txnWriteJSON{Key: w.Key, Delete: w.Delete, Add: w.Add}
		if w.Value != nil {
			if plainText(w.Value) {
				v := string(w.Value)
				wj.Value = &v
			} else {
				v := base64.StdEncoding.EncodeToString(w.Value)
				wj.ValueBase64 = &v
			}
		}
		body.Then = append(body.Then, wj)
	}
	var out struct {
		Versions map[string]uint64 `json:"versions"`
	}
	if err := s.recordDo(ctx, recordCall{method: http.MethodPost, path: "/v1/txn", json: body}, &out); err != nil {
		return leasehold.TxnResult{}, err
	}
	if out.Versions == nil {
		out.Versions = map[string]uint64{}
	}
	return leasehold.TxnResult{Versions: out.Versions}, nil
}
