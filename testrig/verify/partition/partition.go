// Package partition holds suite R7 of the verification plan: network
// partitions around a 3-member etcd cluster. Each member runs in a network
// namespace of its own, and so do the clients (worker processes); all of
// them hang off one bridge, in a hub namespace, on a private subnet that
// exists only inside these namespaces (nothing is added to the host's own
// network). Partitions are nftables rules inside the members' namespaces
// that drop the traffic between chosen members, and between members and
// clients. The test (in the _test files) needs root, ip (iproute2) and nft
// (nftables); where they are missing it skips with a message, or fails
// where engines are required (CI). The package's second row, R7-kill,
// kills and restarts members of the 3-member cluster of scripts/engines.sh
// and needs no root.
//
// This file holds the network (Net), the etcd cluster on it (Cluster, which
// can kill and restart a member) and the helpers to reach into a namespace
// from the test process (DialIn, ListenIn), which other suites may reuse;
// members.go asks any etcd cluster's members for leader and term.
package partition

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Subnet is the private subnet of the namespaces: it exists only on their
// bridge, never in the host's network namespace, so it cannot clash with
// the host's addresses or another run's.
const Subnet = "198.18.0.0/24"

// Node is one network namespace on the bridge.
type Node struct {
	Name string // role: "n1".."n3" (members), "c0".. (clients)
	NS   string // network namespace (ip netns)
	IP   string
}

// Net is the namespaces of one run: a hub with the bridge, and nodes
// attached to it by veth pairs.
type Net struct {
	Tag     string
	Hub     string // the hub's namespace
	Members []Node
	Clients []Node

	mu      sync.Mutex
	blocked map[[2]string]bool // current partition, pairs of node names (sorted)
	static  map[[2]string]bool // pairs always blocked (clients limited to one member)
}

// Missing reports what R7 lacks on this machine, or "" if nothing: root,
// ip and nft, and, with those, whether a network namespace with an
// nftables table in it can be made (a container may forbid either).
func Missing() string {
	var miss []string
	if os.Geteuid() != 0 {
		miss = append(miss, "root")
	}
	if tool("ip") == "" {
		miss = append(miss, "ip (iproute2)")
	}
	if tool("nft") == "" {
		miss = append(miss, "nft (nftables)")
	}
	if len(miss) == 0 {
		if err := probe(); err != nil {
			miss = append(miss, "a network namespace with nftables ("+err.Error()+")")
		}
	}
	return strings.Join(miss, ", ")
}

// probe makes a network namespace, loads a table into its nftables and
// deletes the namespace.
func probe() error {
	ns := fmt.Sprintf("lhv-probe-%04x", rand.IntN(1<<16))
	if err := run("", IP(), "netns", "add", ns); err != nil {
		return err
	}
	defer run("", IP(), "netns", "del", ns)
	return run("table inet lhv_probe {\n\tchain in {\n\t\ttype filter hook input priority 0; policy accept;\n\t}\n}\n",
		IP(), "netns", "exec", ns, tool("nft"), "-f", "-")
}

// tool finds a system tool in PATH or the sbin directories (which a
// non-login root shell may lack in PATH).
func tool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// IP is the path of the ip tool.
func IP() string { return tool("ip") }

func run(stdin string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// NewNet builds the namespaces: a hub with a bridge, members n1..n(members)
// at .1, .2, ... and clients c0..c(clients-1) at .10, .11, ..., every one
// with its loopback up. Namespace names carry a random tag, so a run never
// collides with another or with the leftovers of a crashed one; they are
// all deleted when the test ends, whatever happened.
func NewNet(t testing.TB, members, clients int) *Net {
	t.Helper()
	n := &Net{Tag: fmt.Sprintf("%04x", rand.IntN(1<<16)), blocked: map[[2]string]bool{}, static: map[[2]string]bool{}}
	ipt := IP()
	ns := func(role string) string { return "lhv-" + n.Tag + "-" + role }
	var made []string
	t.Cleanup(func() {
		for _, s := range slices.Backward(made) {
			if err := run("", ipt, "netns", "del", s); err != nil {
				t.Logf("partition: %v", err)
			}
		}
	})
	add := func(s string) {
		if err := run("", ipt, "netns", "add", s); err != nil {
			t.Fatalf("partition: %v", err)
		}
		made = append(made, s)
		if err := run("", ipt, "-n", s, "link", "set", "lo", "up"); err != nil {
			t.Fatalf("partition: %v", err)
		}
	}
	n.Hub = ns("hub")
	add(n.Hub)
	must := func(args ...string) {
		t.Helper()
		if err := run("", ipt, args...); err != nil {
			t.Fatalf("partition: %v", err)
		}
	}
	must("-n", n.Hub, "link", "add", "br0", "type", "bridge")
	must("-n", n.Hub, "link", "set", "br0", "up")
	attach := func(role string, host int) Node {
		node := Node{Name: role, NS: ns(role), IP: fmt.Sprintf("198.18.0.%d", host)}
		add(node.NS)
		// Both ends are created inside their namespaces: nothing appears in
		// the host's.
		must("link", "add", "eth0", "netns", node.NS, "type", "veth", "peer", "name", role, "netns", n.Hub)
		must("-n", n.Hub, "link", "set", role, "master", "br0")
		must("-n", n.Hub, "link", "set", role, "up")
		must("-n", node.NS, "addr", "add", node.IP+"/24", "dev", "eth0")
		must("-n", node.NS, "link", "set", "eth0", "up")
		return node
	}
	for i := 1; i <= members; i++ {
		n.Members = append(n.Members, attach("n"+strconv.Itoa(i), i))
	}
	for i := 0; i < clients; i++ {
		n.Clients = append(n.Clients, attach("c"+strconv.Itoa(i), 10+i))
	}
	if err := n.apply(); err != nil {
		t.Fatalf("partition: %v", err)
	}
	return n
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Limit lets client reach only the member named only (for as long as the
// Net exists): its traffic with every other member is dropped.
func (n *Net) Limit(client, only string) error {
	n.mu.Lock()
	for _, m := range n.Members {
		if m.Name != only {
			n.static[pair(client, m.Name)] = true
		}
	}
	n.mu.Unlock()
	return n.apply()
}

// Partition replaces the current partition: traffic between the nodes of
// each pair (node names) is dropped, in both directions. Every pair must
// include a member (the rules are in the members' namespaces).
func (n *Net) Partition(pairs ...[2]string) error {
	n.mu.Lock()
	n.blocked = map[[2]string]bool{}
	for _, p := range pairs {
		n.blocked[pair(p[0], p[1])] = true
	}
	n.mu.Unlock()
	return n.apply()
}

// Heal removes the current partition (not the Limits).
func (n *Net) Heal() error { return n.Partition() }

func (n *Net) node(name string) Node {
	for _, x := range append(slices.Clone(n.Members), n.Clients...) {
		if x.Name == name {
			return x
		}
	}
	return Node{}
}

// apply writes each member's rules: one table whose input and output
// chains drop the addresses it must not reach, replaced atomically (one
// nft transaction per namespace).
func (n *Net) apply() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	nftp := tool("nft")
	for _, m := range n.Members {
		var peers []string
		for _, set := range []map[[2]string]bool{n.static, n.blocked} {
			for p := range set {
				switch m.Name {
				case p[0]:
					peers = append(peers, n.node(p[1]).IP)
				case p[1]:
					peers = append(peers, n.node(p[0]).IP)
				}
			}
		}
		sort.Strings(peers)
		peers = slices.Compact(peers)
		var rules string
		if len(peers) > 0 {
			set := "{ " + strings.Join(peers, ", ") + " }"
			rules = fmt.Sprintf("\t\tip saddr %s drop\n", set)
		}
		var out string
		if len(peers) > 0 {
			out = fmt.Sprintf("\t\tip daddr { %s } drop\n", strings.Join(peers, ", "))
		}
		script := "table inet lhv_r7\ndelete table inet lhv_r7\ntable inet lhv_r7 {\n" +
			"\tchain in {\n\t\ttype filter hook input priority 0; policy accept;\n" + rules + "\t}\n" +
			"\tchain out {\n\t\ttype filter hook output priority 0; policy accept;\n" + out + "\t}\n}\n"
		if err := run(script, IP(), "netns", "exec", m.NS, nftp, "-f", "-"); err != nil {
			return err
		}
	}
	return nil
}

// InNS runs f on an OS thread that has entered namespace ns. The thread is
// never used again (its goroutine ends locked to it, so the runtime
// discards it). Sockets f creates stay in ns.
func InNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		fd, err := unix.Open(filepath.Join("/run/netns", ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// DialIn returns a DialContext that connects from inside namespace ns.
func DialIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := InNS(ns, func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// ListenIn listens on addr inside namespace ns.
func ListenIn(ns, addr string) (net.Listener, error) {
	var ln net.Listener
	err := InNS(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// Forward accepts connections on ln and copies each to and from a new
// connection to target (dialled from the test process's own namespace),
// until ln is closed.
func Forward(ln net.Listener, target string) { ForwardVia(ln, target, nil) }

// ForwardVia is Forward with the connections to target made by dial (nil:
// from the test process's own namespace; DialIn(ns): from inside ns).
func ForwardVia(ln net.Listener, target string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := dial(context.Background(), "tcp", target)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			go func() { io.Copy(c, u); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

// Cluster is an etcd cluster with one member in each member namespace of
// a Net; its Members ask them for their status from a client namespace.
type Cluster struct {
	*Members
	Net  *Net
	from string // client node the test's own requests come from

	pmu   sync.Mutex
	procs []*exec.Cmd // each member's current process
	args  [][]string  // each member's command line (ip netns exec ...)
	dir   string      // data directories and logs
}

// ClientPort and PeerPort are each member's etcd ports.
const ClientPort, PeerPort = 2379, 2380

// StartEtcd starts the etcd binary bin as one member in every member
// namespace of n and waits until they agree on a leader, asking from the
// namespace of the client node named from. The members log to files in a temporary directory
// and are killed when the test ends.
func StartEtcd(t testing.TB, n *Net, bin, from string) *Cluster {
	t.Helper()
	ns := n.node(from).NS
	if ns == "" {
		t.Fatalf("partition: no node %q", from)
	}
	var addrs, names []string
	for _, m := range n.Members {
		addrs, names = append(addrs, fmt.Sprintf("%s:%d", m.IP, ClientPort)), append(names, m.Name)
	}
	c := &Cluster{Members: NewMembers(addrs, names, DialIn(ns)), Net: n, from: from, dir: t.TempDir()}
	var initial []string
	for _, m := range n.Members {
		initial = append(initial, fmt.Sprintf("%s=http://%s:%d", m.Name, m.IP, PeerPort))
	}
	for _, m := range n.Members {
		client, peer := fmt.Sprintf("http://%s:%d", m.IP, ClientPort), fmt.Sprintf("http://%s:%d", m.IP, PeerPort)
		c.args = append(c.args, []string{"netns", "exec", m.NS, bin, "--name", m.Name, "--data-dir", filepath.Join(c.dir, m.Name),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "lhv-" + n.Tag})
		c.procs = append(c.procs, nil)
	}
	t.Cleanup(func() {
		c.pmu.Lock()
		defer c.pmu.Unlock()
		for i := range c.procs {
			c.kill(i)
		}
	})
	for i := range n.Members {
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		l, err := c.Leader()
		if err == nil && l >= 0 {
			return c
		}
		if time.Now().After(deadline) {
			logs, _ := os.ReadFile(filepath.Join(c.dir, n.Members[0].Name+".log"))
			t.Fatalf("etcd cluster has no leader after 60s (%v); %s's log ends:\n%s", err, n.Members[0].Name, tail(string(logs), 20))
		}
	}
}

// RaftEvents returns the last lines (at most n per member) of each
// member's log that tell of raft terms and leaders (became follower,
// candidate or leader; elected or lost a leader), for a failure's report.
// etcd stamps them with the wall clock.
func (c *Cluster) RaftEvents(n int) string {
	var b strings.Builder
	for _, m := range c.Net.Members {
		logs, err := os.ReadFile(filepath.Join(c.dir, m.Name+".log"))
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", m.Name, err)
			continue
		}
		var keep []string
		for _, line := range strings.Split(string(logs), "\n") {
			if raftEvent(line) {
				keep = append(keep, line)
			}
		}
		fmt.Fprintf(&b, "%s (%d such lines, the last %d):\n%s\n", m.Name, len(keep), min(n, len(keep)), strings.Join(keep[max(0, len(keep)-n):], "\n"))
	}
	return b.String()
}

func raftEvent(line string) bool {
	for _, e := range []string{" became follower", " became candidate", " became pre-candidate", " became leader", " elected leader", " lost leader"} {
		if strings.Contains(line, e) {
			return true
		}
	}
	return false
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// Endpoints are the members' client addresses, for an etcd store URL.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Net.Members {
		out = append(out, fmt.Sprintf("%s:%d", m.IP, ClientPort))
	}
	return out
}

// Kill SIGKILLs member i (its process group) and waits until it is gone.
func (c *Cluster) Kill(i int) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	c.kill(i)
}

func (c *Cluster) kill(i int) {
	if cmd := c.procs[i]; cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		c.procs[i] = nil
	}
}

// Signal sends sig to member i's process group (SIGSTOP, SIGCONT), if it
// is running.
func (c *Cluster) Signal(i int, sig syscall.Signal) error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if cmd := c.procs[i]; cmd != nil {
		return syscall.Kill(-cmd.Process.Pid, sig)
	}
	return fmt.Errorf("etcd %s is not running", c.Net.Members[i].Name)
}

// Restart starts member i again, on its data directory (etcd then ignores
// the --initial-cluster flags), if it is not running; its log goes on in
// the same file. It does not wait for the member to rejoin.
func (c *Cluster) Restart(i int) error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.procs[i] != nil {
		return nil
	}
	name := c.Net.Members[i].Name
	logf, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(IP(), c.args[i]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd %s: %v", name, err)
	}
	c.procs[i] = cmd
	return nil
}
