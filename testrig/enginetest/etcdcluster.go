package enginetest

import (
	"bytes"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// EtcdClusterVar and EtcdClusterCtlVar name what scripts/engines.sh
// exports for its 3-member etcd cluster on loopback: the store URL with
// the three endpoints (etcd://h1,h2,h3/), and a script that kills and
// restarts a member ("kill N", "start N"; engines.sh etcd-member), so
// that the processes stay the script's: their pids are where its stop
// finds them.
const (
	EtcdClusterVar    = "LEASEHOLD_TEST_ETCD_CLUSTER"
	EtcdClusterCtlVar = "LEASEHOLD_TEST_ETCD_CLUSTER_CTL"
)

// EtcdCluster is the shared 3-member etcd cluster of scripts/engines.sh.
// Only a fault suite that needs a cluster uses it (R7's member kills);
// the other etcd tests use the single-member LEASEHOLD_TEST_ETCD.
type EtcdCluster struct {
	URL   string   // store URL, all three endpoints, path "/"
	Addrs []string // each member's client address (host:port), member 1 first
	ctl   string
}

// SharedEtcdCluster returns the shared cluster; without one, see
// [Missing].
func SharedEtcdCluster(t testing.TB) EtcdCluster {
	t.Helper()
	raw := envOrMissing(t, EtcdClusterVar, "etcd cluster")
	ctl := envOrMissing(t, EtcdClusterCtlVar, "etcd cluster")
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "etcd" || u.Host == "" {
		t.Fatalf("$%s=%q is not an etcd://host:port,host:port,host:port/ URL (%v)", EtcdClusterVar, raw, err)
	}
	addrs := strings.Split(u.Host, ",")
	if len(addrs) != 3 {
		t.Fatalf("$%s=%q names %d endpoints, want 3", EtcdClusterVar, raw, len(addrs))
	}
	return EtcdCluster{URL: raw, Addrs: addrs, ctl: ctl}
}

// Kill SIGKILLs member i (1-3) and returns once its process is gone.
func (c EtcdCluster) Kill(i int) error { return c.member("kill", i) }

// Start starts member i (1-3) again on its data if it is not running, and
// returns once it listens on its client port (not once it has caught up).
func (c EtcdCluster) Start(i int) error { return c.member("start", i) }

func (c EtcdCluster) member(action string, i int) error {
	var out bytes.Buffer
	cmd := exec.Command(c.ctl, action, strconv.Itoa(i))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("etcd cluster member %d %s: %v: %s", i, action, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}
