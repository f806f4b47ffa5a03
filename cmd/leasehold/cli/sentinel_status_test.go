package cli

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/redissentinel"
)

// TestStatusSentinelsDisagree (issue 31 red team, Redis item 2, #7):
// sentinels of the URL that name different primaries, as during a
// SENTINEL FAILOVER, made "leasehold status" exit 64 (usage error); it is
// a store that cannot be used now: exit 70, saying the sentinels disagree.
func TestStatusSentinelsDisagree(t *testing.T) {
	d := redissentinel.Start(t, redissentinel.Options{})
	other := enginetest.StartRedis(t)
	stray := d.StraySentinel("127.0.0.1:" + strconv.Itoa(other.Port))
	url := strings.Replace(d.URL(""), "/"+redissentinel.MasterName, ","+stray.Addr()+"/"+redissentinel.MasterName, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := Main(ctx, []string{"status", "--store", url}, &stdout, &stderr)
	if code != ExitInternal || !strings.Contains(stderr.String(), "sentinels disagree on the primary (a failover in progress?)") {
		t.Errorf("status with sentinels that disagree: exit %d, stderr %q; want exit %d saying the sentinels disagree", code, stderr.String(), ExitInternal)
	}
}
