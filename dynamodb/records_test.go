package dynamodb_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestRecordsConformance runs the records suite on the shared dynalite,
// which has no TransactWriteItems: Txn must answer ErrTxnUnsupported and
// change nothing.
func TestRecordsConformance(t *testing.T) {
	u := freshURL(t, enginetest.DynamoDBURL(t))
	storetest.RunRecords(t, storetest.RecordsHarness{
		Open: func(t testing.TB) leasehold.RecordStore { return open(t, u) },
		Txn:  false,
	})
}

// TestRecordsConformanceFull runs the records suite, transactions
// included, on an endpoint that has TransactWriteItems, named by
// $LEASEHOLD_TEST_DYNAMODB_FULL (a dynamodb:// URL, e.g. of a table in a
// real AWS account). There is none on the test machines: dynalite lacks
// transactions, and AWS's DynamoDB Local may not be used.
func TestRecordsConformanceFull(t *testing.T) {
	base := os.Getenv("LEASEHOLD_TEST_DYNAMODB_FULL")
	if base == "" {
		t.Skip("no DynamoDB endpoint with transactions ($LEASEHOLD_TEST_DYNAMODB_FULL is empty); " +
			"set it to a dynamodb:// URL (a scratch table; its region and credentials from the AWS SDK's usual chain) to run the suite with Txn")
	}
	u := freshURL(t, base)
	storetest.RunRecords(t, storetest.RecordsHarness{
		Open: func(t testing.TB) leasehold.RecordStore { return open(t, u) },
		Txn:  true,
	})
}

// TestRecordsTxnEmulated runs the records suite with transactions through
// txnEmulator: an HTTP proxy in front of dynalite that serializes requests
// and carries out TransactWriteItems itself, item by item, undoing them if
// a condition fails. It is not DynamoDB's implementation: it checks that
// the store's transaction requests are well formed (dynalite parses and
// evaluates each of their expressions) and that it handles cancellations,
// retries and versions correctly. The real thing is
// TestRecordsConformanceFull.
func TestRecordsTxnEmulated(t *testing.T) {
	base := enginetest.DynamoDBURL(t)
	em := newTxnEmulator(t, base)
	u := freshURL(t, em.url)
	storetest.RunRecords(t, storetest.RecordsHarness{
		Open: func(t testing.TB) leasehold.RecordStore { return open(t, u) },
		Txn:  true,
		// The histories use no transactions; TestRecordsConformance runs
		// them in full.
		Histories: storetest.RecordHistoryConfig{Histories: 10},
	})
	if em.txns == 0 {
		t.Errorf("the emulator saw no transaction")
	}
	t.Logf("emulated %d transactions, %d cancelled", em.txns, em.cancelled)
}

// TestRecordsLayout checks the items behind the records: the key prefix,
// counters kept as numbers, tombstones that keep versions increasing,
// ExpiresAt on tombstones with TTL clean-up only, and counters written in
// forms that ParseCounter reads but that are not canonical.
func TestRecordsLayout(t *testing.T) {
	u := freshURL(t, enginetest.DynamoDBURL(t), "ttl_cleanup", "true")
	s := open(t, u)
	defer s.Close()
	ctx := bg(t)
	raw := rawClient(t, u)
	table := tableOf(t, u)
	item := func(key string) map[string]types.AttributeValue {
		return rawItem(t, raw, table, dynamodb.RecordKeyPrefix+key)
	}

	v1, err := s.PutRecord(ctx, "k", []byte("text"), 0)
	if err != nil || v1 != 1 {
		t.Fatalf("first put: %d, %v", v1, err)
	}
	it := item("k")
	if b, ok := it["Value"].(*types.AttributeValueMemberB); !ok || string(b.Value) != "text" || attrN(it, "Version") != "1" || it["Counter"] != nil {
		t.Fatalf("item after a put: %v", it)
	}
	v2, err := s.PutRecord(ctx, "k", []byte("42"), v1)
	if err != nil || v2 != 2 {
		t.Fatalf("second put: %d, %v", v2, err)
	}
	if it := item("k"); attrN(it, "Counter") != "42" || it["Value"] != nil {
		t.Fatalf("a canonical counter is kept as a number: %v", it)
	}
	if n, v, err := s.AddCounter(ctx, "k", -50); err != nil || n != -8 || v != 3 {
		t.Fatalf("add: %d, %d, %v", n, v, err)
	}
	if err := s.DeleteRecord(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	it = item("k")
	if it["Value"] != nil || it["Counter"] != nil || attrN(it, "Version") != "4" || attrN(it, "ExpiresAt") == "" {
		t.Fatalf("tombstone: %v", it)
	}
	if _, err := s.GetRecord(ctx, "k"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("get of a tombstone: %v", err)
	}
	var ce *leasehold.ConflictError
	if _, err := s.PutRecord(ctx, "k", []byte("x"), 4); !errors.As(err, &ce) || ce.Actual != 0 {
		t.Fatalf("put with the tombstone's version: %v", err)
	}
	if n, v, err := s.AddCounter(ctx, "k", 1); err != nil || n != 1 || v != 5 {
		t.Fatalf("add after delete: %d, %d, %v", n, v, err)
	}
	if it := item("k"); it["ExpiresAt"] != nil {
		t.Fatalf("a live record keeps ExpiresAt: %v", it)
	}

	// Counters written by hand in forms ParseCounter accepts.
	for in, want := range map[string]int64{"+7": 8, "007": 8, "-0": 1} {
		if _, err := raw.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"LockKey": &types.AttributeValueMemberS{Value: dynamodb.RecordKeyPrefix + "c"},
			"Value":   &types.AttributeValueMemberB{Value: []byte(in)}, "Version": &types.AttributeValueMemberN{Value: "10"},
		}}); err != nil {
			t.Fatal(err)
		}
		if n, v, err := s.AddCounter(ctx, "c", 1); err != nil || n != want || v != 11 {
			t.Errorf("add 1 to %q: %d, %d, %v; want %d at version 11", in, n, v, err, want)
		}
	}
	if _, _, err := s.AddCounter(ctx, "c", math.MaxInt64); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("overflow: %v", err)
	}
	// Records are not leases: List passes over them, and a lease of the
	// same name is another item.
	if _, err := s.TryAcquire(ctx, req("c", "o", 60e9)); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.List(ctx, ""); err != nil || len(recs) != 1 || recs[0].Name != "c" {
		t.Fatalf("List: %v, %v", recs, err)
	}
	if r, err := s.GetRecord(ctx, "c"); err != nil || r.Version != 11 {
		t.Fatalf("record beside a lease: %+v, %v", r, err)
	}
	// On dynalite a Txn is unsupported (and the store remembers it); an
	// endpoint with transactions applies it.
	for i := 0; i < 2; i++ {
		_, err := s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "t", Add: 1}}})
		if err != nil && !errors.Is(err, leasehold.ErrTxnUnsupported) {
			t.Fatalf("Txn: %v, want ErrTxnUnsupported on dynalite", err)
		}
	}
}

// TestRecordsTxnVersions checks, through the emulator, that a transaction
// reports the versions the items got, continues a tombstone's version and
// does not write a tombstone for the delete of a key never written.
func TestRecordsTxnVersions(t *testing.T) {
	em := newTxnEmulator(t, enginetest.DynamoDBURL(t))
	u := freshURL(t, em.url, "ttl_cleanup", "true")
	s := open(t, u)
	defer s.Close()
	ctx := bg(t)
	raw := rawClient(t, u)
	table := tableOf(t, u)
	v, _ := s.PutRecord(ctx, "a", []byte("x"), 0)
	if err := s.DeleteRecord(ctx, "a", v); err != nil {
		t.Fatal(err)
	}
	res, err := s.Txn(ctx, leasehold.Txn{
		If:   []leasehold.Condition{{Key: "a", Version: 0}},
		Then: []leasehold.Write{{Key: "a", Add: 3}, {Key: "b", Value: []byte("+1")}, {Key: "never", Delete: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Versions["a"] != 3 || res.Versions["b"] != 1 || res.Versions["never"] != 0 || len(res.Versions) != 3 {
		t.Fatalf("versions %v", res.Versions)
	}
	for k, want := range map[string]string{"a": "3", "b": "+1"} {
		r, err := s.GetRecord(ctx, k)
		if err != nil || string(r.Value) != want || r.Version != res.Versions[k] {
			t.Errorf("%s = %+v, %v", k, r, err)
		}
	}
	if it := rawItem(t, raw, table, dynamodb.RecordKeyPrefix+"never"); it != nil {
		t.Errorf("the delete of an absent key wrote %v", it)
	}
	if it := rawItem(t, raw, table, dynamodb.RecordKeyPrefix+"a"); it["ExpiresAt"] != nil {
		t.Errorf("a re-created record keeps ExpiresAt: %v", it)
	}
	res, err = s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "a", Delete: true}, {Key: "b", Add: 1}}})
	if err != nil || res.Versions["a"] != 0 || res.Versions["b"] != 2 {
		t.Fatalf("txn: %v, %v", res, err)
	}
	if it := rawItem(t, raw, table, dynamodb.RecordKeyPrefix+"a"); attrN(it, "Version") != "4" || attrN(it, "ExpiresAt") == "" {
		t.Errorf("tombstone written by a txn: %v", it)
	}
}

// TestRecordsTxnInterference makes the emulator write an item of a
// transaction between the store's read and its TransactWriteItems, as a
// concurrent writer would: the transaction is cancelled, and the store
// reads again and either applies it at the new version or, when a
// condition no longer holds, reports the conflict.
func TestRecordsTxnInterference(t *testing.T) {
	em := newTxnEmulator(t, enginetest.DynamoDBURL(t))
	u := freshURL(t, em.url)
	s := open(t, u)
	defer s.Close()
	ctx := bg(t)
	table := tableOf(t, u)
	if _, err := s.PutRecord(ctx, "x", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	// interfere sets x to value 5 at version v, once, before the next
	// transaction is carried out.
	interfere := func(v string) {
		em.mu.Lock()
		em.interfere = func(auth emAuth) {
			status, body := em.call(auth, "UpdateItem", map[string]any{
				"TableName":                 table,
				"Key":                       map[string]any{"LockKey": map[string]string{"S": dynamodb.RecordKeyPrefix + "x"}},
				"UpdateExpression":          "SET #c = :c, #n = :n REMOVE #v",
				"ExpressionAttributeNames":  map[string]string{"#c": "Counter", "#n": "Version", "#v": "Value"},
				"ExpressionAttributeValues": map[string]any{":c": map[string]string{"N": "5"}, ":n": map[string]string{"N": v}},
			})
			if status != 200 {
				t.Errorf("interfering write: %d %s", status, body)
			}
		}
		em.mu.Unlock()
	}
	interfere("2")
	res, err := s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "x", Add: 1}, {Key: "y", Value: []byte("y")}}})
	if err != nil || res.Versions["x"] != 3 || res.Versions["y"] != 1 {
		t.Fatalf("txn after an interfering write: %v, %v; want x at version 3", res, err)
	}
	if r, err := s.GetRecord(ctx, "x"); err != nil || string(r.Value) != "6" || r.Version != 3 {
		t.Fatalf("x = %+v, %v; want 6 (5 written in between, plus 1) at version 3", r, err)
	}
	interfere("4")
	_, err = s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: "x", Version: 3}}, Then: []leasehold.Write{{Key: "y", Delete: true}}})
	var ce *leasehold.ConflictError
	if !errors.As(err, &ce) || ce.Key != "x" || ce.Expected != 3 || ce.Actual != 4 {
		t.Fatalf("txn whose condition an interfering write broke: %v", err)
	}
	if r, err := s.GetRecord(ctx, "y"); err != nil || r.Version != 1 {
		t.Fatalf("y = %+v, %v: changed by a cancelled transaction", r, err)
	}
	em.mu.Lock()
	defer em.mu.Unlock()
	if em.txns != 3 || em.cancelled != 2 {
		t.Errorf("the emulator saw %d transactions, %d cancelled; want 3 and 2", em.txns, em.cancelled)
	}
}

// txnEmulator is an HTTP proxy in front of a dynalite that adds
// TransactWriteItems, for tests only. It takes a write lock for a
// transaction and a read lock for every other request, so that nothing
// runs during a transaction; then it snapshots the transaction's items,
// applies each item as the single-item request dynalite has (a
// ConditionCheck as an UpdateItem that removes an attribute no item has),
// and, if any condition failed, puts the snapshots back and answers
// TransactionCanceledException with a reason per item, as DynamoDB does.
// A ConditionCheck's item is put back in any case (the UpdateItem may have
// created it).
type txnEmulator struct {
	url    string // a dynamodb:// URL of the emulator, with dynalite's query
	target string // dynalite's http URL

	mu              sync.RWMutex
	proxy           *httputil.ReverseProxy
	txns, cancelled int               // under mu (write)
	interfere       func(auth emAuth) // if set, runs (once) before the next transaction; under mu
	faults          []string          // the next UpdateItems fail so (see fault); under mu
	afterLost       func()            // if set, runs after a "lost" fault's request is applied, before its answer; under mu
}

func newTxnEmulator(t testing.TB, base string) *txnEmulator {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(u.Query().Get("endpoint"))
	if err != nil || target.Host == "" {
		t.Fatalf("no endpoint in %s", base)
	}
	e := &txnEmulator{target: target.String(), proxy: httputil.NewSingleHostReverseProxy(target)}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	q := u.Query()
	q.Set("endpoint", srv.URL)
	u.RawQuery = q.Encode()
	e.url = u.String()
	return e
}

func (e *txnEmulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Amz-Target") == "DynamoDB_20120810.UpdateItem" && e.fault(w, r) {
		return
	}
	if r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.TransactWriteItems" {
		e.mu.RLock()
		defer e.mu.RUnlock()
		e.proxy.ServeHTTP(w, r)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	status, body := e.transact(r)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)) // the SDK checks it
	w.WriteHeader(status)
	w.Write(body)
}

// emAuth is the signature of the transaction, sent along with each of its
// requests (dynalite checks that a signature is there, not what it signs).
type emAuth struct{ auth, date string }

// fault answers an UpdateItem with the next injected fault, if any:
// "lost" applies the request and answers 500, as if the reply had been
// lost; "throttled" answers ProvisionedThroughputExceededException without
// applying it.
func (e *txnEmulator) fault(w http.ResponseWriter, r *http.Request) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.faults) == 0 {
		return false
	}
	f := e.faults[0]
	e.faults = e.faults[1:]
	code := "ProvisionedThroughputExceededException"
	status := 400
	if f == "lost" {
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			panic(err)
		}
		e.call(emAuth{r.Header.Get("Authorization"), r.Header.Get("X-Amz-Date")}, "UpdateItem", in)
		if e.afterLost != nil {
			e.afterLost()
		}
		code, status = "InternalServerError", 500
	}
	_, body := apiError(code, "injected by the test")
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
	w.WriteHeader(status)
	w.Write(body)
	return true
}

// TestRecordsWriteRetries: a record write whose reply is lost after
// DynamoDB applied it is not retried by the SDK (its retry would fail its
// condition and be reported as a conflict, or add twice): the caller gets
// an error, and the write is there. A throttled write is retried.
func TestRecordsWriteRetries(t *testing.T) {
	em := newTxnEmulator(t, enginetest.DynamoDBURL(t))
	s := open(t, freshURL(t, em.url))
	defer s.Close()
	ctx := bg(t)
	inject := func(faults ...string) {
		em.mu.Lock()
		em.faults = faults
		em.mu.Unlock()
	}
	inject("lost")
	if _, err := s.PutRecord(ctx, "p", []byte("x"), 0); err == nil || errors.Is(err, leasehold.ErrConflict) {
		t.Fatalf("put with a lost reply: %v, want an error that is not a conflict", err)
	}
	if r, err := s.GetRecord(ctx, "p"); err != nil || string(r.Value) != "x" || r.Version != 1 {
		t.Fatalf("after the lost reply: %+v, %v", r, err)
	}
	inject("lost")
	if _, _, err := s.AddCounter(ctx, "n", 5); err == nil || errors.Is(err, leasehold.ErrConflict) {
		t.Fatalf("add with a lost reply: %v, want an error", err)
	}
	if r, err := s.GetRecord(ctx, "n"); err != nil || string(r.Value) != "5" {
		t.Fatalf("the add with a lost reply was applied %+v, %v times; want once", r, err)
	}
	inject("throttled", "throttled")
	if n, v, err := s.AddCounter(ctx, "n", 1); err != nil || n != 6 || v != 2 {
		t.Fatalf("throttled add: %d, %d, %v", n, v, err)
	}
	if v, err := s.PutRecord(ctx, "p", []byte("y"), 1); err != nil || v != 2 {
		t.Fatalf("put after the faults: %d, %v", v, err)
	}
}

type emItem struct {
	op    string         // the single-item request
	in    map[string]any // its input
	key   map[string]any
	tbl   string
	check bool // a ConditionCheck
	snap  any  // the item before, nil if absent
}

func (e *txnEmulator) transact(r *http.Request) (int, []byte) {
	e.txns++
	var req struct {
		TransactItems []map[string]map[string]any
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return apiError("ValidationException", err.Error())
	}
	auth := emAuth{r.Header.Get("Authorization"), r.Header.Get("X-Amz-Date")}
	if f := e.interfere; f != nil {
		e.interfere = nil
		f(auth)
	}
	var items []*emItem
	for _, ti := range req.TransactItems {
		for kind, in := range ti {
			it := &emItem{in: in}
			it.tbl, _ = in["TableName"].(string)
			it.key, _ = in["Key"].(map[string]any)
			switch kind {
			case "ConditionCheck":
				it.op, it.check = "UpdateItem", true
				names, _ := in["ExpressionAttributeNames"].(map[string]any)
				if names == nil {
					names = map[string]any{}
				}
				names["#lhEmu"] = "LhEmulatorNone"
				in["ExpressionAttributeNames"] = names
				in["UpdateExpression"] = "REMOVE #lhEmu"
			case "Update":
				it.op = "UpdateItem"
			case "Put":
				it.op = "PutItem"
			case "Delete":
				it.op = "DeleteItem"
			default:
				return apiError("ValidationException", "unknown transaction item "+kind)
			}
			items = append(items, it)
		}
	}
	for _, it := range items {
		status, body := e.call(auth, "GetItem", map[string]any{"TableName": it.tbl, "Key": it.key, "ConsistentRead": true})
		if status != 200 {
			return status, body
		}
		var out struct{ Item any }
		if err := json.Unmarshal(body, &out); err != nil {
			return apiError("InternalServerError", err.Error())
		}
		it.snap = out.Item
	}
	reasons := make([]map[string]string, len(items))
	applied := make([]bool, len(items))
	failed := false
	var hardStatus int
	var hardErr []byte
	for i, it := range items {
		status, body := e.call(auth, it.op, it.in)
		switch {
		case status == 200:
			reasons[i] = map[string]string{"Code": "None"}
			applied[i] = true
		case bytes.Contains(body, []byte("ConditionalCheckFailedException")):
			reasons[i] = map[string]string{"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"}
			failed = true
		default:
			hardStatus, hardErr, failed = status, body, true
		}
	}
	for i, it := range items {
		if !applied[i] || (!failed && !it.check) {
			continue
		}
		if it.snap == nil {
			e.call(auth, "DeleteItem", map[string]any{"TableName": it.tbl, "Key": it.key})
		} else {
			e.call(auth, "PutItem", map[string]any{"TableName": it.tbl, "Item": it.snap})
		}
	}
	if hardErr != nil {
		return hardStatus, hardErr
	}
	if failed {
		e.cancelled++
		codes := make([]string, len(reasons))
		for i, r := range reasons {
			codes[i] = r["Code"]
		}
		b, _ := json.Marshal(map[string]any{
			"__type":              "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
			"message":             "Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]",
			"CancellationReasons": reasons,
		})
		return 400, b
	}
	return 200, []byte("{}")
}

// call sends one request to dynalite.
func (e *txnEmulator) call(auth emAuth, op string, in map[string]any) (int, []byte) {
	b, _ := json.Marshal(in)
	req, _ := http.NewRequest("POST", e.target+"/", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+op)
	req.Header.Set("Authorization", auth.auth)
	req.Header.Set("X-Amz-Date", auth.date)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return apiError("InternalServerError", err.Error())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func apiError(code, msg string) (int, []byte) {
	b, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.dynamodb.v20120810#" + code, "message": msg})
	return 400, b
}
