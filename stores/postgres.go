package stores

import (
	"context"
	"net/url"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
)

// The PostgreSQL store, under both schemes libpq accepts:
//
//	postgres://user@host:5432/db?table=leasehold_leases&migrate=false
//	postgresql://...
//
// The URL goes to postgres.Open as is; see there for leasehold's own
// parameters (table, migrate) and pgx's (sslmode, pool_max_conns, ...).
// "leasehold store init" runs postgres.Init, which creates the table even
// when the URL says migrate=false.
func init() {
	open := func(ctx context.Context, u *url.URL) (leasehold.Store, error) {
		return postgres.Open(ctx, u.String())
	}
	initTable := func(ctx context.Context, u *url.URL) error {
		return postgres.Init(ctx, u.String())
	}
	for _, scheme := range []string{"postgres", "postgresql"} {
		Register(scheme, open)
		RegisterInit(scheme, initTable)
	}
}
