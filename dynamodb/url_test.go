package dynamodb_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestBadURLs: a bad URL, table name or parameter is an *InvalidError, and
// nothing is created on the endpoint.
func TestBadURLs(t *testing.T) {
	base := enginetest.DynamoDBURL(t)
	bu, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	ep := url.QueryEscape(bu.Query().Get("endpoint"))
	good := "lh_bad_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "_")
	with := func(params string) string {
		return "dynamodb://" + good + "?endpoint=" + ep + "&region=us-east-1&" + params
	}
	for _, u := range []string{
		"dynamo://" + good,
		"dynamodb:" + good,
		"dynamodb:///" + good,
		"dynamodb://ab?endpoint=" + ep, // too short
		"dynamodb://" + strings.Repeat("t", 256) + "?endpoint=" + ep, // too long
		"dynamodb://a%20b?endpoint=" + ep,
		"dynamodb://user@" + good + "?endpoint=" + ep,
		"dynamodb://" + good + ":8000?endpoint=" + ep,
		"dynamodb://" + good + "/path?endpoint=" + ep,
		"dynamodb://" + good + "?endpoint=" + ep + "#frag",
		with("max_clock_skew=-1s"),
		with("max_clock_skew=2h"),
		with("max_clock_skew=soon"),
		with("consistent=maybe"),
		with("create=yes please"),
		with("ttl_cleanup=2"),
		with("condition_values=x"),
		with("one_write_region=perhaps"),
		with("colour=blue"),
		with("create=true&create=false"),
		with("region=Not_A_Region"),
		"dynamodb://" + good + "?endpoint=ftp://127.0.0.1:1",
		"dynamodb://" + good + "?endpoint=http://",
		"dynamodb://" + good + "?endpoint=" + ep + "&region=us-east-1&%zz",
	} {
		_, err := dynamodb.Open(bg(t), u)
		var ie *leasehold.InvalidError
		if !errors.Is(err, leasehold.ErrInvalid) || !errors.As(err, &ie) || ie.Reason == "" {
			t.Errorf("Open(%q): %v, want an *InvalidError", u, err)
		}
		if err := dynamodb.Init(bg(t), u); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("Init(%q): %v, want an *InvalidError", u, err)
		}
	}
	c := rawClient(t, base)
	if tableExists(t, c, good) {
		t.Errorf("table %s was created by a rejected URL", good)
	}

	if _, err := dynamodb.New(nil, good); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("New(nil client): %v", err)
	}
	for _, table := range []string{"", "ab", "a b", "tab/le", strings.Repeat("x", 256)} {
		if _, err := dynamodb.New(c, table); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("New(table %q): %v, want ErrInvalid", table, err)
		}
		if err := dynamodb.CreateTable(bg(t), c, table); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("CreateTable(%q): %v, want ErrInvalid", table, err)
		}
	}
	for _, d := range []time.Duration{-time.Millisecond, dynamodb.MaxMaxClockSkew + 1} {
		if _, err := dynamodb.New(c, good, dynamodb.WithMaxClockSkew(d)); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("New with skew %s: %v, want ErrInvalid", d, err)
		}
	}
	if _, err := dynamodb.New(c, good, dynamodb.WithClock(nil)); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("New with a nil clock: %v, want ErrInvalid", err)
	}
	if tableExists(t, c, good) {
		t.Errorf("table %s was created", good)
	}
}

// TestOpenCreates: Open creates a missing table by default, not with
// create=false; Init creates it too and is idempotent; TTL clean-up is
// reported unsupported by dynalite and does not fail Init.
func TestOpenCreates(t *testing.T) {
	base := enginetest.DynamoDBURL(t)
	c := rawClient(t, base)
	u := freshURL(t, base, "create", "false")
	if _, err := dynamodb.Open(bg(t), u); err == nil {
		t.Fatal("Open with create=false of a missing table succeeded")
	}
	if tableExists(t, c, tableOf(t, u)) {
		t.Fatal("Open with create=false created the table")
	}
	if err := dynamodb.Init(bg(t), u+"&ttl_cleanup=true"); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if err := dynamodb.Init(bg(t), u); err != nil {
		t.Fatalf("second Init: %v", err)
	}
	s := open(t, u)
	s.Close()
	err := dynamodb.EnableTTLCleanup(bg(t), c, tableOf(t, u))
	if err != nil && !errors.Is(err, dynamodb.ErrTTLUnsupported) {
		t.Errorf("EnableTTLCleanup: %v", err)
	}
	t.Logf("EnableTTLCleanup on this endpoint: %v", err)

	u2 := freshURL(t, base)
	open(t, u2).Close()
	if !tableExists(t, c, tableOf(t, u2)) {
		t.Error("Open did not create the table")
	}
	if err := dynamodb.CreateTable(bg(t), c, tableOf(t, u2)); err != nil {
		t.Errorf("CreateTable of an existing table: %v", err)
	}
}

// TestStoresURL: stores.Open and stores.Init know the dynamodb scheme.
func TestStoresURL(t *testing.T) {
	u := freshURL(t, enginetest.DynamoDBURL(t), "create", "false")
	if err := stores.Init(bg(t), u); err != nil {
		t.Fatalf("stores.Init: %v", err)
	}
	s, err := stores.Open(bg(t), u)
	if err != nil {
		t.Fatalf("stores.Open: %v", err)
	}
	defer s.Close()
	if _, ok := s.(*dynamodb.Store); !ok {
		t.Fatalf("stores.Open returned %T", s)
	}
	if _, err := s.TryAcquire(bg(t), req("x", "a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.Open(bg(t), "dynamodb://x"); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("stores.Open with a bad table name: %v, want ErrInvalid", err)
	}
}
