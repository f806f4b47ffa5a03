package remote

import (
	"context"
	"time"

	"github.com/leasehold/leasehold"
)

// reclaimGrant releases a grant that may have raced with the end of a
// wait whose reply never came: if the lease is held by req's owner, an
// acquire with req's request id (try) gets that grant back, and only that
// one, and it is released. Best effort, bounded by 2s: a grant it misses
// expires after its TTL.
func reclaimGrant(parent context.Context, st leasehold.Store, req leasehold.AcquireRequest,
	try func(context.Context, leasehold.AcquireRequest) (leasehold.Record, error)) {
	ctx, cancel := context.WithTimeout(parent, reclaimTimeout)
	defer cancel()
	rec, err := st.Get(ctx, req.Name)
	if err != nil || rec.Owner != req.Owner {
		return
	}
	if got, err := try(ctx, req); err == nil {
		_ = st.Release(ctx, req.Name, req.Owner, got.Token)
	}
}

const reclaimTimeout = 2 * time.Second
