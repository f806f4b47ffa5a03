package server

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// PageLister is implemented by backends that read one page of a list
// without collecting every lease under the prefix (Engine). GET
// /v1/leases uses it: a page of 10 of a million leases cost 522 MB of
// allocations through List (issue 27's red team, #3).
type PageLister interface {
	// ListPage returns at most n of the live leases whose names start
	// with prefix, sort after after ("": from the start) and pass keep
	// (nil: all): the first n by name, sorted by name. Fewer than n
	// means none remain. It reports durable state only, like List.
	ListPage(ctx context.Context, prefix, after string, n int, keep func(name string) bool) ([]leasehold.Record, error)
}

var _ PageLister = (*Engine)(nil)

// listPage is b's ListPage when it has one, else the same page cut from
// b.List.
func listPage(ctx context.Context, b Backend, prefix, after string, n int, keep func(string) bool) ([]leasehold.Record, error) {
	if pl, ok := b.(PageLister); ok {
		return pl.ListPage(ctx, prefix, after, n, keep)
	}
	if n < 1 {
		return nil, &leasehold.InvalidError{Field: "limit", Reason: fmt.Sprintf("%d is not a page size (1 or more)", n)}
	}
	recs, err := b.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	out := recs[:0]
	for _, r := range recs {
		if len(out) == n {
			break
		}
		if (after != "" && r.Name <= after) || (keep != nil && !keep(r.Name)) {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// listPageBounded is listPage read in one of the process's list slots
// (listBounded).
func listPageBounded(ctx context.Context, b Backend, prefix, after string, n int, keep func(string) bool) ([]leasehold.Record, error) {
	select {
	case listGate <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-listGate }()
	return listPage(ctx, b, prefix, after, n, keep)
}

// ListPage implements PageLister: the scan keeps only the names of the
// first n matches so far (a max-heap of names: no record is copied until
// the page is known), so a page costs its n leases, not every match.
func (e *Engine) ListPage(ctx context.Context, prefix, after string, n int, keep func(string) bool) ([]leasehold.Record, error) {
	if n < 1 {
		return nil, &leasehold.InvalidError{Field: "limit", Reason: fmt.Sprintf("%d is not a page size (1 or more)", n)}
	}
	if err := e.lockOpen(storekit.ValidatePrefix(prefix)); err != nil {
		return nil, err
	}
	now := e.now()
	top := make(nameHeap, 0, min(n, 1024))
	pending := false
	for name, ent := range e.leases {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		// As List: a change not durable yet of any name looked at waits.
		pending = pending || ent.pending.Load() > 0
		if (after != "" && name <= after) || !ent.live(now) {
			continue
		}
		if len(top) == n && name >= top[0] {
			continue
		}
		if keep != nil && !keep(name) {
			continue
		}
		top.add(name, n)
	}
	sort.Strings(top)
	out := make([]leasehold.Record, 0, len(top))
	for _, name := range top {
		out = append(out, e.leases[name].record(now))
	}
	if err := e.unlockDurable(pending); err != nil {
		return nil, err
	}
	return out, nil
}

// nameHeap is a max-heap of names (the largest at 0).
type nameHeap []string

// add puts name in h, keeping at most n (dropping the largest).
func (h *nameHeap) add(name string, n int) {
	s := *h
	if len(s) < n {
		s = append(s, name)
		for i := len(s) - 1; i > 0; {
			p := (i - 1) / 2
			if s[p] >= s[i] {
				break
			}
			s[p], s[i] = s[i], s[p]
			i = p
		}
		*h = s
		return
	}
	if name >= s[0] {
		return
	}
	s[0] = name
	for i := 0; ; {
		l, big := 2*i+1, i
		if l < len(s) && s[l] > s[big] {
			big = l
		}
		if r := l + 1; r < len(s) && s[r] > s[big] {
			big = r
		}
		if big == i {
			break
		}
		s[i], s[big] = s[big], s[i]
		i = big
	}
}

// ListPage implements PageLister (lists count against no quota).
func (b *quotaBackend) ListPage(ctx context.Context, prefix, after string, n int, keep func(string) bool) ([]leasehold.Record, error) {
	return listPage(ctx, b.Backend, prefix, after, n, keep)
}
