package enginetest_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/internal/enginetest"
)

func TestPrivateServersRestart(t *testing.T) {
	for _, start := range []func(testing.TB, ...string) *enginetest.Server{
		enginetest.StartRedis,
		func(t testing.TB, _ ...string) *enginetest.Server { return enginetest.StartPostgres(t) },
		func(t testing.TB, _ ...string) *enginetest.Server { return enginetest.StartEtcd(t) },
		func(t testing.TB, _ ...string) *enginetest.Server { return enginetest.StartDynalite(t) },
	} {
		s := start(t)
		s.Restart()
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(s.Port))
		if err != nil {
			t.Fatalf("not listening after restart: %v", err)
		}
		c.Close()
		s.Kill()
		if _, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(s.Port)); err == nil {
			t.Fatal("still listening after Kill")
		}
	}
}
