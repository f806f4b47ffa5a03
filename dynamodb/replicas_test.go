package dynamodb_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/dynamodb"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// globalTableFront serves dynalite's answers, but adds to every
// DescribeTable answer the fields by which DynamoDB describes a replica of
// a global table (dynalite has no global tables): extra, merged into the
// answer's "Table" object.
func globalTableFront(t *testing.T, dynaliteEndpoint string, extra map[string]any) string {
	t.Helper()
	target, err := url.Parse(dynaliteEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(r *http.Response) error {
		if r.Request.Header.Get("X-Amz-Target") != "DynamoDB_20120810.DescribeTable" || r.StatusCode != http.StatusOK {
			return nil
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return err
		}
		var out map[string]map[string]any
		if err := json.Unmarshal(body, &out); err != nil {
			return fmt.Errorf("dynalite's DescribeTable answer: %w", err)
		}
		for k, v := range extra {
			out["Table"][k] = v
		}
		if body, err = json.Marshal(out); err != nil {
			return err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		r.Header.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A replica of a global table is refused at Open with the reason and the
// way out; one_write_region=true opens it, unless the table is of
// multi-Region strong consistency (refused with its own reason whatever
// the option: issue 31 red team, DynamoDB item 3, where it was accepted);
// a table that is not replicated (dynalite's own answer) opens without
// it. Region names are escaped and at most 5 are named (item 4: an ANSI
// escape and a newline reached the terminal, and 2,000 replicas made a
// 418 KB line).
func TestOpenRefusesGlobalTable(t *testing.T) {
	base := enginetest.DynamoDBURL(t)
	u := freshURL(t, base)
	open(t, u).Close() // creates the table on dynalite
	bu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := bu.Query()
	endpoint := q.Get("endpoint")
	via := func(front string, params ...string) string {
		q := bu.Query()
		q.Set("endpoint", front)
		q.Set("create", "false")
		for i := 0; i+1 < len(params); i += 2 {
			q.Set(params[i], params[i+1])
		}
		v := *bu
		v.RawQuery = q.Encode()
		return v.String()
	}
	cases := []struct {
		name  string
		extra map[string]any
		want  []string // in the error
		not   []string // not in the error
		never bool     // refused with one_write_region=true too
	}{
		{"current version, eventual", map[string]any{
			"GlobalTableVersion": "2019.11.21",
			"Replicas":           []any{map[string]any{"RegionName": "eu-west-1", "ReplicaStatus": "ACTIVE"}, map[string]any{"RegionName": "us-west-2", "ReplicaStatus": "ACTIVE"}},
		}, []string{"eu-west-1, us-west-2", "last writer wins", "one_write_region=true"}, nil, false},
		{"strong consistency", map[string]any{
			"GlobalTableVersion":     "2019.11.21",
			"MultiRegionConsistency": "STRONG",
			"Replicas":               []any{map[string]any{"RegionName": "us-east-2", "ReplicaStatus": "ACTIVE"}},
		}, []string{"us-east-2", "consistency STRONG", "multi-Region strong consistency are not supported, with or without one_write_region=true"},
			[]string{"last writer wins"}, true},
		{"legacy version", map[string]any{"GlobalTableVersion": "2017.11.29"}, []string{"global table version 2017.11.29"}, nil, false},
		{"hostile region names", map[string]any{
			"GlobalTableVersion": "2019.11.21",
			"Replicas":           []any{map[string]any{"RegionName": "eu\x1b[31mred\nline", "ReplicaStatus": "ACTIVE"}},
		}, []string{`replicas in eu\x1B[31mred\nline.`}, []string{"\x1b", "\n"}, false},
		{"2000 replicas", map[string]any{
			"GlobalTableVersion": "2019.11.21",
			"Replicas":           manyReplicas(2000),
		}, []string{"replicas in r0, r1, r2, r3, r4 and 1995 more."}, []string{"r5"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			front := globalTableFront(t, endpoint, c.extra)
			_, err := dynamodb.Open(bg(t), via(front))
			if !errors.Is(err, dynamodb.ErrReplicatedTable) {
				t.Fatalf("Open of a global table's replica: %v, want ErrReplicatedTable", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal %q does not say %q", err, w)
				}
			}
			// With create=true too (the table exists: it is checked).
			if _, err := dynamodb.Open(bg(t), via(front, "create", "true")); !errors.Is(err, dynamodb.ErrReplicatedTable) {
				t.Errorf("Open with create=true: %v, want ErrReplicatedTable", err)
			}
			if err := dynamodb.Init(bg(t), via(front)); !errors.Is(err, dynamodb.ErrReplicatedTable) {
				t.Errorf("Init: %v, want ErrReplicatedTable", err)
			}
			for _, n := range c.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("the refusal %q says %q", err, n)
				}
			}
			s, err := dynamodb.Open(bg(t), via(front, "one_write_region", "true"))
			if c.never {
				if !errors.Is(err, dynamodb.ErrReplicatedTable) {
					t.Errorf("Open with one_write_region=true: %v, want ErrReplicatedTable", err)
				} else if !strings.Contains(err.Error(), c.want[len(c.want)-1]) {
					t.Errorf("Open with one_write_region=true: %v, want its own reason", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open with one_write_region=true: %v", err)
			}
			s.Close()
		})
	}
	// dynalite's own answer has no replica fields: opened as before.
	open(t, via(endpoint)).Close()
}

// manyReplicas is the Replicas field of an answer with n regions.
func manyReplicas(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"RegionName": fmt.Sprintf("r%d", i), "ReplicaStatus": "ACTIVE"}
	}
	return out
}
