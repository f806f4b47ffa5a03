package remote

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/wire/httpwire"
)

// --- leasehold.Watcher ---

// Watch implements leasehold.Watcher with the server's event stream for
// the name (GET /v1/events?name=). It returns once the server has
// subscribed, so every later release is signalled. When the stream breaks
// it reconnects, and signals once (a release may have been missed).
func (s *HTTPStore) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := storekit.ValidateName(name); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	body, err := s.openEvents(wctx, name)
	if err != nil {
		stop()
		cancel()
		if s.closed.Load() {
			return nil, leasehold.ErrClosed
		}
		return nil, err
	}
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(out)
		defer stop()
		defer cancel()
		bo := backoff.New(50*time.Millisecond, 5*time.Second)
		for {
			readEvents(body, notify)
			body.Close()
			if wctx.Err() != nil {
				return
			}
			notify()
			for {
				if backoff.Sleep(wctx, bo.Next()) != nil {
					return
				}
				if body, err = s.openEvents(wctx, name); err == nil {
					bo.Reset()
					notify()
					break
				}
			}
		}
	}()
	return out, nil
}

// openEvents opens the event stream of name and returns its body once the
// server answered (it answers after subscribing).
func (s *HTTPStore) openEvents(ctx context.Context, name string) (io.ReadCloser, error) {
	if s.closed.Load() {
		return nil, leasehold.ErrClosed
	}
	u := s.base + "/v1/events?" + url.Values{"name": {name}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	// The answer's headers must come within the usual timeout; the stream
	// then lasts until ctx ends.
	rctx, rcancel := context.WithCancel(ctx)
	req = req.WithContext(rctx)
	timer := time.AfterFunc(s.timeout, rcancel)
	resp, err := s.client.Do(req)
	if !timer.Stop() && err == nil {
		resp.Body.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		rcancel()
		return nil, s.transportError(ctx, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer rcancel()
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, problemError(resp, data, name)
	}
	return &streamBody{resp.Body, rcancel}, nil
}

// streamBody ends its request's context when closed.
type streamBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *streamBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// readEvents reads a server-sent event stream until it ends, calling
// notify for each event that says the lease may have become free.
func readEvents(r io.Reader, notify func()) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event:"); ok && httpwire.MayFree(strings.TrimSpace(ev)) {
			notify()
		}
	}
}
