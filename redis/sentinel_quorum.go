package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/editdist"
)

// sentinelGrace is how long sentinelQuorum.check waits for the other
// sentinels after the first one answered, once a majority has (at most
// half the context's time left).
const sentinelGrace = time.Second

// sentinelQuorum asks the sentinels of a redis+sentinel:// URL for the
// primary of its master name and accepts an answer only from a majority
// of them that agree (issue 31: a stray sentinel of another group,
// answering alone, led the store to another primary).
type sentinelQuorum struct {
	fo    *goredis.FailoverOptions // as parsed: SentinelAddrs are the URL's
	addrs []string                 // the URL's sentinels
}

func newSentinelQuorum(fo *goredis.FailoverOptions) *sentinelQuorum {
	return &sentinelQuorum{fo: fo, addrs: slices.Clone(fo.SentinelAddrs)}
}

// sentinelAnswer is one sentinel's reply to SENTINEL
// GET-MASTER-ADDR-BY-NAME; nil in a slice of them: no answer in time.
type sentinelAnswer struct {
	primary     string
	noMaster    bool
	notSentinel bool
	err         error
	// id is the sentinel's SENTINEL MYID ("" if it has none); dupOf, the
	// URL's address of a sentinel that answered before with the same id
	// (one sentinel listed twice, under two addresses: not counted twice).
	id, dupOf string
}

func (a *sentinelAnswer) String() string {
	switch {
	case a == nil:
		return "no answer"
	case a.dupOf != "":
		return "the same sentinel as " + a.dupOf
	case a.err != nil:
		return a.err.Error()
	case a.notSentinel:
		return "not a sentinel"
	case a.noMaster:
		return "knows no such master"
	}
	return "names " + a.primary
}

// check asks every sentinel of the URL for the primary, in parallel.
// After the first answer, and once a majority answered, it waits
// sentinelGrace for the others; those that have not answered by then
// (hung, unreachable) are left out. It returns the addresses of the
// sentinels that answered, in the URL's order, and the primary they name.
//
// With quick (a dial), a majority naming one primary is enough: check
// returns it at once, without waiting for the others or comparing theirs.
//
// Fewer than a majority answering, or sentinels that answered and name
// different primaries (a failover in progress, or a stray sentinel),
// is a transient error that says how many answered and what each said.
// A deployment error is an *leasehold.InvalidError: an address that is a
// Redis server, not a sentinel, or a master name that no sentinel of a
// majority that answered knows.
func (q *sentinelQuorum) check(ctx context.Context, quick bool) ([]string, string, error) {
	start := time.Now()
	got, answered := q.ask(ctx, quick)
	need := len(q.addrs)/2 + 1
	said := func() string {
		parts := make([]string, len(q.addrs))
		for i, a := range q.addrs {
			parts[i] = a + ": " + got[i].String()
		}
		return strings.Join(parts, "; ")
	}
	for i, r := range got {
		if r != nil && r.dupOf != "" {
			return nil, "", &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf(
				"%s and %s are the same sentinel (SENTINEL MYID %s): list each sentinel of the group once (a sentinel counted twice could make a majority alone)",
				r.dupOf, q.addrs[i], r.id)}
		}
	}
	if answered < need {
		var err error
		if answered == 0 {
			within := ""
			for _, r := range got {
				if r == nil || ctx.Err() != nil || isTimeout(r.err) {
					within = " within " + time.Since(start).Round(time.Millisecond).String() + " (" + q.timeouts() + ")"
				}
			}
			err = fmt.Errorf("redis sentinel: no sentinel answered%s (tried %s)", within, said())
		} else {
			err = fmt.Errorf("redis sentinel: %d of %d sentinels answered for master %q, a majority (%d) must answer and agree on the primary (%s; %s)",
				answered, len(q.addrs), q.fo.MasterName, need, said(), q.timeouts())
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, ctx.Err())
		}
		return nil, "", err
	}
	byPrimary := map[string][]string{}
	var primaries, noMaster, ok []string
	for i, r := range got {
		if r == nil || r.err != nil {
			continue
		}
		a := q.addrs[i]
		switch {
		case r.notSentinel:
			return nil, "", &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf("%s is not a sentinel (it is a Redis server): give sentinel addresses", a)}
		case r.noMaster:
			noMaster = append(noMaster, a)
		default:
			if byPrimary[r.primary] == nil {
				primaries = append(primaries, r.primary)
			}
			byPrimary[r.primary] = append(byPrimary[r.primary], a)
			ok = append(ok, a)
		}
	}
	for _, p := range primaries {
		if quick && len(byPrimary[p]) >= need {
			return byPrimary[p], p, nil
		}
	}
	if len(primaries) == 0 {
		return nil, "", &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf("no sentinel at %s knows a master named %q", strings.Join(noMaster, ", "), q.fo.MasterName)}
	}
	if len(primaries) > 1 || len(noMaster) > 0 {
		return nil, "", fmt.Errorf("redis sentinel: the sentinels disagree on the primary (a failover in progress?) of %q: %s (%d of %d answered; every sentinel of the URL must monitor the same primary under that name: if this lasts, one of them belongs to another group)",
			q.fo.MasterName, said(), answered, len(q.addrs))
	}
	return ok, primaries[0], nil
}

// ask sends SENTINEL GET-MASTER-ADDR-BY-NAME to every sentinel of the URL
// and returns their answers (nil: none in time), in the URL's order, and
// how many answered without an error. With quick it returns as soon as a
// majority named one primary.
func (q *sentinelQuorum) ask(ctx context.Context, quick bool) ([]*sentinelAnswer, int) {
	fo := q.fo
	type answer struct {
		i int
		sentinelAnswer
	}
	results := make(chan answer, len(q.addrs)) // buffered: a late query never blocks
	clients := make([]*goredis.SentinelClient, len(q.addrs))
	for i, a := range q.addrs {
		clients[i] = goredis.NewSentinelClient(&goredis.Options{
			Addr: a, Username: fo.SentinelUsername, Password: fo.SentinelPassword,
			DialTimeout: fo.DialTimeout, ReadTimeout: fo.ReadTimeout, WriteTimeout: fo.WriteTimeout,
			TLSConfig: fo.TLSConfig, MaxRetries: -1, ContextTimeoutEnabled: true,
		})
	}
	// go-redis ends a read only at the context's deadline (or its read
	// timeout), not on a cancel: closing the clients ends the queries
	// still waiting once the answers are in.
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i, c := range clients {
		go func() {
			r := answer{i: i}
			// Its id first, to count a sentinel listed under two
			// addresses once; a server without MYID (not a sentinel, or
			// one older than Redis 6.2) answers the next query as it can.
			myid := goredis.NewStringCmd(ctx, "sentinel", "myid")
			if c.Process(ctx, myid) == nil {
				r.id = myid.Val()
			}
			hp, err := c.GetMasterAddrByName(ctx, fo.MasterName).Result()
			switch {
			case err == nil && len(hp) == 2:
				r.primary = net.JoinHostPort(hp[0], hp[1])
			case errors.Is(err, goredis.Nil):
				r.noMaster = true
			case err != nil && isUnknownCommand(err):
				r.notSentinel = true
			case err == nil:
				r.err = fmt.Errorf("unexpected reply %q", hp)
			default:
				r.err = err
			}
			results <- r
		}()
	}
	got := make([]*sentinelAnswer, len(q.addrs))
	need := len(q.addrs)/2 + 1
	var grace <-chan time.Time
	graceOver := false
	answered := 0
	votes := map[string]int{}
	ids := map[string]string{} // SENTINEL MYID -> the URL's address that answered with it
	for n := 0; n < len(q.addrs); n++ {
		select {
		case r := <-results:
			got[r.i] = &r.sentinelAnswer
			if r.err != nil {
				continue
			}
			if r.id != "" {
				if first, seen := ids[r.id]; seen {
					r.dupOf = first
					continue
				}
				ids[r.id] = q.addrs[r.i]
			}
			answered++
			if r.primary != "" {
				votes[r.primary]++
				if quick && votes[r.primary] >= need {
					return got, answered
				}
			}
			if grace == nil {
				d := sentinelGrace
				if dl, ok := ctx.Deadline(); ok {
					d = min(d, time.Until(dl)/2)
				}
				t := time.NewTimer(d)
				defer t.Stop()
				grace = t.C
			}
		case <-grace:
			graceOver, grace = true, nil
			n-- // a timer is no answer
		case <-ctx.Done():
			return got, answered
		}
		if graceOver && answered >= need {
			break
		}
	}
	return got, answered
}

// timeouts describes the sentinels' connection timeouts, for an error.
func (q *sentinelQuorum) timeouts() string {
	dial, read := "5s (default)", "3s (default)"
	if q.fo.DialTimeout > 0 {
		dial = q.fo.DialTimeout.String()
	}
	switch {
	case q.fo.ReadTimeout > 0:
		read = q.fo.ReadTimeout.String()
	case q.fo.ReadTimeout < 0:
		read = "none"
	}
	return "dial_timeout " + dial + ", read_timeout " + read
}

// dial is the failover client's dialer: go-redis calls it for its
// sentinels and, with the address a sentinel named, for the primary, each
// time it makes a connection. A data node is dialled only if a majority
// of the URL's sentinels answer and agree that it is the primary; an
// address other than the URL's sentinels (a sentinel go-redis discovered,
// or a primary a single sentinel named) is refused otherwise.
func (q *sentinelQuorum) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if !slices.Contains(q.addrs, addr) {
		_, primary, err := q.check(ctx, true)
		if err != nil {
			return nil, err
		}
		if primary != addr {
			return nil, fmt.Errorf("redis sentinel: a majority of the URL's sentinels name %s as the primary of %q, not %s (a failover in progress?)", primary, q.fo.MasterName, addr)
		}
	}
	d := &net.Dialer{Timeout: q.fo.DialTimeout, KeepAlive: 5 * time.Minute}
	if d.Timeout == 0 {
		d.Timeout = 5 * time.Second
	}
	if q.fo.TLSConfig == nil {
		return d.DialContext(ctx, network, addr)
	}
	return (&tls.Dialer{NetDialer: d, Config: q.fo.TLSConfig}).DialContext(ctx, network, addr)
}

// sentinelRefused are go-redis's failover parameters that a
// redis+sentinel:// URL does not take, with why.
var sentinelRefused = map[string]string{
	"master_name":               "the master name is the URL's path: redis+sentinel://host:port/NAME",
	"addr":                      "the sentinels are the URL's hosts: redis+sentinel://host:port,host:port/NAME",
	"username":                  "the data nodes' user is the URL's: redis+sentinel://user:password@host:port/NAME",
	"password":                  "the data nodes' password is the URL's: redis+sentinel://user:password@host:port/NAME",
	"replica_only":              "the store uses the primary only",
	"route_by_latency":          "the store uses the primary only",
	"route_randomly":            "the store uses the primary only",
	"use_disconnected_replicas": "the store uses the primary only",
}

// checkSentinelParams refuses the parameters a redis+sentinel:// URL does
// not take, also misspelt ("mastername"), and suggests for a typo only a
// parameter that it takes.
func checkSentinelParams(q url.Values) error {
	var accepted []string
	for _, p := range urlParams {
		if _, no := sentinelRefused[p]; !no {
			accepted = append(accepted, p)
		}
	}
	for k := range q {
		if slices.Contains(accepted, k) {
			continue
		}
		if near := editdist.Near(k, accepted); near != "" {
			return &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf("unknown parameter %s (did you mean %s?)", k, near)}
		}
		why, no := sentinelRefused[k]
		if near := editdist.Near(k, urlParams); !no && near != "" {
			why, no = sentinelRefused[near], true
		}
		if no {
			return &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf("%s URL: parameter %s is not accepted here (%s)", SentinelScheme, k, why)}
		}
	}
	return nil
}
