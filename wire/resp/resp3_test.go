package resp

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestRESP3Append: the RESP3 writers' exact bytes.
func TestRESP3Append(t *testing.T) {
	rec := &leasehold.Record{
		Name: "jobs/a", Owner: "me", Token: 7, TTL: 30 * time.Second,
		Remaining: 1500*time.Millisecond + 1, Acquired: time.UnixMilli(1700000000000), Data: []byte("d"),
	}
	grant := ":7\r\n$6\r\nttl_ms\r\n:30000\r\n$12\r\nremaining_ms\r\n:1501\r\n" +
		"$16\r\nacquired_unix_ms\r\n:1700000000000\r\n$4\r\ndata\r\n$1\r\nd\r\n"
	for _, tc := range []struct{ what, got, want string }{
		{"AppendMap", string(AppendMap(nil, 3)), "%3\r\n"},
		{"AppendPush", string(AppendPush(nil, 2)), ">2\r\n"},
		{"AppendNull3", string(AppendNull3(nil)), "_\r\n"},
		{"AppendGrantMap", string(AppendGrantMap(nil, rec)), "%5\r\n$5\r\ntoken\r\n" + grant},
		{"AppendGrantMapSecret", string(AppendGrantMapSecret(nil, rec, "s")), "%6\r\n$5\r\ntoken\r\n" + grant + "$6\r\nsecret\r\n$1\r\ns\r\n"},
		{"AppendRecordMap", string(AppendRecordMap(nil, rec)), "%7\r\n$4\r\nname\r\n$6\r\njobs/a\r\n$5\r\nowner\r\n$2\r\nme\r\n$5\r\ntoken\r\n" + grant},
		{"AppendGrantMap, no data", string(AppendGrantMap(nil, &leasehold.Record{Token: 1})),
			"%5\r\n$5\r\ntoken\r\n:1\r\n$6\r\nttl_ms\r\n:0\r\n$12\r\nremaining_ms\r\n:0\r\n$16\r\nacquired_unix_ms\r\n:0\r\n$4\r\ndata\r\n$0\r\n\r\n"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.what, tc.got, tc.want)
		}
	}
	if len(GrantFields) != GrantLen || len(RecordFields) != RecordLen {
		t.Errorf("%d grant and %d record labels, want %d and %d", len(GrantFields), len(RecordFields), GrantLen, RecordLen)
	}
}
