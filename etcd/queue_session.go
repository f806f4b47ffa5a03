package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// sessionIdle is how long the session lease is kept alive after its last
// waiter left, for the next one.
const sessionIdle = 10 * time.Second

// session is the etcd lease that the store's queue entries are attached to.
type session struct {
	id     clientv3.LeaseID
	done   chan struct{} // closed when the keepalive ends
	cancel context.CancelFunc
	users  int // waiters using it; under Store.qmu
}

func (se *session) dead() bool {
	select {
	case <-se.done:
		return true
	default:
		return false
	}
}

// joinSession returns the live session, granting one if there is none.
func (s *Store) joinSession(ctx context.Context) (*session, error) {
	s.qmu.Lock()
	if se := s.sess; se != nil && !se.dead() {
		se.users++
		s.qmu.Unlock()
		return se, nil
	}
	s.qmu.Unlock()
	resp, err := s.cli.Grant(ctx, leaseSeconds(s.liveness))
	if err != nil {
		return nil, s.fail(ctx, "queue session", err)
	}
	kctx, cancel := context.WithCancel(s.stop)
	ch, err := s.cli.KeepAlive(kctx, resp.ID)
	if err != nil {
		cancel()
		s.revokeLater(resp.ID)
		return nil, s.fail(ctx, "queue session", err)
	}
	se := &session{id: resp.ID, done: make(chan struct{}), cancel: cancel, users: 1}
	go func() {
		for range ch {
		}
		close(se.done)
	}()
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if cur := s.sess; cur != nil && !cur.dead() { // another waiter was quicker
		cancel()
		s.revokeLater(resp.ID)
		cur.users++
		return cur, nil
	}
	s.sess = se
	return se, nil
}

// countWaiter counts an AcquireWait of name in progress in this store;
// the returned func uncounts it.
func (s *Store) countWaiter(name string) func() {
	s.qmu.Lock()
	s.waiting[name]++
	s.qmu.Unlock()
	return func() {
		s.qmu.Lock()
		defer s.qmu.Unlock()
		if s.waiting[name]--; s.waiting[name] <= 0 {
			delete(s.waiting, name)
		}
	}
}

// hasWaiters reports whether this store has an AcquireWait of name in
// progress.
func (s *Store) hasWaiters(name string) bool { return s.waiters(name) > 0 }

// waiters counts this store's AcquireWaits of name in progress.
func (s *Store) waiters(name string) int {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return s.waiting[name]
}

// leaveSession drops a waiter's use of se; the store ends se after
// sessionIdle without waiters.
func (s *Store) leaveSession(se *session) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if se.users--; se.users > 0 {
		return
	}
	if s.sess != se {
		se.cancel()
		return
	}
	time.AfterFunc(sessionIdle, func() {
		s.qmu.Lock()
		idle := s.sess == se && se.users == 0
		if idle {
			s.sess = nil
		}
		s.qmu.Unlock()
		if idle {
			se.cancel()
			s.revokeLater(se.id)
		}
	})
}

// dropSession ends se at once (an entry of it could not be removed: its
// expiry removes it). Its other waiters queue again.
func (s *Store) dropSession(se *session) {
	s.qmu.Lock()
	if s.sess == se {
		s.sess = nil
	}
	s.qmu.Unlock()
	se.cancel()
	s.revokeLater(se.id)
}

// closeSession revokes the session at Close.
func (s *Store) closeSession(ctx context.Context) {
	s.qmu.Lock()
	se := s.sess
	s.sess = nil
	s.qmu.Unlock()
	if se != nil {
		se.cancel()
		_, _ = s.cli.Revoke(ctx, se.id)
	}
}

// deadSession stands in for a session that could not be made: enqueue
// tries again.
func (s *Store) deadSession() *session {
	se := &session{done: make(chan struct{}), cancel: func() {}, users: 1}
	close(se.done)
	return se
}
