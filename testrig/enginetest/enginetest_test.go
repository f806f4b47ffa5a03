package enginetest_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/testrig/enginetest"
)

func TestPrivateServersRestart(t *testing.T) {
	for _, e := range enginetest.Engines {
		if e.Kind != enginetest.External {
			continue
		}
		s := e.Start(t)
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
