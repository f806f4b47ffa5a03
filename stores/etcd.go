package stores

import (
	"github.com/leasehold/leasehold/etcd"
)

// etcd:// and etcds:// open the etcd store (see package etcd for the URL
// parameters).
func init() {
	Register("etcd", opener(etcd.Open))
	Register("etcds", opener(etcd.Open))
}
