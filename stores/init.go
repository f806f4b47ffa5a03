package stores

import (
	"context"
	"fmt"
	"github.com/leasehold/leasehold/internal/redact"
	"os"
)

// Initializer prepares an engine for leasehold (creates its table, schema
// or anything else the store would otherwise create on first open).
type Initializer func(ctx context.Context, rawURL string) error

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
// applications need not have. It is idempotent. The URL's connect_timeout=
// bounds it if given; DefaultConnectTimeout does not (creating a table can
// take longer), except where Init opens the store (schemes without an
// initializer).
func Init(ctx context.Context, rawURL string) error {
	if rawURL == "" {
		rawURL = os.Getenv(EnvStore)
	}
	if rawURL != "" {
		scheme, err := schemeOf(rawURL)
		if err != nil {
			return err
		}
		if f, ok := initializers[scheme]; ok {
			// Only an explicit connect_timeout= bounds it: creating a
			// table can take longer than connecting (DynamoDB's does).
			d, rest, set, err := splitConnectTimeout(scheme, rawURL)
			if err != nil {
				return err
			}
			if set {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			return redact.Error(timedOut(ctx, d, f(ctx, rest)), redact.Secrets(rawURL)...)
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
