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
// applications need not have. It is idempotent.
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
			return redact.Error(f(ctx, rawURL), redact.Secrets(rawURL)...)
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
