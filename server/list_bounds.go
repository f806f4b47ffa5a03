package server

import (
	"context"

	"github.com/leasehold/leasehold"
)

// Listing leases costs memory in proportion to their data: the backend's
// List copies every lease under the prefix, and the answer repeats them.
// (A page, GET /v1/leases or LH.SCAN, reads only its own leases from a
// backend with ListPage, the engine: list_page.go.)
// Two bounds keep a flood of lists (issue 26's review: 20 RESP LH.LIST of
// 2,000 leases of 64 KiB each took a server to 4 GB; 30 unread HTTP lists
// to 8 GB) inside a known size, whatever the connections do:
//
//   - listSlots: at most this many lists are read from the backend at a
//     time in the whole process (HTTP and RESP together); others wait for
//     a slot within their request's context.
//   - listPageBytes: one answer holds at most this many bytes of leases
//     (names, owners and data, as sent); an HTTP page or an LH.SCAN page
//     stops early and gives its cursor, and LH.LIST refuses (TOOMANY) a
//     prefix whose leases come to more.
const (
	listSlots     = 2
	listPageBytes = 8 << 20
)

var listGate = make(chan struct{}, listSlots)

// listBounded returns b.List(ctx, prefix) read in one of the process's
// list slots.
func listBounded(ctx context.Context, b Backend, prefix string) ([]leasehold.Record, error) {
	select {
	case listGate <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-listGate }()
	return b.List(ctx, prefix)
}

// recordBytes is about what a lease costs in an answer: its name, owner
// and data (data counted as base64, HTTP's worst case) and the fields'
// overhead.
func recordBytes(r *leasehold.Record) int {
	return len(r.Name) + len(r.Owner) + (len(r.Data)+2)/3*4 + 160
}
