package server

import (
	"context"
	"strings"
	"sync"
)

// hub fans events out to subscribers and keeps the latest ones for Recent.
// Publishing never blocks: a subscriber whose buffer is full loses events
// and gets one EventOverflow when there is room again.
type hub struct {
	mu     sync.Mutex
	subs   map[*sub]struct{}
	ring   []Event
	next   int
	filled bool
}

type sub struct {
	prefix   string
	ch       chan Event
	overflow bool
}

const subBuffer = 1024

func newHub(recent int) *hub {
	if recent <= 0 {
		recent = 256
	}
	return &hub{subs: map[*sub]struct{}{}, ring: make([]Event, recent)}
}

func (h *hub) publish(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ring[h.next] = ev
	h.next = (h.next + 1) % len(h.ring)
	if h.next == 0 {
		h.filled = true
	}
	for s := range h.subs {
		if !strings.HasPrefix(ev.Name, s.prefix) {
			continue
		}
		if s.overflow {
			select {
			case s.ch <- Event{Type: EventOverflow, Time: ev.Time}:
				s.overflow = false
			default:
				continue
			}
		}
		select {
		case s.ch <- ev:
		default:
			s.overflow = true
		}
	}
}

func (h *hub) subscribe(ctx context.Context, prefix string) <-chan Event {
	s := &sub{prefix: prefix, ch: make(chan Event, subBuffer)}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		if _, ok := h.subs[s]; ok {
			delete(h.subs, s)
			close(s.ch)
		}
		h.mu.Unlock()
	})
	return s.ch
}

// closeAll ends every subscription (the backend is closing).
func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		delete(h.subs, s)
		close(s.ch)
	}
}

func (h *hub) recent(n int) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var all []Event
	if h.filled {
		all = append(all, h.ring[h.next:]...)
	}
	all = append(all, h.ring[:h.next]...)
	if n >= 0 && len(all) > n {
		all = all[len(all)-n:]
	}
	return all
}
