package httpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// encode is how both ends write JSON: no HTML escaping.
func encode(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestWire: what each shape puts on the wire, byte for byte, as the API
// guide shows it (the Python client and the dashboard read these bytes).
func TestWire(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.FixedZone("x", 3600))
	rec := leasehold.Record{Name: "a/b", Owner: "w1", Token: 7, TTL: 1500*time.Millisecond + 1, Remaining: -time.Second, Acquired: at}
	text, bin := rec, rec
	text.Data, bin.Data = []byte("<x>\n"), []byte{0xff, 0}
	delta := int64(-2)
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"lease", LeaseOf(rec), `{"name":"a/b","owner":"w1","token":7,"ttl_ms":1501,"remaining_ms":0,"acquired":"2026-01-02T02:04:05.6Z"}`},
		{"lease text data", LeaseOf(text), `{"name":"a/b","owner":"w1","token":7,"ttl_ms":1501,"remaining_ms":0,"acquired":"2026-01-02T02:04:05.6Z","data":"<x>\n"}`},
		{"lease binary data", LeaseOf(bin), `{"name":"a/b","owner":"w1","token":7,"ttl_ms":1501,"remaining_ms":0,"acquired":"2026-01-02T02:04:05.6Z","data_base64":"/wA="}`},
		{"list", List{Leases: []Lease{}}, `{"leases":[]}`},
		{"acquire", AcquireBodyOf(leasehold.AcquireRequest{Owner: "w1", TTL: time.Second}, 0, ""), `{"owner":"w1","ttl_ms":1000}`},
		{"acquire all", AcquireBodyOf(leasehold.AcquireRequest{Owner: "w1", TTL: time.Second, RequestID: "r", Data: []byte("d")}, time.Microsecond, "s"),
			`{"owner":"w1","ttl_ms":1000,"data":"d","request_id":"r","wait_ms":1,"session":"s"}`},
		// The client sends text with control characters as base64.
		{"acquire control data", AcquireBodyOf(leasehold.AcquireRequest{Owner: "w1", TTL: time.Second, Data: []byte("a\n")}, 0, ""),
			`{"owner":"w1","ttl_ms":1000,"data_base64":"YQo="}`},
		{"renew", RenewBody{Owner: "w1", Token: 7, TTLMS: 1000}, `{"owner":"w1","token":7,"ttl_ms":1000}`},
		{"release", ReleaseBody{Owner: "w1", Token: 7, Secret: "s"}, `{"owner":"w1","token":7,"secret":"s"}`},
		{"session", SessionBody{TTLMS: 5000}, `{"ttl_ms":5000}`},
		{"record", RecordOf(leasehold.Versioned{Key: "k", Value: []byte{}, Version: 3}), `{"key":"k","value":"","version":3}`},
		{"binary record", RecordOf(leasehold.Versioned{Key: "k", Value: []byte{0xfe}, Version: 3}), `{"key":"k","value_base64":"/g==","version":3}`},
		{"add", AddBody{Delta: &delta}, `{"delta":-2}`},
		{"txn", TxnBodyOf(leasehold.Txn{If: []leasehold.Condition{{Key: "a", Version: 0}}, Then: []leasehold.Write{
			{Key: "a", Value: []byte("v")}, {Key: "b", Value: []byte{1}}, {Key: "c", Delete: true}, {Key: "d", Add: 3}}}),
			`{"if":[{"key":"a","version":0}],"then":[{"key":"a","value":"v"},{"key":"b","value_base64":"AQ=="},{"key":"c","delete":true},{"key":"d","add":3}]}`},
		{"empty txn", TxnBodyOf(leasehold.Txn{}), `{"if":[],"then":[]}`},
	} {
		if got := encode(t, c.v); got != c.want+"\n" {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// TestRoundTrip: what one end encodes the other decodes to the same
// record, value and transaction.
func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, data := range [][]byte{nil, []byte("text"), []byte("a\tb"), {0xff, 0xfe}} {
		in := leasehold.Record{Name: "n", Owner: "o", Token: 9, TTL: 2 * time.Second, Remaining: time.Second, Acquired: at, Data: data}
		l := LeaseOf(in)
		var back Lease
		if err := json.Unmarshal([]byte(encode(t, l)), &back); err != nil {
			t.Fatal(err)
		}
		out, err := back.Record()
		if err != nil || !reflect.DeepEqual(out, in) {
			t.Errorf("lease with data %q: got %+v, %v", data, out, err)
		}
		v := leasehold.Versioned{Key: "k", Value: data, Version: 4}
		if v.Value == nil {
			v.Value = []byte{}
		}
		r := RecordOf(v)
		got, err := r.Versioned()
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Errorf("record %q: got %+v, %v", data, got, err)
		}
	}
	txn := leasehold.Txn{If: []leasehold.Condition{{Key: "a", Version: 2}}, Then: []leasehold.Write{
		{Key: "a", Value: []byte("x\n")}, {Key: "b", Value: []byte{}}, {Key: "c", Delete: true}, {Key: "d", Add: -1}}}
	body := TxnBodyOf(txn)
	var checked []string
	got, err := body.Txn(func(k string) error { checked = append(checked, k); return nil })
	if err != nil || !reflect.DeepEqual(got, txn) {
		t.Errorf("txn: got %+v, %v", got, err)
	}
	if !reflect.DeepEqual(checked, []string{"a", "a", "b", "c", "d"}) {
		t.Errorf("txn checked keys %q", checked)
	}
}

func TestDecodeBytesRefusals(t *testing.T) {
	s, bad := "x", "%%%"
	for _, c := range []struct {
		s, b64 *string
		field  string
	}{{&s, &s, "data"}, {nil, &bad, "data_base64"}} {
		_, err := DecodeBytes("data", c.s, c.b64)
		var inv *leasehold.InvalidError
		if !errors.As(err, &inv) || inv.Field != c.field {
			t.Errorf("DecodeBytes(%v, %v) = %v, want an invalid %s", c.s, c.b64, err, c.field)
		}
	}
	w := TxnBody{Then: []TxnWrite{{Key: "k", Value: &s, ValueBase64: &s}}}
	_, err := w.Txn(func(string) error { return nil })
	if err == nil || err.Error() != `invalid value: write of "k": give value or value_base64, not both` {
		t.Errorf("txn with both values: %v", err)
	}
	stop := errors.New("bad key")
	if _, err := w.Txn(func(string) error { return stop }); err != stop {
		t.Errorf("txn with a refused key: %v", err)
	}
}

// TestProblems: a problem document is read back as the error it was
// written for, with the members in the documented order.
func TestProblems(t *testing.T) {
	he := &leasehold.HeldError{Name: "n", Owner: "o", Token: 3, Remaining: 1500 * time.Millisecond, Acquired: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b := EncodeProblem(Held, "Lease held", 409, "held", HeldMembers(he))
	want := `{"type":"urn:leasehold:problem:held","title":"Lease held","status":409,"detail":"held","holder":{"owner":"o","token":3,"remaining_ms":1500,"acquired":"2026-01-01T00:00:00Z"}}` + "\n"
	if string(b) != want {
		t.Fatalf("held problem:\n got %s\nwant %s", b, want)
	}
	p, ok := DecodeProblem(ProblemContentType, b)
	if !ok || p.Name() != Held || !reflect.DeepEqual(p.HeldError("n"), he) {
		t.Fatalf("held problem read back as %+v (%v)", p.HeldError("n"), ok)
	}
	ce := &leasehold.ConflictError{Key: "k", Expected: 0, Actual: 5}
	b = EncodeProblem(Conflict, "Version conflict", 409, "c", ConflictMembers(ce))
	if p, ok = DecodeProblem(ProblemContentType+"; charset=utf-8", b); !ok || !reflect.DeepEqual(p.ConflictError("other"), ce) {
		t.Fatalf("conflict problem %s read back as %+v", b, p.ConflictError("other"))
	}
	inv := &leasehold.InvalidError{Field: "ttl_ms", Reason: "too short"}
	b = EncodeProblem(Invalid, "Invalid request", 400, inv.Error(), InvalidMembers(inv))
	if p, ok = DecodeProblem(ProblemContentType, b); !ok || !reflect.DeepEqual(p.InvalidError(), inv) {
		t.Fatalf("invalid problem %s read back as %+v", b, p.InvalidError())
	}
	for _, c := range []struct{ ctype, body string }{
		{"application/json", string(b)},
		{ProblemContentType, `{"type":"about:blank","status":400}`},
		{ProblemContentType, `not json`},
	} {
		if _, ok := DecodeProblem(c.ctype, []byte(c.body)); ok {
			t.Errorf("DecodeProblem(%s, %s) took it for a leasehold problem", c.ctype, c.body)
		}
	}
}

func TestUnits(t *testing.T) {
	if CeilMS(time.Millisecond+1) != 2 || CeilMS(time.Millisecond) != 1 || LeftMS(-time.Second) != 0 {
		t.Error("CeilMS or LeftMS rounds wrongly")
	}
	if MS(1<<62) != time.Duration(1<<63-1) || MS(-1<<62) != time.Duration(-1<<63) || MS(3) != 3*time.Millisecond {
		t.Error("MS does not saturate")
	}
	if Time(time.Time{}) != "" {
		t.Error("the zero time is not empty")
	}
	if tm, err := ParseTime(""); err != nil || !tm.IsZero() {
		t.Error("an empty time is not the zero time")
	}
	for typ, want := range map[string]bool{"released": true, "expired": true, "forced": true, "dequeued": true, "overflow": true,
		"granted": false, "renewed": false, "queued": false, "": false} {
		if MayFree(typ) != want {
			t.Errorf("MayFree(%q) = %v", typ, !want)
		}
	}
}
