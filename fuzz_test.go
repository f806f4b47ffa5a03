package leasehold_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/storekit"
)

// Fuzz targets of suite R12 for the argument rules (validate.go). Each
// checks the validator against the documented rules, written out again
// here, and that a rejection is an *InvalidError naming the field.

// textOK is the documented rule for names, owners, prefixes and request
// ids: 1 to max bytes of valid UTF-8 without control characters (Unicode
// category Cc), or empty where allowed.
func textOK(s string, max int, emptyOK bool) bool {
	if s == "" {
		return emptyOK
	}
	if len(s) > max || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.Is(unicode.Cc, r) {
			return false
		}
	}
	return true
}

// checkInvalid fails unless err is an *InvalidError for field that
// matches leasehold.ErrInvalid and says something.
func checkInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	var inv *leasehold.InvalidError
	if !errors.As(err, &inv) || !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("%s: rejected with %T %v, want an *InvalidError", what, err, err)
	}
	if inv.Field != field || inv.Reason == "" || !strings.Contains(err.Error(), field) {
		t.Fatalf("%s: error %q (field %q), want field %q and a reason", what, err, inv.Field, field)
	}
}

func checkText(t *testing.T, what, field string, err error, want bool) {
	t.Helper()
	switch {
	case want && err != nil:
		t.Fatalf("%s: refused %v, but the documented rules allow it", what, err)
	case !want && err == nil:
		t.Fatalf("%s: accepted, but the documented rules refuse it", what)
	case !want:
		checkInvalid(t, what, err, field)
	}
}

var textSeeds = []string{
	"", "a", "jobs/nightly", "é", "e\u0301", "日本語/ジョブ", "a b", "tab\there", "nul\x00", "\x7f", "\u0085",
	"\u200b", "\u202e", "\ufeff", "\xff", "\xc3", "\xed\xa0\x80", "a/../b", "%2F", "%252F", "／", "\U0010ffff",
	strings.Repeat("n", 128), strings.Repeat("n", 129), strings.Repeat("n", 256), strings.Repeat("n", 257),
	strings.Repeat("é", 128), strings.Repeat("é", 127) + "ab", strings.Repeat("é", 128) + "a",
}

// FuzzValidateText: names, prefixes, owners and request ids are accepted
// exactly when the documented rules allow them.
func FuzzValidateText(f *testing.F) {
	for _, s := range textSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkText(t, "name "+strings.ToValidUTF8(s, "?"), "name", storekit.ValidateName(s), textOK(s, leasehold.MaxNameLen, false))
		checkText(t, "prefix", "prefix", storekit.ValidatePrefix(s), textOK(s, leasehold.MaxNameLen, true))
		checkText(t, "owner", "owner", storekit.ValidateOwner(s), textOK(s, leasehold.MaxOwnerLen, false))
		checkText(t, "request id", "request id", storekit.ValidateRequestID(s), textOK(s, leasehold.MaxRequestIDLen, true))
	})
}

// FuzzValidateTTL: a TTL is accepted exactly when it lies in [MinTTL,
// MaxTTL]; so is a token exactly when it is not 0.
func FuzzValidateTTL(f *testing.F) {
	for _, ns := range []int64{0, 1, -1, int64(leasehold.MinTTL) - 1, int64(leasehold.MinTTL), int64(time.Second),
		int64(leasehold.MaxTTL), int64(leasehold.MaxTTL) + 1, 1<<63 - 1, -1 << 63} {
		f.Add(ns, uint64(ns))
	}
	f.Fuzz(func(t *testing.T, ns int64, token uint64) {
		ttl := time.Duration(ns)
		err := storekit.ValidateTTL(ttl)
		want := ttl >= leasehold.MinTTL && ttl <= leasehold.MaxTTL
		checkText(t, "ttl "+ttl.String(), "ttl", err, want)
		checkText(t, "token", "token", storekit.ValidateToken(token), token != 0)
	})
}

// FuzzAcquireRequest: AcquireRequest.Validate accepts a request exactly
// when every field is valid, and names the first bad field in the order
// name, owner, request id, ttl, data. A store (memory) refuses exactly
// what Validate refuses, with the same error, and grants the rest on a
// fresh store under the very name given; Renew and Release validate their
// arguments the same way.
func FuzzAcquireRequest(f *testing.F) {
	f.Add("jobs/a", "worker-1", "", int64(time.Second), []byte(nil), uint64(1))
	f.Add("jobs/a", "worker-1", "req-7", int64(leasehold.MinTTL), []byte("data"), uint64(2))
	f.Add("", "w", "", int64(time.Second), []byte{}, uint64(1))
	f.Add("a", "", "", int64(time.Second), []byte{}, uint64(0))
	f.Add("a", "w", strings.Repeat("r", 129), int64(time.Second), []byte{}, uint64(1))
	f.Add("a", "w", "", int64(0), []byte{}, uint64(1))
	f.Add("a\x00", "w\n", "\xff", int64(-1), []byte{}, uint64(1))
	f.Add("a", "w", "", int64(time.Second), bytes.Repeat([]byte{0}, leasehold.MaxDataLen+1), uint64(1))
	f.Add("é/ジョブ", "o", "r", int64(leasehold.MaxTTL), bytes.Repeat([]byte{0xff}, leasehold.MaxDataLen), uint64(1<<63))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, name, owner, reqID string, ns int64, data []byte, token uint64) {
		req := leasehold.AcquireRequest{Name: name, Owner: owner, RequestID: reqID, TTL: time.Duration(ns), Data: data}
		checks := []struct {
			field string
			ok    bool
		}{
			{"name", textOK(name, leasehold.MaxNameLen, false)},
			{"owner", textOK(owner, leasehold.MaxOwnerLen, false)},
			{"request id", textOK(reqID, leasehold.MaxRequestIDLen, true)},
			{"ttl", req.TTL >= leasehold.MinTTL && req.TTL <= leasehold.MaxTTL},
			{"data", len(data) <= leasehold.MaxDataLen},
		}
		firstBad := ""
		for _, c := range checks {
			if !c.ok {
				firstBad = c.field
				break
			}
		}
		err := req.Validate()
		if firstBad == "" {
			if err != nil {
				t.Fatalf("Validate refused a valid request: %v", err)
			}
		} else {
			checkInvalid(t, "Validate", err, firstBad)
		}

		s := memory.New()
		defer s.Close()
		rec, serr := s.TryAcquire(ctx, req)
		switch {
		case err != nil && (serr == nil || serr.Error() != err.Error()):
			t.Fatalf("the store answered %v to a request Validate refuses with %v", serr, err)
		case err == nil && serr != nil:
			t.Fatalf("the store refused a valid request: %v", serr)
		case err == nil && (rec.Name != name || rec.Owner != owner || rec.Token == 0 || !bytes.Equal(rec.Data, data)):
			t.Fatalf("grant %+v does not carry the request's name, owner and data", rec)
		}
		if err != nil {
			if ls, _ := s.List(ctx, ""); len(ls) != 0 {
				t.Fatalf("a refused acquire left leases: %v", ls)
			}
		}

		holderErr := storekit.ValidateHolder(name, owner, token)
		switch {
		case !checks[0].ok:
			checkInvalid(t, "ValidateHolder", holderErr, "name")
		case !checks[1].ok:
			checkInvalid(t, "ValidateHolder", holderErr, "owner")
		case token == 0:
			checkInvalid(t, "ValidateHolder", holderErr, "token")
		case holderErr != nil:
			t.Fatalf("ValidateHolder refused valid arguments: %v", holderErr)
		}
		for what, e := range map[string]error{
			"Release": s.Release(ctx, name, owner, token),
			"Renew":   s.Renew(ctx, name, owner, token, time.Second),
		} {
			switch {
			case holderErr != nil && (e == nil || e.Error() != holderErr.Error()):
				t.Fatalf("%s answered %v to arguments ValidateHolder refuses with %v", what, e, holderErr)
			case holderErr == nil && errors.Is(e, leasehold.ErrInvalid):
				t.Fatalf("%s refused valid arguments: %v", what, e)
			}
		}
	})
}
