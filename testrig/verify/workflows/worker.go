package workflows

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/workflow"
)

// EnvWorker carries a worker's Config (JSON) to a worker process.
const EnvWorker = "LEASEHOLD_R16_WORKER"

// Config is what one worker (a process of the service) does.
type Config struct {
	ID         string
	Store      string // store URL (stores.Open); each worker opens its own client
	Workflow   string // the definition's name (Chain)
	Instance   string
	Strategy   workflow.Strategy
	LocalQueue bool
	Clients    int           // goroutines calling Transition (default 4)
	Duration   time.Duration // how long to run
	LockWait   time.Duration // Config.LockWait (0: the default)
	LeaseTTL   time.Duration // Config.LeaseTTL (0: the default)
	Seed       uint64
	// HTTP, when set, are base URLs (http://host:port) of `leasehold serve`
	// processes serving the definition: the clients call their workflow
	// API (client i the server i mod len(HTTP)) instead of a Workflows.
	HTTP []string
	// Handoff: a transition whose reply was lost (its context cut at 0–4
	// ms) is not resolved here but handed to another process (the call
	// is emitted with Handoff set; the harness passes it on), which asks
	// again with the same actor and request id. Jobs handed to this
	// process arrive on its standard input, one JSON Job a line.
	Handoff bool
	// LostPercent, when positive, makes that share of the operations
	// lost replies (otherwise 22 %).
	LostPercent int
}

// Job is a request handed over by another process: ask again, as Actor,
// From → To with RequestID.
type Job struct {
	Actor     string `json:"actor"`
	From      string `json:"from"`
	To        string `json:"to"`
	RequestID string `json:"rid"`
}

// Chain is the suite's definition: A → B → C → D → A.
func Chain(name string) workflow.Definition {
	return workflow.Definition{Name: name, Initial: "A", Transitions: map[string][]string{
		"A": {"B"}, "B": {"C"}, "C": {"D"}, "D": {"A"},
	}}
}

func next(s string) string { return Chain("x").Transitions[s][0] }

// New returns the Workflows a worker uses on records and leases.
func New(cfg Config, rs leasehold.RecordStore, leases leasehold.Store) (*workflow.Workflows, error) {
	return workflow.New(Chain(cfg.Workflow), workflow.Config{Records: rs, Leases: leases, Strategy: cfg.Strategy,
		LocalQueue: cfg.LocalQueue, LockWait: cfg.LockWait, LeaseTTL: cfg.LeaseTTL, Owner: "r16-" + cfg.ID})
}

// MaybeWorker runs the process as a worker when EnvWorker is set (and
// never returns then); otherwise it hands over to verify.MaybeWorker,
// which runs the leasehold command line when asked to.
func MaybeWorker() {
	verify.MaybeWorker()
	verify.ProcessMain(EnvWorker, "r16 worker", func(cfg Config) int {
		return verify.ExitStatus("r16 worker "+cfg.ID, runProcess(cfg, os.Stdout))
	})
}

func runProcess(cfg Config, out io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(c Call) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(c)
	}
	if len(cfg.HTTP) > 0 {
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
		Run(ctx, cfg, func(i int) Service {
			return &HTTPService{Base: cfg.HTTP[i%len(cfg.HTTP)], Workflow: cfg.Workflow, Client: hc}
		}, emit)
		return nil
	}
	st, err := verify.OpenStore(ctx, cfg.Store, 30*time.Second)
	if err != nil {
		return err
	}
	defer st.Close()
	rs, ok := st.(leasehold.RecordStore)
	if !ok {
		return fmt.Errorf("%T keeps no records", st)
	}
	w, err := New(cfg, rs, st)
	if err != nil {
		return err
	}
	var jobs chan Job
	if cfg.Handoff {
		jobs = make(chan Job, 64)
		go func() {
			sc := bufio.NewScanner(os.Stdin)
			for sc.Scan() {
				var j Job
				if json.Unmarshal(sc.Bytes(), &j) == nil {
					jobs <- j
				}
			}
		}()
	}
	RunJobs(ctx, cfg, func(int) Service { return w }, emit, jobs)
	return nil
}

// Run runs cfg.Clients clients for cfg.Duration (or until ctx ends), client
// i on svc(i), then lets each finish what it is doing, passing every call
// to emit.
func Run(ctx context.Context, cfg Config, svc func(i int) Service, emit func(Call)) {
	RunJobs(ctx, cfg, svc, emit, nil)
}

// RunJobs is Run that also resolves the requests handed over on jobs (nil:
// none) while its clients run, each with the job's actor on svc(0); it
// returns when the clients and the jobs taken have finished.
func RunJobs(ctx context.Context, cfg Config, svc func(i int) Service, emit func(Call), jobs <-chan Job) {
	if cfg.Clients == 0 {
		cfg.Clients = 4
	}
	// Clients stop starting operations at the end; the ones under way
	// (a request being resolved) finish, so that each gets its answer.
	end := time.Now().Add(cfg.Duration)
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		cl := &client{cfg: cfg, w: svc(i), emit: emit, actor: cfg.ID + "-" + strconv.Itoa(i),
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
		wg.Go(func() { cl.run(ctx, end) })
	}
	stop := make(chan struct{})
	var jwg sync.WaitGroup
	if jobs != nil {
		jwg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case j := <-jobs:
					cl := &client{cfg: cfg, w: svc(0), emit: emit, actor: j.Actor,
						rng: rand.New(rand.NewPCG(cfg.Seed, uint64(1000+n)))}
					jwg.Go(func() { cl.resolve(ctx, "resolve", j.From, j.To, j.RequestID) })
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	jwg.Wait()
}

type client struct {
	cfg     Config
	w       Service
	emit    func(Call)
	actor   string
	rng     *rand.Rand
	seq     int
	applied *workflow.Entry // the last entry this client applied
}

func (cl *client) run(ctx context.Context, end time.Time) {
	for ctx.Err() == nil && time.Now().Before(end) {
		in, ok := cl.get(ctx)
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		from, to := in.State, next(in.State)
		p := cl.rng.IntN(100)
		if cl.cfg.LostPercent > 0 && cl.rng.IntN(100) < cl.cfg.LostPercent {
			p = 80 // a lost reply
		}
		switch {
		case p < 45:
			cl.call(ctx, "unique", from, to, cl.actor, cl.rid(), time.Minute)
		case p < 70:
			cl.call(ctx, "shared", from, to, "shared", "v"+strconv.FormatUint(in.Version, 10), time.Minute)
		case p < 92:
			cl.lost(ctx, from, to)
		default:
			cl.extra(ctx, from, to)
		}
	}
}

func (cl *client) rid() string {
	cl.seq++
	return cl.actor + "-" + strconv.Itoa(cl.seq)
}

func (cl *client) get(ctx context.Context) (workflow.Instance, bool) {
	c := Call{Worker: cl.cfg.ID, Op: "get", Start: verify.Mono()}
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	in, err := cl.w.Get(gctx, cl.cfg.Instance)
	cancel()
	c.End = verify.Mono()
	if err != nil {
		if ctx.Err() != nil {
			return in, false
		}
		c.Answer, c.Err = AnsError, err.Error()
	} else {
		c.Answer, c.State, c.Version = AnsRead, in.State, in.Version
	}
	cl.emit(c)
	return in, err == nil
}

// call sends one transition with a deadline of d.
func (cl *client) call(ctx context.Context, kind, from, to, actor, rid string, d time.Duration) Call {
	c := Call{Worker: cl.cfg.ID, Op: "transition", Kind: kind, From: from, To: to, Actor: actor, RequestID: rid, Start: verify.Mono()}
	b := c
	b.Op = "begin"
	cl.emit(b)
	tctx, cancel := context.WithTimeout(ctx, d)
	res, err := cl.w.Apply(tctx, workflow.Request{Instance: cl.cfg.Instance, From: from, To: to, Actor: actor, RequestID: rid})
	cancel()
	c.End = verify.Mono()
	c.record(res, err)
	if ctx.Err() != nil && c.Answer == AnsUnknown && kind != "lost" {
		c.Kind = "stopped" // the worker was told to stop: not a lost reply to resolve
	}
	cl.emit(c)
	if c.Answer == AnsApplied && actor == cl.actor {
		cl.applied = c.Entry
	}
	return c
}

// lost sends a transition with a short deadline and, unless its answer
// came back, resolves it: the same request again, or the same request id
// from the state read since.
func (cl *client) lost(ctx context.Context, from, to string) {
	rid := cl.rid()
	c := cl.call(ctx, "lost", from, to, cl.actor, rid, verify.Between(cl.rng, 0, 4*time.Millisecond))
	if definitive(c.Answer) {
		return
	}
	if cl.cfg.Handoff && c.Answer == AnsUnknown && ctx.Err() == nil {
		// Another process asks again (the harness hands it over).
		h := Call{Worker: cl.cfg.ID, Op: "handoff", From: from, To: to, Actor: cl.actor, RequestID: rid, Start: c.End}
		cl.emit(h)
		return
	}
	switch cl.rng.IntN(3) {
	case 0:
		cl.resolve(ctx, "resolve", from, to, rid)
		return
	case 1:
		cl.lookup(ctx, rid)
		cl.resolve(ctx, "resolve", from, to, rid)
		return
	}
	in, ok := cl.get(ctx)
	if !ok {
		return
	}
	cl.resolve(ctx, "reask", in.State, next(in.State), rid)
}

// resolve asks again until it gets an answer, through store restarts: an
// answer that is not definitive is retried for a while; the last is kept.
func (cl *client) resolve(ctx context.Context, kind, from, to, rid string) {
	for deadline := time.Now().Add(20 * time.Second); ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		c := cl.call(ctx, kind, from, to, cl.actor, rid, 30*time.Second)
		if definitive(c.Answer) || c.Answer == AnsLockTimeout || c.Answer == AnsInvalid {
			return
		}
		if time.Now().After(deadline) && ctx.Err() == nil {
			c.Op, c.Start = "gave-up", c.End
			cl.emit(c) // no answer in 20s: unresolved
			return
		}
	}
}

// extra reuses a request id this client applied, as another actor: it
// must be refused with the original entry.
func (cl *client) extra(ctx context.Context, from, to string) {
	if cl.applied == nil {
		cl.call(ctx, "unique", from, to, cl.actor, cl.rid(), time.Minute)
		return
	}
	e := cl.applied
	cl.call(ctx, "impostor", e.From, e.To, "impostor-"+cl.actor, e.RequestID, time.Minute)
}

// lookup asks what became of a request id.
func (cl *client) lookup(ctx context.Context, rid string) {
	c := Call{Worker: cl.cfg.ID, Op: "lookup", Actor: cl.actor, RequestID: rid, Start: verify.Mono()}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	e, err := cl.w.Lookup(lctx, cl.cfg.Instance, rid)
	cancel()
	c.End = verify.Mono()
	switch {
	case err == nil:
		c.Answer, c.Entry = AnsFound, &e
	case errors.Is(err, workflow.ErrNoRequest):
		c.Answer = AnsNotFound
	case ctx.Err() != nil:
		return
	default:
		c.Answer, c.Err = AnsError, err.Error()
	}
	cl.emit(c)
}
