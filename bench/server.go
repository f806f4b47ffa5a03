package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"time"

	"github.com/leasehold/leasehold/bench/serverbench"
)

// The server suite: the lease server's engine beside Redis.

func serverFlags(fs *flag.FlagSet) *serverbench.Config {
	c := &serverbench.Config{}
	fs.StringVar(&c.RedisURL, "redis", os.Getenv("LEASEHOLD_TEST_REDIS"), `Redis URL of the reference (default $LEASEHOLD_TEST_REDIS; "off": none). Run it with --save "" --appendonly no for the "no persistence" figure`)
	fs.StringVar(&c.RedisServer, "redis-server", os.Getenv("LEASEHOLD_TEST_REDIS_SERVER"), `redis-server binary for the durable reference, which the suite starts itself with appendonly yes and appendfsync always in the data directory (default $LEASEHOLD_TEST_REDIS_SERVER; "off": none)`)
	fs.IntVar(&c.Clients, "clients", 32, "concurrent clients for the pairs figure")
	fs.DurationVar(&c.Duration, "duration", 3*time.Second, "length of each round per implementation")
	fs.IntVar(&c.Rounds, "rounds", 3, "interleaved rounds")
	fs.IntVar(&c.Waiters, "waiters", 8, "queued waiters for the handoff figure")
	fs.IntVar(&c.Handoffs, "handoffs", 2000, "handoffs to measure")
	fs.IntVar(&c.Leases, "leases", 0, "also hold this many leases to measure memory and restart time (e.g. 1000000)")
	fs.IntVar(&c.Queue, "queue", 0, "also queue this many waiters on one name to measure memory per waiter and handoffs in queue order while they wait (e.g. 100000)")
	fs.IntVar(&c.LogSyncs, "log-syncs", 0, "also measure the durable server with this many group commits syncing at once (e.g. 2; the default row syncs one at a time)")
	fs.StringVar(&c.Dir, "dir", "", "data directory for the server's log (default: a temporary directory on the default temp disk)")
	return c
}

func runServer(ctx context.Context, c *serverbench.Config, smoke bool, out io.Writer) error {
	if c.RedisURL == "off" {
		c.RedisURL = ""
	}
	if c.RedisServer == "off" {
		c.RedisServer = ""
	}
	if smoke {
		if c.RedisURL == "" || c.RedisServer == "" {
			return errors.New("no Redis (--redis) or no redis-server (--redis-server): the smoke run measures the server beside both references")
		}
		c.Clients, c.Duration, c.Rounds, c.Waiters, c.Handoffs, c.Leases, c.Queue = 4, 200*time.Millisecond, 1, 4, 50, 2000, 2000
	}
	c.Out = out
	return serverbench.Run(ctx, *c)
}
