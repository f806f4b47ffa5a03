package serverbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/server"
)

// The server as a process of its own, as the Redis references are: the
// client's goroutines and the server's then do not share one Go runtime
// (its scheduler, its garbage collector), and the operating system
// schedules the two processes on the machine's cores as it schedules
// redis-server and the client. The child is this very executable, started
// again with childEnv set: ServeChild must be the first thing main (or
// TestMain) calls.

const childEnv = "LEASEHOLD_BENCH_SERVER_CHILD"

// childConfig is what the parent passes to the child, in childEnv.
type childConfig struct {
	dir      string
	noSync   bool
	logSyncs int
}

func (c childConfig) encode() string {
	return strconv.FormatBool(c.noSync) + "," + strconv.Itoa(c.logSyncs) + "," + c.dir
}

func decodeChild(s string) (childConfig, error) {
	parts := strings.SplitN(s, ",", 3)
	if len(parts) != 3 {
		return childConfig{}, fmt.Errorf("%s: want nosync,logsyncs,dir, got %q", childEnv, s)
	}
	noSync, err := strconv.ParseBool(parts[0])
	if err != nil {
		return childConfig{}, err
	}
	logSyncs, err := strconv.Atoi(parts[1])
	if err != nil {
		return childConfig{}, err
	}
	return childConfig{dir: parts[2], noSync: noSync, logSyncs: logSyncs}, nil
}

// ServeChild returns at once unless this process was started by the suite
// as a server child. Then it opens the engine, serves RESP on a loopback
// port it prints as its first line of output, and exits when its standard
// input ends (the parent closed it, or died).
func ServeChild() {
	spec, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	if err := serveChild(spec); err != nil {
		fmt.Fprintln(os.Stderr, "bench server child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveChild(spec string) error {
	cfg, err := decodeChild(spec)
	if err != nil {
		return err
	}
	e, err := server.OpenEngine(server.EngineConfig{Dir: cfg.dir, NoSync: cfg.noSync, LogSyncs: cfg.logSyncs})
	if err != nil {
		return err
	}
	defer e.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	rs := server.NewRESPServer(e, server.RESPOptions{})
	go rs.Serve(ln)
	fmt.Println(ln.Addr().String())
	io.Copy(io.Discard, os.Stdin) // until the parent closes it or dies
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rs.Shutdown(ctx)
}

// serverProcess is a running child.
type serverProcess struct {
	cmd   *exec.Cmd
	stdin io.Closer
	addr  string
}

// startServerProcess starts the child for cfg and waits for its address.
func startServerProcess(cfg childConfig) (*serverProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+cfg.encode())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serverProcess{cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case p.addr = <-line:
	case <-time.After(30 * time.Second):
	}
	if _, _, err := net.SplitHostPort(p.addr); err != nil {
		p.stop()
		return nil, errors.New("the server child did not report its address")
	}
	return p, nil
}

// stop ends the child: its input closed, then killed if it has not
// exited within 10 s.
func (p *serverProcess) stop() {
	p.stdin.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}
