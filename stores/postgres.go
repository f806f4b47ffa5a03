package stores

import (
	"context"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
)

// postgres:// and postgresql:// open the PostgreSQL store (see package
// postgres for the URL parameters).
func init() {
	open := func(ctx context.Context, rawURL string) (leasehold.Store, error) {
		return asStore(postgres.Open(ctx, rawURL))
	}
	for _, scheme := range []string{"postgres", "postgresql"} {
		Register(scheme, open)
		RegisterInit(scheme, postgres.Init)
	}
}
