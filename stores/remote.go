package stores

import (
	"github.com/leasehold/leasehold/remote"
)

// The lease server as a store (see package remote for the URL
// parameters): http:// and https:// speak its HTTP API, leasehold:// and
// leaseholds:// its pipelined RESP protocol.
func init() {
	for _, scheme := range []string{"http", "https", "leasehold", "leaseholds"} {
		Register(scheme, remote.Open)
	}
}
