package stores

import (
	"context"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
)

// http:// and https:// open the lease server's HTTP API as a store (see
// package remote for the URL parameters).
func init() {
	open := func(_ context.Context, rawURL string) (leasehold.Store, error) {
		s, err := remote.OpenHTTP(rawURL)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	}
	Register("http", open)
	Register("https", open)
}
