package verify

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
)

// Oracle is the resource the workers protect: per key, a counter that a
// holder increments by reading it and writing the value read plus one. In
// fenced mode it refuses any read or write whose fencing token is lower than
// the highest it has accepted for that key, as a fenced storage service
// would; unfenced, it accepts everything (the negative control). It logs
// every write, accepted or not, and Check finds what went wrong.
//
// Workers reach it over HTTP on loopback, so they can be separate processes.
type Oracle struct {
	Fenced bool
	// OnRead, when set, is called for every read before it is answered,
	// with the reader's OS process id. A suite pauses the reader here to
	// stop a holder in the middle of its critical section.
	OnRead func(pid int, key string)

	mu     sync.Mutex
	keys   map[string]*oracleKey
	writes []Write
	reads  int
	ln     net.Listener
	srv    *http.Server
}

type oracleKey struct {
	value    int64
	maxToken uint64 // highest token accepted (read or write)
}

// Write is one write the oracle saw.
type Write struct {
	Key      string
	Proc     string // the writer's logical process
	Pid      int
	Token    uint64
	Read     int64 // the value the writer had read
	Value    int64 // the value it wrote (Read+1)
	Prev     int64 // the value it overwrote
	Max      uint64
	Accepted bool
	At       int64 // Mono when the oracle received it
	Deadline int64 // the writer's local lease deadline (Mono), 0 if not sent
}

// NewOracle starts an oracle on a loopback port.
func NewOracle(fenced bool) (*Oracle, error) { return newOracle(fenced, nil) }

// MustOracle is NewOracleOnRead (onRead may be nil) for a test: it fails
// t if the oracle does not start. The caller closes it.
func MustOracle(t testing.TB, fenced bool, onRead func(pid int, key string)) *Oracle {
	t.Helper()
	o, err := newOracle(fenced, onRead)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// NewOracleOnRead is NewOracle with OnRead installed before the oracle
// starts serving. (Setting the field after NewOracle works, but the race
// detector reports it: nothing orders that write before the handlers.)
func NewOracleOnRead(fenced bool, onRead func(pid int, key string)) (*Oracle, error) {
	return newOracle(fenced, onRead)
}

func newOracle(fenced bool, onRead func(pid int, key string)) (*Oracle, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &Oracle{Fenced: fenced, OnRead: onRead, keys: map[string]*oracleKey{}, ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /read", o.handleRead)
	mux.HandleFunc("POST /write", o.handleWrite)
	o.srv = &http.Server{Handler: mux}
	go o.srv.Serve(ln)
	return o, nil
}

// URL is the base URL workers are given.
func (o *Oracle) URL() string { return "http://" + o.ln.Addr().String() }

// Close stops the oracle.
func (o *Oracle) Close() error { return o.srv.Close() }

func (o *Oracle) key(k string) *oracleKey {
	ok := o.keys[k]
	if ok == nil {
		ok = &oracleKey{}
		o.keys[k] = ok
	}
	return ok
}

type oracleArgs struct {
	key      string
	proc     string
	pid      int
	token    uint64
	read     int64
	deadline int64
}

func parseOracleArgs(r *http.Request) (oracleArgs, error) {
	q := r.URL.Query()
	a := oracleArgs{key: q.Get("k"), proc: q.Get("p")}
	var err error
	if a.token, err = strconv.ParseUint(q.Get("tok"), 10, 64); err != nil {
		return a, fmt.Errorf("tok: %v", err)
	}
	if a.pid, err = strconv.Atoi(q.Get("pid")); err != nil {
		return a, fmt.Errorf("pid: %v", err)
	}
	if s := q.Get("read"); s != "" {
		if a.read, err = strconv.ParseInt(s, 10, 64); err != nil {
			return a, fmt.Errorf("read: %v", err)
		}
	}
	if s := q.Get("deadline"); s != "" {
		if a.deadline, err = strconv.ParseInt(s, 10, 64); err != nil {
			return a, fmt.Errorf("deadline: %v", err)
		}
	}
	if a.key == "" {
		return a, fmt.Errorf("k: empty")
	}
	return a, nil
}

func (o *Oracle) handleRead(w http.ResponseWriter, r *http.Request) {
	a, err := parseOracleArgs(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if o.OnRead != nil {
		o.OnRead(a.pid, a.key)
	}
	o.mu.Lock()
	o.reads++
	k := o.key(a.key)
	stale := o.Fenced && a.token < k.maxToken
	if !stale && a.token > k.maxToken {
		k.maxToken = a.token
	}
	v := k.value
	o.mu.Unlock()
	if stale {
		http.Error(w, "stale token", http.StatusConflict)
		return
	}
	json.NewEncoder(w).Encode(map[string]int64{"value": v})
}

func (o *Oracle) handleWrite(w http.ResponseWriter, r *http.Request) {
	at := Mono()
	a, err := parseOracleArgs(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	k := o.key(a.key)
	wr := Write{Key: a.key, Proc: a.proc, Pid: a.pid, Token: a.token, Read: a.read, Value: a.read + 1,
		Prev: k.value, Max: k.maxToken, At: at, Deadline: a.deadline}
	wr.Accepted = !o.Fenced || a.token >= k.maxToken
	if wr.Accepted {
		k.value = wr.Value
		if a.token > k.maxToken {
			k.maxToken = a.token
		}
	}
	o.writes = append(o.writes, wr)
	o.mu.Unlock()
	if !wr.Accepted {
		http.Error(w, "stale token", http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// OracleResult is what the oracle's log shows.
type OracleResult struct {
	Reads, Writes, Accepted, Rejected int
	// LostUpdates: accepted writes that overwrote a value other than the
	// one their writer read — someone else wrote in between, and that
	// write is lost (or counted twice).
	LostUpdates int
	// StaleAccepted: accepted writes whose token was below one accepted
	// earlier for the key (only possible unfenced).
	StaleAccepted int
	// AfterDeadline: accepted writes that arrived after their writer's
	// own local lease deadline. Not counted in Violations: a careful writer
	// checks its deadline (with a margin) before it sends, so one of these
	// means the write spent longer than the margin in transit — a stall of
	// the machine, not a wrong belief (the overlap checker judges beliefs) —
	// and a fenced resource accepts it only while no newer token has
	// reached it, when nothing is lost. Suites report the count.
	AfterDeadline int
	// CounterMismatch: keys whose final value differs from the number of
	// accepted writes.
	CounterMismatch int
	First           string // the first violation, described
}

// Violations is the number of safety violations of the resource found:
// lost or doubled updates, stale tokens accepted, wrong counters.
func (r OracleResult) Violations() int {
	return r.LostUpdates + r.StaleAccepted + r.CounterMismatch
}

// Check examines the log.
func (o *Oracle) Check() OracleResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	res := OracleResult{Reads: o.reads, Writes: len(o.writes)}
	accepted := map[string]int64{}
	maxTok := map[string]uint64{}
	note := func(format string, args ...any) {
		if res.First == "" {
			res.First = fmt.Sprintf(format, args...)
		}
	}
	for _, w := range o.writes {
		if !w.Accepted {
			res.Rejected++
			continue
		}
		res.Accepted++
		accepted[w.Key]++
		if w.Prev != w.Read {
			res.LostUpdates++
			note("%s: %s (token %d) wrote %d after reading %d, overwriting %d", w.Key, w.Proc, w.Token, w.Value, w.Read, w.Prev)
		}
		if w.Token < maxTok[w.Key] {
			res.StaleAccepted++
			note("%s: %s wrote with token %d after token %d was accepted", w.Key, w.Proc, w.Token, maxTok[w.Key])
		}
		if w.Token > maxTok[w.Key] {
			maxTok[w.Key] = w.Token
		}
		if w.Deadline != 0 && w.At > w.Deadline {
			res.AfterDeadline++
			note("%s: %s (token %d) wrote %.1f ms after its local deadline", w.Key, w.Proc, w.Token, float64(w.At-w.Deadline)/1e6)
		}
	}
	for key, k := range o.keys {
		if k.value != accepted[key] {
			res.CounterMismatch++
			note("%s: counter is %d after %d accepted increments", key, k.value, accepted[key])
		}
	}
	return res
}
