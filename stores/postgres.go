package stores

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
)

// postgres:// and postgresql:// open the PostgreSQL store (see package
// postgres for the URL parameters); OpenExisting opens it without
// migration (postgres.OpenExisting).
func init() {
	for _, scheme := range []string{"postgres", "postgresql"} {
		Register(scheme, opener(postgres.Open))
		RegisterInit(scheme, postgres.Init)
		RegisterExisting(scheme, openPostgresExisting)
	}
}

func openPostgresExisting(ctx context.Context, rawURL string) (leasehold.Store, error) {
	s, err := postgres.OpenExisting(ctx, rawURL)
	var nt *postgres.NoTableError
	if errors.As(err, &nt) {
		return nil, &NoStoreError{Engine: "PostgreSQL", Table: nt.Table}
	}
	return asStore(s, err)
}
