// Package redissentinel starts a private Redis deployment managed by
// Sentinel, on loopback ports in a test's temporary directory: one
// primary, two replicas and three sentinels (redis-server in its sentinel
// mode, which every redis-server binary has), all stopped when the test
// ends. Tests fail the primary over (SENTINEL FAILOVER, or SIGKILL and a
// promotion by the sentinels) and follow it through the sentinels.
package redissentinel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/testrig/enginetest"
)

// MasterName is the name the sentinels monitor the primary by.
const MasterName = "lh"

// Options shape a deployment. Zero values take the defaults.
type Options struct {
	// DownAfter is the sentinels' down-after-milliseconds: how long the
	// primary must be unreachable before it counts as down (default 1s).
	DownAfter time.Duration
	// FailoverTimeout is the sentinels' failover-timeout (default 3s); a
	// sentinel does not start another failover of the same primary
	// within twice it.
	FailoverTimeout time.Duration
	// Extra arguments of every redis-server (default: no persistence,
	// as most Redis servers run: --save "" --appendonly no).
	Extra []string
	// NoPromote lists nodes the sentinels never promote
	// (replica-priority 0), to make a failover pick a given replica.
	NoPromote []int
}

// Deployment is one primary, its replicas and the sentinels watching them.
type Deployment struct {
	t         testing.TB
	bin       string
	opt       Options
	Nodes     []*Proc // the Redis servers; Nodes[0] is the first primary
	Sentinels []*Proc
}

// Proc is one process of the deployment: a redis-server or a sentinel.
type Proc struct {
	Port  int
	Dir   string
	argv  []string
	extra []string // this node's own redis-server arguments
	cmd   *exec.Cmd
}

// Addr is the process's host:port.
func (p *Proc) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.Port) }

// Running reports whether the process was started and not killed.
func (p *Proc) Running() bool { return p.cmd != nil }

// Start starts a deployment for the test and stops it when the test
// ends. Without redis-server it skips or fails as enginetest.Missing says.
func Start(t testing.TB, opt Options) *Deployment {
	t.Helper()
	bin := os.Getenv("LEASEHOLD_REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			enginetest.Missing(t, "redis-server", "Redis with Sentinel needs redis-server in PATH")
		}
	}
	if opt.DownAfter <= 0 {
		opt.DownAfter = time.Second
	}
	if opt.FailoverTimeout <= 0 {
		opt.FailoverTimeout = 3 * time.Second
	}
	if opt.Extra == nil {
		opt.Extra = []string{"--save", "", "--appendonly", "no"}
	}
	d := &Deployment{t: t, bin: bin, opt: opt}
	t.Cleanup(d.stop)
	root := t.TempDir()
	for i := range 3 {
		p := &Proc{Port: enginetest.FreePort(t), Dir: filepath.Join(root, fmt.Sprintf("redis%d", i))}
		d.Nodes = append(d.Nodes, p)
	}
	for i, p := range d.Nodes {
		var of string
		if i > 0 {
			of = d.Nodes[0].Addr()
		}
		if slices.Contains(opt.NoPromote, i) {
			p.extra = []string{"--replica-priority", "0"}
		}
		d.startNode(p, of)
	}
	for i := range 3 {
		d.Sentinels = append(d.Sentinels, d.startSentinel(filepath.Join(root, fmt.Sprintf("sentinel%d", i)), d.Nodes[0].Addr(), 2))
	}
	// Ready when every sentinel knows the primary, both replicas and
	// the other sentinels.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range d.Sentinels {
		c := goredis.NewSentinelClient(&goredis.Options{Addr: s.Addr()})
		for {
			m, err := c.Master(ctx, MasterName).Result()
			if err == nil && m["num-slaves"] == "2" && m["num-other-sentinels"] == "2" && !strings.Contains(m["flags"], "down") {
				break
			}
			if ctx.Err() != nil {
				c.Close()
				t.Fatalf("sentinel %s not ready in 1m: %v %v\n%s", s.Addr(), m, err, d.Logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return d
}

// startSentinel starts a sentinel in dir that monitors the primary at
// addr under MasterName with the given quorum.
func (d *Deployment) startSentinel(dir, addr string, quorum int) *Proc {
	t := d.t
	p := &Proc{Port: enginetest.FreePort(t), Dir: dir}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(p.Dir, "sentinel.conf")
	text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
sentinel monitor %s %s %s %d
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 2
`, p.Port, p.Dir, MasterName, host, port, quorum, MasterName, d.opt.DownAfter.Milliseconds(),
		MasterName, d.opt.FailoverTimeout.Milliseconds(), MasterName)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p.argv = []string{d.bin, conf, "--sentinel"}
	d.start(p)
	return p
}

// StraySentinel starts a sentinel outside the deployment's that monitors
// another Redis, at addr, under the same MasterName: a deployment error
// (the URL naming sentinels of two groups). It is stopped with the
// deployment and is not one of Sentinels.
func (d *Deployment) StraySentinel(addr string) *Proc {
	p := d.startSentinel(filepath.Join(d.t.TempDir(), "stray-sentinel"), addr, 1)
	d.t.Cleanup(p.Kill)
	return p
}

// startNode starts a redis-server, a replica of of unless it is "".
func (d *Deployment) startNode(p *Proc, of string) {
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		d.t.Fatal(err)
	}
	p.argv = append([]string{d.bin, "--port", strconv.Itoa(p.Port), "--bind", "127.0.0.1",
		"--dir", p.Dir, "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}, d.opt.Extra...)
	p.argv = append(p.argv, p.extra...)
	if of != "" {
		h, port, _ := net.SplitHostPort(of)
		p.argv = append(p.argv, "--replicaof", h, port)
	}
	d.start(p)
}

func (d *Deployment) start(p *Proc) {
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Dir = p.Dir
	logf, err := os.OpenFile(filepath.Join(p.Dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		d.t.Fatalf("start %v: %v", p.argv, err)
	}
	logf.Close()
	p.cmd = cmd
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%v did not listen in 30s:\n%s", p.argv, readLog(p))
		}
	}
}

// Kill sends SIGKILL to the process and waits for it.
func (p *Proc) Kill() {
	if p.cmd == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Wait()
	p.cmd = nil
}

func (d *Deployment) stop() {
	for _, p := range append(append([]*Proc(nil), d.Sentinels...), d.Nodes...) {
		p.Kill()
	}
}

func readLog(p *Proc) string {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Logs returns the tail of every process's log, for a failure message.
func (d *Deployment) Logs() string {
	var b strings.Builder
	for _, p := range append(append([]*Proc(nil), d.Nodes...), d.Sentinels...) {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p.Addr(), filepath.Base(p.Dir), readLog(p))
	}
	return b.String()
}

// URL returns the redis+sentinel:// URL of the deployment, with query
// (without its "?") appended if not empty.
func (d *Deployment) URL(query string) string {
	addrs := make([]string, len(d.Sentinels))
	for i, s := range d.Sentinels {
		addrs[i] = s.Addr()
	}
	u := "redis+sentinel://" + strings.Join(addrs, ",") + "/" + MasterName
	if query != "" {
		u += "?" + query
	}
	return u
}

// Client returns a plain client of node i (closed when the test ends).
func (d *Deployment) Client(i int) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: d.Nodes[i].Addr(), MaxRetries: -1})
	d.t.Cleanup(func() { c.Close() })
	return c
}

// node returns the index of the node at addr, or -1.
func (d *Deployment) node(addr string) int {
	for i, p := range d.Nodes {
		if p.Addr() == addr {
			return i
		}
	}
	return -1
}

// Primary returns the index of the node every running sentinel names as
// the primary, and whether they agree and it answers as a primary.
func (d *Deployment) Primary(ctx context.Context) (int, bool) {
	idx := -1
	for _, s := range d.Sentinels {
		c := goredis.NewSentinelClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
		a, err := c.GetMasterAddrByName(ctx, MasterName).Result()
		c.Close()
		if err != nil || len(a) != 2 {
			return -1, false
		}
		i := d.node(net.JoinHostPort(a[0], a[1]))
		if i < 0 || (idx >= 0 && i != idx) {
			return -1, false
		}
		idx = i
	}
	c := goredis.NewClient(&goredis.Options{Addr: d.Nodes[idx].Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(info, "role:master") {
		return idx, false
	}
	return idx, true
}

// WaitPrimary waits until the sentinels agree on a primary other than
// old (-1: any) that answers as one, and returns its index.
func (d *Deployment) WaitPrimary(ctx context.Context, old int) (int, error) {
	for {
		if i, ok := d.Primary(ctx); ok && i != old {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no new primary (old: node %d): %w", old, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Failover asks a sentinel to fail the primary over (SENTINEL FAILOVER:
// a replica is promoted and the old primary made its replica, both alive)
// and waits until the new primary is in place. It retries while the
// sentinels refuse (a failover still in progress, no replica ready).
func (d *Deployment) Failover(ctx context.Context) (old, cur int, err error) {
	old, err = d.WaitPrimary(ctx, -1)
	if err != nil {
		return -1, -1, err
	}
	if err := d.replicasSynced(ctx, old); err != nil {
		return old, -1, err
	}
	// A failover the sentinels accepted can still be aborted (the
	// promoted replica did not report itself a primary within the
	// failover timeout on a loaded machine): ask again after a while.
	for n := 0; ; n++ {
		s := d.Sentinels[n%len(d.Sentinels)]
		c := goredis.NewSentinelClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
		err = c.Failover(ctx, MasterName).Err()
		c.Close()
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, 2*d.opt.FailoverTimeout+5*time.Second)
			cur, err = d.WaitPrimary(wctx, old)
			cancel()
			if err == nil {
				return old, cur, nil
			}
		}
		select {
		case <-ctx.Done():
			return old, -1, fmt.Errorf("SENTINEL FAILOVER: %v (%w)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// KillPrimary sends SIGKILL to the primary, waits until the sentinels
// promoted a replica, and starts the killed server again as a replica of
// the new primary (empty, as it was killed without persistence). It
// returns the indexes of the old and new primary, and when the old one
// was killed and the new one answered, on time.Now.
func (d *Deployment) KillPrimary(ctx context.Context) (old, cur int, killed, promoted time.Time, err error) {
	old, err = d.WaitPrimary(ctx, -1)
	if err != nil {
		return -1, -1, killed, promoted, err
	}
	if err := d.replicasSynced(ctx, old); err != nil {
		return old, -1, killed, promoted, err
	}
	killed = time.Now()
	d.Nodes[old].Kill()
	cur, err = d.WaitPrimary(ctx, old)
	promoted = time.Now()
	if err != nil {
		return old, cur, killed, promoted, err
	}
	d.startNode(d.Nodes[old], d.Nodes[cur].Addr())
	return old, cur, killed, promoted, nil
}

// replicasSynced waits until every other running node replicates the
// primary with its link up, so that a failover has a replica to promote.
func (d *Deployment) replicasSynced(ctx context.Context, primary int) error {
	for {
		ok := true
		for i, p := range d.Nodes {
			if i == primary || !p.Running() {
				continue
			}
			c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), MaxRetries: -1})
			info, err := c.Info(ctx, "replication").Result()
			c.Close()
			if err != nil || !strings.Contains(info, "master_link_status:up") ||
				!strings.Contains(info, "master_port:"+strconv.Itoa(d.Nodes[primary].Port)) {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("replicas not in sync with the primary: " + ctx.Err().Error())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Signal sends sig to the process (SIGSTOP and SIGCONT pause and resume
// it).
func (p *Proc) Signal(sig syscall.Signal) {
	if p.cmd != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// LagAndKill makes the replicas fall behind and then loses the primary:
// it stops every replica (SIGSTOP) and cuts their links (CLIENT KILL TYPE
// replica on the primary), waits lag while the primary goes on
// acknowledging writes, SIGKILLs the primary, resumes the replicas, waits
// until the sentinels promoted one of them (which lacks what the primary
// acknowledged during lag) and starts the killed server again as a
// replica of the new primary; onKill, if not nil, runs right after the
// kill. It returns the indexes of the old and new primary and, on
// time.Now, when the replicas were stopped (the state of
// the promoted one is from then) and when the new primary answered.
func (d *Deployment) LagAndKill(ctx context.Context, lag time.Duration, onKill func()) (old, cur int, stopped, promoted time.Time, err error) {
	old, err = d.WaitPrimary(ctx, -1)
	if err != nil {
		return -1, -1, stopped, promoted, err
	}
	if err := d.replicasSynced(ctx, old); err != nil {
		return old, -1, stopped, promoted, err
	}
	stopped = time.Now()
	for i, p := range d.Nodes {
		if i != old {
			p.Signal(syscall.SIGSTOP)
		}
	}
	// Cut the replication links too: what the primary had sent would
	// otherwise wait in the stopped replicas' socket buffers and reach
	// them when they resume. The stopped replicas cannot reconnect.
	pc := goredis.NewClient(&goredis.Options{Addr: d.Nodes[old].Addr(), MaxRetries: -1})
	err = pc.ClientKillByFilter(ctx, "TYPE", "replica").Err()
	pc.Close()
	if err != nil {
		for i, p := range d.Nodes {
			if i != old {
				p.Signal(syscall.SIGCONT)
			}
		}
		return old, -1, stopped, promoted, fmt.Errorf("CLIENT KILL TYPE replica: %w", err)
	}
	time.Sleep(lag)
	d.Nodes[old].Kill()
	if onKill != nil {
		onKill()
	}
	for i, p := range d.Nodes {
		if i != old {
			p.Signal(syscall.SIGCONT)
		}
	}
	cur, err = d.WaitPrimary(ctx, old)
	promoted = time.Now()
	if err != nil {
		return old, cur, stopped, promoted, err
	}
	d.startNode(d.Nodes[old], d.Nodes[cur].Addr())
	return old, cur, stopped, promoted, nil
}

// Restart starts node i again (after Kill, or kills it first) with its
// own data directory, so a node with persistence reloads what it had: as
// a primary when of is -1, else as a replica of node of.
func (d *Deployment) Restart(i, of int) {
	d.Nodes[i].Kill()
	addr := ""
	if of >= 0 {
		addr = d.Nodes[of].Addr()
	}
	d.startNode(d.Nodes[i], addr)
}

// Replica reports whether node i answers as a replica of node of.
func (d *Deployment) Replica(ctx context.Context, i, of int) bool {
	c := goredis.NewClient(&goredis.Options{Addr: d.Nodes[i].Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	return err == nil && strings.Contains(info, "role:slave") &&
		strings.Contains(info, "master_port:"+strconv.Itoa(d.Nodes[of].Port))
}

// WaitReplica waits until node i answers as a replica of node of.
func (d *Deployment) WaitReplica(ctx context.Context, i, of int) error {
	for !d.Replica(ctx, i, of) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %d is not a replica of node %d: %w", i, of, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
