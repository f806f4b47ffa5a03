package partition_test

import (
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/crash"
	"github.com/leasehold/leasehold/testrig/verify/partition"
	"github.com/leasehold/leasehold/testrig/verify/recipes"
)

// termWatch polls the raft term of a cluster every 300 ms: a change of
// leader gives every etcd lease its full TTL again.
type termWatch struct {
	mu      sync.Mutex
	changes []crash.Restart // each change's interval: Killed..Up, on verify.Mono
	stop    chan struct{}
	done    chan struct{}
}

// termLag is how much earlier than the last poll that saw the old term a
// change is taken to have begun: a new leader renews the leases when it
// takes office, and the members report its term only once they have
// applied its first entry, a round trip later (more on a loaded machine).
const termLag = 500 * time.Millisecond

// watchTerms polls m's term until Stop. A change is placed between the
// start of the last poll that a majority of the members answered with the
// old term (less termLag) and the end of the poll that saw the new one: a
// poll that fewer answered says nothing of the term (the leader is among
// any majority's voters), so the interval starts before it.
func watchTerms(m *partition.Members) *termWatch {
	w := &termWatch{stop: make(chan struct{}), done: make(chan struct{})}
	majority := len(m.Addrs)/2 + 1
	go func() {
		defer close(w.done)
		last := verify.Mono()
		term, _ := m.Term()
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			asked := verify.Mono()
			cur, answered := m.Term()
			switch {
			case cur > term:
				now := verify.Mono()
				w.mu.Lock()
				w.changes = append(w.changes, crash.Restart{Killed: last - int64(termLag), Up: now})
				w.mu.Unlock()
				term, last = cur, asked
			case answered >= majority:
				last = asked
			}
		}
	}()
	return w
}

// Stop ends the watch and returns the changes it saw.
func (w *termWatch) Stop() []crash.Restart {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]crash.Restart(nil), w.changes...)
}

// modelEtcd returns h with what etcd does by design made explicit for the
// model (see TestR7): an acquire without an answer may have been granted
// and ended by the store at any moment (recipes.EtcdUnconfirmedGrants:
// unheard is how many), and each change of leader renews every lease,
// modelled as an indeterminate renewal by the latest holder of every key
// at both ends of the interval in which it happened (at its start for the
// lease current then, at its end for one granted meanwhile; added is how
// many operations that adds).
func modelEtcd(t *testing.T, h *verify.History, changes []crash.Restart) (out *verify.History, added, unheard int) {
	t.Helper()
	out, unheard = recipes.EtcdUnconfirmedGrants(h)
	var at []crash.Restart
	for _, c := range changes {
		t.Logf("raft term changed between mono %.3f s and %.3f s", float64(c.Killed)/1e9, float64(c.Up)/1e9)
		at = append(at, crash.Restart{Killed: c.Killed, Up: c.Killed}, crash.Restart{Killed: c.Up, Up: c.Up})
	}
	out, added = crash.RecoveryRenewals(out, at)
	return out, added, unheard
}
