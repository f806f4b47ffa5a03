package serverbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// durableRedis is a redis-server the suite starts itself with every write
// logged and fsynced before its reply (appendonly yes, appendfsync always),
// its files in the same data directory as the lease server's log, so that
// both durable rows pay the same disk.
type durableRedis struct {
	url    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	dir    string
}

// startDurableRedis starts bin on a free loopback port below the ephemeral
// range (an outgoing connection cannot take it between the check and the
// start; a port taken anyway is retried).
func startDurableRedis(ctx context.Context, bin, dataDir string) (*durableRedis, error) {
	dir := filepath.Join(dataDir, "redis-aof")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var last error
	for range 8 {
		port := 20000 + rand.IntN(10000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			last = err
			continue
		}
		l.Close()
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--dir", dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
			"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("redis with appendfsync always: %w", err)
		}
		r := &durableRedis{url: fmt.Sprintf("redis://127.0.0.1:%d/0", port), cmd: cmd, dir: dir, exited: make(chan struct{})}
		go func() { cmd.Wait(); close(r.exited) }()
		if err := r.ready(ctx); err != nil {
			r.stop()
			last = err
			continue
		}
		return r, nil
	}
	return nil, fmt.Errorf("redis with appendfsync always did not start: %w", last)
}

func (r *durableRedis) ready(ctx context.Context) error {
	opt, err := goredis.ParseURL(r.url)
	if err != nil {
		return err
	}
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-r.exited:
			return errors.New("redis-server exited at start (see redis.log in its data directory)")
		default:
		}
		if rdb.Ping(ctx).Err() == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("redis-server did not answer within 10 s")
}

func (r *durableRedis) stop() {
	r.cmd.Process.Kill()
	<-r.exited
	os.RemoveAll(r.dir)
}
