package stores

import (
	"context"
	"fmt"
	"net/url"
	"os"

	"github.com/leasehold/leasehold"
)

// Initializer prepares an engine for leasehold (creates its table, schema
// or anything else the store would otherwise create on first open).
type Initializer func(ctx context.Context, u *url.URL) error

var initializers = map[string]Initializer{}

// RegisterInit adds an initializer for a URL scheme, for "leasehold store
// init". Schemes without one are initialised by opening and closing the
// store. Registering a scheme twice panics.
func RegisterInit(scheme string, f Initializer) {
	if _, dup := initializers[scheme]; dup {
		panic("stores: init registered twice: " + scheme)
	}
	initializers[scheme] = f
}

// Init prepares the store named by rawURL (empty: as in Open) so that
// operators can run schema changes ahead of time, with rights the
// applications need not have. It is idempotent.
func Init(ctx context.Context, rawURL string) error {
	if rawURL == "" {
		rawURL = os.Getenv(EnvStore)
	}
	if rawURL != "" {
		u, err := url.Parse(rawURL)
		if err != nil {
			return &leasehold.InvalidError{Field: "store URL", Reason: err.Error()}
		}
		if f, ok := initializers[u.Scheme]; ok {
			return f(ctx, u)
		}
	}
	s, err := Open(ctx, rawURL)
	if err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}
