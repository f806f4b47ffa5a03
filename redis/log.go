package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// DiscardClientLogs stops go-redis from writing its own log lines (its
// connection pool's dial failures and retries, by default to the
// process's standard error), for every go-redis client in the process.
// The store's errors say what failed; a program that shows its users one
// line per failure (the leasehold command does) calls this once at start.
// A library should leave the choice to its program.
func DiscardClientLogs() { goredis.SetLogger(discard{}) }

type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}
