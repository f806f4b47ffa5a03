package holders

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/verify"
)

// envHolder makes the test binary the holder process of a "stop" row
// (holderConfig, JSON).
const envHolder = "LEASEHOLD_R17_HOLDER"

type holderConfig struct {
	Store  string
	Name   string
	Owner  string
	Oracle string
	TTL    time.Duration
}

// hev is one line the holder process writes: "grant" (T: granted, Tok, D:
// its local deadline as the probe has it), "dl" (D: a later deadline, a
// renewal confirmed), "work" (a work step: T0 asked Held, T1 was told
// yes), "lost" (T: Done closed, Err), "reuse" (a use of the lost token),
// "timed" (D: how long a Get with a 300 ms timeout took, Err), "end".
type hev struct {
	E   string  `json:"e"`
	T   int64   `json:"t,omitempty"`
	T1  int64   `json:"t1,omitempty"`
	Tok uint64  `json:"tok,omitempty"`
	D   int64   `json:"d,omitempty"`
	Err string  `json:"err,omitempty"`
	Use *reused `json:"use,omitempty"`
}

// maybeHolder runs the process as a stopped row's holder if envHolder is
// set (and never returns then).
func maybeHolder() {
	verify.ProcessMain(envHolder, "r17 holder", func(cfg holderConfig) int {
		return verify.ExitStatus("r17 holder", runHolder(cfg, os.Stdout))
	})
}

// runHolder takes cfg.Name, writes the fenced resource once, then works in
// 5 ms steps while Held says so; once it finds the lease lost it uses the
// lost token (reuseCalls) and makes one call with a timeout.
func runHolder(cfg holderConfig, out io.Writer) error {
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(e hev) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(e)
	}
	ctx := context.Background()
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	s, err := stores.Open(octx, cfg.Store)
	cancel()
	if err != nil {
		return err
	}
	defer s.Close()
	p := &probe{Store: s, name: cfg.Name, onDeadline: func(tok uint64, d int64) { emit(hev{E: "dl", Tok: tok, D: d}) }}
	c, err := leasehold.New(p, leasehold.WithOwner(cfg.Owner))
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	l, err := c.Acquire(actx, cfg.Name, leasehold.TTL(cfg.TTL))
	cancel()
	if err != nil {
		return err
	}
	tok, dl, _ := p.state()
	emit(hev{E: "grant", T: verify.Mono(), Tok: tok, D: dl})
	lost := make(chan struct{})
	go func() {
		<-l.Done()
		t := verify.Mono()
		emit(hev{E: "lost", T: t, Err: fmt.Sprint(l.Err())})
		close(lost)
	}()
	hc := &http.Client{Timeout: 30 * time.Second}
	for n := 0; ; n++ {
		t0 := verify.Mono()
		if !l.Held() {
			break
		}
		t1 := verify.Mono()
		if n == 0 {
			if err := oracleWrite(ctx, hc, cfg.Oracle, cfg.Name, "a", tok); err != nil {
				return fmt.Errorf("first fenced write: %v", err)
			}
		}
		emit(hev{E: "work", T: t0, T1: t1})
		time.Sleep(5 * time.Millisecond)
	}
	<-lost
	for _, u := range reuseCalls(l, s, cfg.Oracle, cfg.Name, cfg.Owner, tok, cfg.TTL) {
		emit(hev{E: "reuse", Use: &u})
	}
	gctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err = s.Get(gctx, cfg.Name)
	cancel()
	e := hev{E: "timed", D: int64(time.Since(start))}
	if err != nil {
		e.Err = err.Error()
	}
	emit(e)
	emit(hev{E: "end", T: verify.Mono()})
	return nil
}

// holderProc is a running holder process and what it wrote.
type holderProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	evs  []hev
	errs proctest.Buffer
	done chan struct{}
}

func startHolder(t *testing.T, cfg holderConfig) *holderProc {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := &holderProc{done: make(chan struct{})}
	h.cmd = exec.Command(exe, "-test.run=^$")
	h.cmd.Env = append(proctest.EnvWithout(verify.EnvReport, verify.EnvWorker, verify.EnvCLI), envHolder+"="+string(raw))
	h.cmd.Stderr = &h.errs
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.cmd.Process.Signal(syscall.SIGCONT)
		_ = h.cmd.Process.Kill()
		<-h.done
	})
	go func() {
		defer close(h.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e hev
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				h.mu.Lock()
				h.evs = append(h.evs, e)
				h.mu.Unlock()
			}
		}
		_ = h.cmd.Wait()
	}()
	return h
}

func (h *holderProc) events() []hev {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hev(nil), h.evs...)
}

// waitFor waits until the holder has written an event that f accepts.
func (h *holderProc) waitFor(t *testing.T, what string, d time.Duration, f func([]hev) bool) {
	t.Helper()
	for end := time.Now().Add(d); !f(h.events()); time.Sleep(10 * time.Millisecond) {
		select {
		case <-h.done:
			t.Fatalf("the holder exited before %s: %s", what, h.errs.String())
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("the holder did not reach %s in %s: %s", what, d, h.errs.String())
		}
	}
}

// stoppedRound is one round of a "stop" row: the holder, a process of its
// own, works on its lease; it is stopped (SIGSTOP) for 2 × TTL, during
// which B takes the lease (after the store let it go) and writes the
// fenced resource; it is continued while B still holds. It must find its
// lease lost before it does any more work, and the lost token must be
// refused.
func stoppedRound(t *testing.T, r *row, b backend) {
	ctx := context.Background()
	tag := fmt.Sprintf("%x", rand.Uint32())
	name := fmt.Sprintf("r17/%s/stop/%s", b.name, tag)
	ttl := clientTTL
	or := newOracle(t)
	direct := openStore(t, b.url)
	h := startHolder(t, holderConfig{Store: b.url, Name: name, Owner: "r17-a-" + tag, Oracle: or.o.URL(), TTL: ttl})
	works := func(evs []hev) int {
		n := 0
		for _, e := range evs {
			if e.E == "work" {
				n++
			}
		}
		return n
	}
	h.waitFor(t, "20 work steps", 60*time.Second, func(evs []hev) bool { return works(evs) >= 20 })
	pid := h.cmd.Process.Pid
	stopAt := verify.Mono()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	r.faults++
	b2, err := leasehold.New(direct, leasehold.WithOwner("r17-b-"+tag))
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithTimeout(ctx, 4*ttl+10*time.Second)
	lb, err := b2.Acquire(bctx, name, leasehold.TTL(time.Minute))
	cancel()
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		t.Fatalf("B could not take %s while A was stopped: %v", name, err)
	}
	bFrom := verify.Mono()
	if err := or.write(ctx, or.o.URL(), name, "b", lb.Token()); err != nil {
		r.violation("B's fenced write (token %d): %v", lb.Token(), err)
	}
	if wait := time.Duration(stopAt + int64(2*ttl) - verify.Mono()); wait > 0 {
		time.Sleep(wait)
	}
	contAt := verify.Mono()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if bFrom > contAt {
		t.Errorf("B was granted the lease only after A was continued: the round did not test a takeover")
	}
	// B holds until A is done with the lost token.
	select {
	case <-h.done:
	case <-time.After(60 * time.Second):
		r.violation("the holder did not finish 60 s after it was continued")
	}
	bTo := verify.Mono()
	evs := h.events()
	var (
		token            uint64
		grantAt          int64
		deadline, lossAt int64
		uses             []reused
		lastWork         hev
		nwork            int
		afterDL, afterLS int
	)
	for _, e := range evs {
		switch e.E {
		case "grant":
			token, grantAt, deadline = e.Tok, e.T, e.D
		case "dl":
			if e.Tok == token {
				deadline = e.D
			}
		case "lost":
			lossAt = e.T
			if !strings.Contains(e.Err, "lease lost") {
				r.violation("Done closed with %q, want an error matching ErrLost", e.Err)
			}
		case "reuse":
			uses = append(uses, *e.Use)
		case "timed":
			took := time.Duration(e.D)
			if took > 300*time.Millisecond+callBound {
				r.violation("a Get with a 300 ms timeout after the resume took %s", ms(took))
			}
			r.note("timed", int64(took), "a Get with a 300 ms timeout after the resume returned in %s", ms(took))
		}
	}
	for _, e := range evs {
		if e.E != "work" {
			continue
		}
		nwork++
		lastWork = e
		if e.T >= deadline {
			afterDL++
		}
		if lossAt != 0 && e.T > lossAt {
			afterLS++
		}
	}
	r.op(len(evs))
	if token == 0 {
		t.Fatalf("the holder reported no grant: %s", h.errs.String())
	}
	if lossAt == 0 {
		r.violation("the holder never declared its lease lost: %s", h.errs.String())
	} else {
		dead := time.Duration(contAt - deadline) // how long the deadline had passed at the resume
		late := time.Duration(lossAt - max(deadline, contAt))
		if late > lossBound {
			r.violation("loss declared %s after the resume (bound %s)", ms(late), ms(lossBound))
		}
		r.note("loss", lossAt-contAt, "loss declared %s after the resume (bound %s), the local deadline had passed %s before it", ms(time.Duration(lossAt-contAt)),
			ms(lossBound), ms(dead))
	}
	if afterDL > 0 {
		r.violation("%d work steps began after the local deadline (the last %s after it)", afterDL, ms(time.Duration(lastWork.T-deadline)))
	}
	if afterLS > 0 {
		r.violation("%d work steps began after the loss was declared", afterLS)
	}
	r.note("work", lastWork.T-deadline, "%d work steps, the last begun %s the local deadline", nwork, signed(time.Duration(lastWork.T-deadline), "after", "before"))
	checkReuse(r, uses, direct, token, lb)
	if err := lb.Release(ctx); err != nil {
		t.Errorf("B's release: %v", err)
	}
	or.check(r)
	hist := &verify.History{Events: []verify.Event{
		{E: "cs", Worker: "a", Proc: "a", Key: name, Token: token, From: grantAt, To: max(lastWork.T1, grantAt)},
		{E: "cs", Worker: "b", Proc: "b", Key: name, Token: lb.Token(), From: bFrom, To: bTo},
	}}
	if res := verify.Check(hist, verify.CheckOptions{NoLinearizability: true}); res.Overlaps > 0 || res.TokenRegressions > 0 {
		r.violation("critical sections: %d overlaps, %d token regressions: %s", res.Overlaps, res.TokenRegressions, res.FirstBad)
	}
	r.note("stop", bFrom-stopAt, "stopped %s, B granted %s into the stop", ms(time.Duration(contAt-stopAt)), ms(time.Duration(bFrom-stopAt)))
}
