package stores

import (
	"github.com/leasehold/leasehold/postgres"
)

// postgres:// and postgresql:// open the PostgreSQL store (see package
// postgres for the URL parameters).
func init() {
	for _, scheme := range []string{"postgres", "postgresql"} {
		Register(scheme, opener(postgres.Open))
		RegisterInit(scheme, postgres.Init)
	}
}
