package remote

import (
	"context"
	"errors"
	"fmt"
	"github.com/leasehold/leasehold/storekit"
	"net/http"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/httpwire"
)

// Versioned records over the server's HTTP API (/v1/records/{key},
// /v1/txn; see docs/http-api.md).

var _ leasehold.RecordStore = (*HTTPStore)(nil)

// ErrRecordsUnsupported reports a server that keeps no versioned records
// (a proxy in front of a store without them): it answered 501
// records-unsupported.
var ErrRecordsUnsupported = errors.New("leasehold server: versioned records are not supported by this server's store")

// recordError maps a problem answer to leasehold's record errors: 412
// precondition-failed and 409 conflict to a *leasehold.ConflictError with
// the server's current version, 501 txn-unsupported to
// leasehold.ErrTxnUnsupported; the rest as for leases (404 ErrNotFound,
// 400 *InvalidError, else a *ProblemError).
func recordError(resp *http.Response, data []byte, key string) error {
	if p, ok := httpwire.DecodeProblem(resp.Header.Get("Content-Type"), data); ok {
		switch p.Name() {
		case httpwire.PreconditionFailed, httpwire.Conflict:
			return p.ConflictError(key)
		case httpwire.TxnUnsupported:
			return leasehold.ErrTxnUnsupported
		case httpwire.RecordsUnsupported:
			return ErrRecordsUnsupported
		}
	}
	return problemError(resp, data, key)
}

// recordDo sends a call of the records API: never replayed by the
// transport (a PUT repeated after a lost answer would meet its own write
// as a conflict), with its problems mapped by recordError.
func (s *HTTPStore) recordDo(ctx context.Context, c call, out any) error {
	c.records, c.replayable = true, false
	_, err := s.do(ctx, c, out)
	return err
}

// GetRecord implements leasehold.RecordStore (GET /v1/records/{key}).
func (s *HTTPStore) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return leasehold.Versioned{}, err
	}
	var rj httpwire.Record
	if err := s.recordDo(ctx, call{method: http.MethodGet, path: s.namePath("records", key, ""), name: key}, &rj); err != nil {
		return leasehold.Versioned{}, err
	}
	v, err := rj.Versioned()
	if err != nil {
		return v, fmt.Errorf("leasehold server: malformed record in the answer: %v", err)
	}
	return v, nil
}

// PutRecord implements leasehold.RecordStore: PUT /v1/records/{key} with
// If-Match: "<expect>", or If-None-Match: * when expect is 0.
func (s *HTTPStore) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return 0, err
	}
	if err := storekit.ValidateValue(value); err != nil {
		return 0, err
	}
	hdr := map[string]string{"If-None-Match": "*"}
	if expect != 0 {
		hdr = map[string]string{"If-Match": httpwire.ETag(expect)}
	}
	if value == nil {
		value = []byte{}
	}
	var out httpwire.Version
	if err := s.recordDo(ctx, call{method: http.MethodPut, path: s.namePath("records", key, ""), header: hdr, raw: value, name: key}, &out); err != nil {
		return 0, err
	}
	return out.Version, nil
}

// DeleteRecord implements leasehold.RecordStore: DELETE
// /v1/records/{key} with If-Match: "<expect>". With expect 0 ("delete if
// absent", which never deletes anything) it only reads the key: ErrNotFound
// when it is absent, a *ConflictError when it is not.
func (s *HTTPStore) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	if err := storekit.ValidateKey(key); err != nil {
		return err
	}
	if expect == 0 {
		cur, err := s.GetRecord(ctx, key)
		if err != nil {
			return err
		}
		return &leasehold.ConflictError{Key: key, Expected: 0, Actual: cur.Version}
	}
	return s.recordDo(ctx, call{method: http.MethodDelete, path: s.namePath("records", key, ""),
		header: map[string]string{"If-Match": httpwire.ETag(expect)}, name: key}, nil)
}

// AddCounter implements leasehold.RecordStore (POST
// /v1/records/{key}/add).
func (s *HTTPStore) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return 0, 0, err
	}
	var out httpwire.Counter
	if err := s.recordDo(ctx, call{method: http.MethodPost, path: s.namePath("records", key, "add"),
		body: httpwire.AddBody{Delta: &delta}, name: key}, &out); err != nil {
		return 0, 0, err
	}
	return out.Value, out.Version, nil
}

// Txn implements leasehold.RecordStore (POST /v1/txn). A condition that
// does not hold is a *leasehold.ConflictError naming its key.
func (s *HTTPStore) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	if err := txn.Validate(); err != nil {
		return leasehold.TxnResult{}, err
	}
	var out httpwire.TxnResult
	if err := s.recordDo(ctx, call{method: http.MethodPost, path: "/v1/txn", body: httpwire.TxnBodyOf(txn)}, &out); err != nil {
		return leasehold.TxnResult{}, err
	}
	if out.Versions == nil {
		out.Versions = map[string]uint64{}
	}
	return leasehold.TxnResult{Versions: out.Versions}, nil
}
