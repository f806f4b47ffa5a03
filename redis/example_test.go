package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

// The server Example talks to; TestExample points them at a test server.
var (
	exampleStoreURL = "redis://127.0.0.1:6379/0?holdback=30s"
	exampleDataURL  = "redis://127.0.0.1:6379/0"
)

// Take a lease on Redis and fence the write it protects: the value is
// stored with the lease's token, and a writer whose lease was taken over
// (it has a smaller token) is refused.
func Example() {
	ctx := context.Background()
	store, err := redis.Open(ctx, exampleStoreURL)
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer store.Close()
	client, err := leasehold.New(store, leasehold.WithOwner("report-writer"))
	if err != nil {
		fmt.Println(err)
		return
	}
	lease, err := client.Acquire(ctx, "reports/nightly", leasehold.TTL(15*time.Second))
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println("holding reports/nightly")

	// The protected resource lives in Redis too: write it fenced.
	opt, _ := goredis.ParseURL(exampleDataURL)
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	if err := redis.FencedSet(ctx, rdb, "reports:nightly", "done", lease.Token()); err != nil {
		fmt.Println("write:", err)
		return
	}
	// A writer with an older token (a holder whose lease expired while it
	// was stalled) is refused.
	err = redis.FencedSet(ctx, rdb, "reports:nightly", "stale", lease.Token()-1)
	fmt.Println("stale write refused:", errors.Is(err, redis.ErrFenced))
	value, _, _ := redis.FencedGet(ctx, rdb, "reports:nightly")
	fmt.Println("stored:", value)
}

// TestExample runs Example against a test server and checks its output.
func TestExample(t *testing.T) {
	// A fresh test server would hold back the first grant for 30s.
	url := sharedURL(t)
	exampleStoreURL, exampleDataURL = url+"?holdback=0s", url
	out := captureStdout(t, Example)
	want := "holding reports/nightly\nstale write refused: true\nstored: done\n"
	if out != want {
		t.Errorf("Example printed:\n%s\nwant:\n%s", out, want)
	}
}

func captureStdout(t *testing.T, f func()) string {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, r)
		done <- b.String()
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	os.Stdout = old
	return strings.ReplaceAll(<-done, "\r\n", "\n")
}
