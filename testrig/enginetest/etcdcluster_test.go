package enginetest_test

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestEtcdClusterMember checks the 3-member etcd cluster of
// scripts/engines.sh: its URL names three members that form one cluster,
// and its control script kills member 3 (its client port closes) and
// starts it again on its data, as a process that engines.sh's stop will
// recognise (the pid file names it and its command line names the
// cluster's directory); the member then answers with a leader again.
func TestEtcdClusterMember(t *testing.T) {
	cl := enginetest.SharedEtcdCluster(t)
	t.Cleanup(func() { _ = cl.Start(3) })
	dir := filepath.Dir(os.Getenv(enginetest.EtcdClusterCtlVar))
	status := func(addr string) (leader string, members int, err error) {
		c := &http.Client{Timeout: 2 * time.Second}
		resp, err := c.Post("http://"+addr+"/v3/cluster/member/list", "application/json", strings.NewReader("{}"))
		if err != nil {
			return "", 0, err
		}
		var list struct{ Members []json.RawMessage }
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			return "", 0, err
		}
		resp, err = c.Post("http://"+addr+"/v3/maintenance/status", "application/json", strings.NewReader("{}"))
		if err != nil {
			return "", 0, err
		}
		defer resp.Body.Close()
		var st struct{ Leader string }
		err = json.NewDecoder(resp.Body).Decode(&st)
		return st.Leader, len(list.Members), err
	}
	if _, n, err := status(cl.Addrs[0]); err != nil || n != 3 {
		t.Fatalf("member 1: %d members (%v), want 3", n, err)
	}
	pidOf := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "n3.pid"))
		return strings.TrimSpace(string(b))
	}
	before := pidOf()
	if err := cl.Kill(3); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", cl.Addrs[2], time.Second); err == nil {
		c.Close()
		t.Fatalf("member 3 still listens on %s after kill", cl.Addrs[2])
	}
	if err := cl.Start(3); err != nil {
		t.Fatal(err)
	}
	after := pidOf()
	if after == "" || after == before {
		t.Fatalf("pid file of member 3: %q before the kill, %q after the start", before, after)
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", after, "cmdline"))
	if err != nil || !strings.Contains(string(cmdline), dir) {
		t.Fatalf("process %s (member 3 restarted) does not name %s on its command line: %q, %v", after, dir, cmdline, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		leader, n, err := status(cl.Addrs[2])
		if err == nil && n == 3 && leader != "" && leader != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member 3 has no leader 30 s after its restart (%q, %d members, %v)", leader, n, err)
		}
	}
}
