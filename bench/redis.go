package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

var casDelete = goredislib.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

func redisLockers(ctx context.Context, url string) ([]locker, error) {
	opt, err := goredislib.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.PoolSize = 64
	rdb := goredislib.NewClient(opt)
	atEnd(func() { rdb.Close() })
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, err
	}
	const ttl = 10 * time.Second
	rawTry := func(ctx context.Context, key string) (func(context.Context) error, bool, error) {
		val := time.Now().String()
		ok, err := rdb.SetNX(ctx, key, val, ttl).Result()
		if err != nil || !ok {
			return nil, false, err
		}
		return func(ctx context.Context) error { return casDelete.Run(ctx, rdb, []string{key}, val).Err() }, true, nil
	}
	raw := locker{name: "raw Redis SET NX PX + Lua delete (1 ms polling)", try: rawTry, wait: pollWait(rawTry, time.Millisecond)}

	rs := redsync.New(goredis.NewPool(rdb))
	rsLock := func(ctx context.Context, key string, try bool) (func(context.Context) error, bool, error) {
		m := rs.NewMutex(key, redsync.WithExpiry(ttl))
		var err error
		if try {
			err = m.TryLockContext(ctx)
		} else {
			err = m.LockContext(ctx)
		}
		var taken *redsync.ErrTaken
		if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, true, nil
	}
	redsyncL := locker{
		name: "redsync v4 (default retry)",
		try: func(ctx context.Context, key string) (func(context.Context) error, bool, error) {
			return rsLock(ctx, key, true)
		},
		wait: func(ctx context.Context, key string) (func(context.Context) error, error) {
			for {
				u, ok, err := rsLock(ctx, key, false)
				if err != nil || ok {
					return u, err
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
			}
		},
	}

	rl := redislock.New(rdb)
	obtain := func(ctx context.Context, key string, retry redislock.RetryStrategy) (func(context.Context) error, bool, error) {
		lock, err := rl.Obtain(ctx, key, ttl, &redislock.Options{RetryStrategy: retry})
		if errors.Is(err, redislock.ErrNotObtained) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		return lock.Release, true, nil
	}
	redislockL := locker{
		name: "bsm/redislock (100 ms linear retry)",
		try: func(ctx context.Context, key string) (func(context.Context) error, bool, error) {
			return obtain(ctx, key, nil)
		},
		wait: func(ctx context.Context, key string) (func(context.Context) error, error) {
			for {
				u, ok, err := obtain(ctx, key, redislock.LinearBackoff(100*time.Millisecond))
				if err != nil || ok {
					return u, err
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
			}
		},
	}
	// A throwaway test server without persistence would make leasehold hold
	// back its first grants for 30s after the server started (see
	// docs/stores/redis.md); the benchmark measures the steady state.
	ours, err := leaseholdLockers(ctx, "Redis", withParam(url, "holdback=0"))
	if err != nil {
		return nil, fmt.Errorf("leasehold on Redis: %w", err)
	}
	return append([]locker{raw, redsyncL, redislockL}, ours...), nil
}

// withParam adds a query parameter to a URL.
func withParam(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}
