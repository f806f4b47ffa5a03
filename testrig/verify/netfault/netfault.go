// Package netfault holds suite R6 of the verification plan: network faults
// between the lease clients and their store, made by a TCP proxy
// (github.com/Shopify/toxiproxy/v2, used as a library in this process) in
// front of the store's address — latency with jitter, a blackhole that
// holds data without answering, connections reset, and replies sliced into
// small delayed pieces, upstream and/or downstream, on a seeded schedule
// with quiet periods between faults. The suite itself is in the _test
// files; this file holds the proxy and the schedule, which other suites may
// reuse.
package netfault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/leasehold/leasehold/testrig/verify"
)

// Proxy is a TCP proxy in front of one upstream address, with toxics added
// and removed programmatically (no HTTP API). Its logging is off.
type Proxy struct {
	p *toxiproxy.Proxy

	mu      sync.Mutex
	seq     int
	active  []string // names of the toxics in place
	applied int      // toxics added so far
}

// NewProxy starts a proxy on a free loopback port in front of upstream.
func NewProxy(upstream string) (*Proxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "verify", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("netfault: start proxy: %w", err)
	}
	return &Proxy{p: p}, nil
}

// Addr is the proxy's listening address: give clients the store's URL
// through it (verify.Target.URLFor).
func (p *Proxy) Addr() string {
	p.p.Lock()
	defer p.p.Unlock()
	return p.p.Listen
}

// Toxic is one toxic: toxiproxy's type name, its stream and attributes.
type Toxic struct {
	Type string // "latency", "timeout", "reset_peer", "slicer", ...
	// Stream is "upstream" (client to store) or "downstream" (store to
	// client).
	Stream     string
	Attributes map[string]any
}

func (t Toxic) String() string {
	var attrs []string
	for _, k := range []string{"latency", "jitter", "timeout", "average_size", "size_variation", "delay"} {
		if v, ok := t.Attributes[k]; ok {
			attrs = append(attrs, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return fmt.Sprintf("%s/%s(%s)", t.Type, t.Stream, strings.Join(attrs, ","))
}

// Add puts toxic t in place on every connection, present and future, and
// returns its name.
func (p *Proxy) Add(t Toxic) (string, error) {
	p.mu.Lock()
	p.seq++
	name := fmt.Sprintf("%s_%s_%d", t.Type, t.Stream, p.seq)
	p.mu.Unlock()
	body, err := json.Marshal(map[string]any{"name": name, "type": t.Type, "stream": t.Stream,
		"toxicity": 1.0, "attributes": t.Attributes})
	if err != nil {
		return "", err
	}
	if _, err := p.p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return "", fmt.Errorf("netfault: add %s: %w", t, err)
	}
	p.mu.Lock()
	p.active = append(p.active, name)
	p.applied++
	p.mu.Unlock()
	return name, nil
}

// Heal removes every toxic in place. Removing a blackhole closes the
// connections it held.
func (p *Proxy) Heal() error {
	p.mu.Lock()
	names := p.active
	p.active = nil
	p.mu.Unlock()
	var first error
	for _, name := range names {
		if err := p.p.Toxics.RemoveToxic(context.Background(), name); err != nil && first == nil {
			first = fmt.Errorf("netfault: remove %s: %w", name, err)
		}
	}
	return first
}

// Applied is the number of toxics added so far.
func (p *Proxy) Applied() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied
}

// Close removes every toxic and stops the proxy, closing its connections.
func (p *Proxy) Close() {
	_ = p.Heal()
	p.p.Stop()
}

// Fault is one entry of a schedule: toxics put in place together for a
// while, then removed, then a quiet period.
type Fault struct {
	Kind   string // "latency", "blackhole", "reset", "slicer"
	Toxics []Toxic
	For    time.Duration // how long the toxics stay
	Quiet  time.Duration // how long the network is clean afterwards
}

func (f Fault) String() string {
	var ts []string
	for _, t := range f.Toxics {
		ts = append(ts, t.String())
	}
	return fmt.Sprintf("%s %s for %s", f.Kind, strings.Join(ts, "+"), f.For.Round(time.Millisecond))
}

// Kinds are the fault kinds a Schedule cycles through.
var Kinds = []string{"latency", "blackhole", "reset", "slicer"}

// Schedule draws faults: it cycles through Kinds (in a seeded order per
// cycle), each fault upstream, downstream or both, with these lengths:
// latency 50–500 ms (jitter included) for 2–5 s; a blackhole (toxiproxy's
// timeout toxic with timeout 0, which drops data and never answers) for
// 1–3 × TTL; connections reset (reset_peer) for 1–3 s; replies and
// requests sliced into pieces of a few bytes, 1–20 ms apart, for 2–5 s;
// then 1–3 s quiet (at least TTL).
type Schedule struct {
	ttl   time.Duration
	rng   *rand.Rand
	cycle []string
}

// NewSchedule returns a schedule for leases of this TTL.
func NewSchedule(ttl time.Duration, seed uint64) *Schedule {
	return &Schedule{ttl: ttl, rng: rand.New(rand.NewPCG(seed, 0x7e7))}
}

func (s *Schedule) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

// Next draws the next fault.
func (s *Schedule) Next() Fault {
	if len(s.cycle) == 0 {
		s.cycle = append([]string(nil), Kinds...)
		s.rng.Shuffle(len(s.cycle), func(i, j int) { s.cycle[i], s.cycle[j] = s.cycle[j], s.cycle[i] })
	}
	kind := s.cycle[0]
	s.cycle = s.cycle[1:]
	var streams []string
	switch s.rng.IntN(3) {
	case 0:
		streams = []string{"upstream"}
	case 1:
		streams = []string{"downstream"}
	default:
		streams = []string{"upstream", "downstream"}
	}
	f := Fault{Kind: kind, Quiet: max(s.between(time.Second, 3*time.Second), s.ttl)}
	for _, stream := range streams {
		t := Toxic{Stream: stream, Attributes: map[string]any{}}
		switch kind {
		case "latency":
			// latency ± jitter stays within 50–500 ms.
			lat := 50 + s.rng.Int64N(451)
			jit := s.rng.Int64N(min(lat-50, 500-lat) + 1)
			t.Type, t.Attributes["latency"], t.Attributes["jitter"] = "latency", lat, jit
		case "blackhole":
			t.Type, t.Attributes["timeout"] = "timeout", 0
		case "reset":
			t.Type, t.Attributes["timeout"] = "reset_peer", 0
		case "slicer":
			avg := 2 + s.rng.IntN(15)
			t.Type = "slicer"
			t.Attributes["average_size"], t.Attributes["size_variation"] = avg, avg/2
			t.Attributes["delay"] = 1000 + s.rng.IntN(19001) // microseconds
		}
		f.Toxics = append(f.Toxics, t)
	}
	switch kind {
	case "latency":
		f.For = s.between(2*time.Second, 5*time.Second)
	case "blackhole":
		f.For = s.between(s.ttl, 3*s.ttl)
	case "reset":
		f.For = s.between(time.Second, 3*time.Second)
	case "slicer":
		f.For = s.between(2*time.Second, 5*time.Second)
	}
	return f
}

// Done is a fault as it happened: From when its toxics were in place, To
// when they were removed (verify.Mono), and the quiet period that followed
// until Next (the next fault's From, or the end of the run).
type Done struct {
	Fault
	From, To, Next int64
}

// Run applies faults from s until at least d has passed, ending healed, or
// until ctx ends (it heals then too). It returns the faults as they
// happened.
func (p *Proxy) Run(ctx context.Context, s *Schedule, d time.Duration) ([]Done, error) {
	end := time.Now().Add(d)
	var done []Done
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for time.Now().Before(end) && ctx.Err() == nil {
		f := s.Next()
		from := verify.Mono()
		for _, t := range f.Toxics {
			if _, err := p.Add(t); err != nil {
				_ = p.Heal()
				return done, err
			}
		}
		ok := sleep(f.For)
		if err := p.Heal(); err != nil {
			return done, err
		}
		to := verify.Mono()
		if len(done) > 0 {
			done[len(done)-1].Next = from
		}
		done = append(done, Done{Fault: f, From: from, To: to})
		if !ok {
			break
		}
		if !sleep(min(f.Quiet, max(time.Until(end), 0))) {
			break
		}
	}
	if len(done) > 0 {
		done[len(done)-1].Next = 0
	}
	return done, nil
}
