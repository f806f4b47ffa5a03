package etcd

import (
	"encoding/binary"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Keys, under the store's prefix P:
//
//	P + "l/" + name   the live grant: its record (below), attached to the
//	                  grant's own etcd lease, so etcd deletes it on expiry.
//	                  Its CreateRevision is the grant's fencing token.
//	P + "o/" + name   the name's latest grant: its owner, without a lease.
//	                  Written only by the transaction that creates a grant,
//	                  so its ModRevision is that grant's token. It outlives
//	                  release and expiry, to recognise a repeated release.
//
// Lease keys and owner keys live under different sub-prefixes, so a List
// (a range over P + "l/" + prefix) never sees an owner key. Names are used
// as they are, byte for byte.

func (s *Store) leaseKey(name string) string { return s.prefix + "l/" + name }
func (s *Store) ownerKey(name string) string { return s.prefix + "o/" + name }

// minLeaseSeconds is the shortest etcd lease the store asks for. etcd's
// own minimum is 1.5 election timeouts rounded up (2 s by default), and a
// lease of 1 s would report a remaining TTL of 0 (whole seconds, rounded
// down) even right after a renewal, which the store could not tell from an
// expired one.
const minLeaseSeconds = 2

// leaseSeconds is the etcd lease TTL for a leasehold TTL: rounded up to
// whole seconds, at least minLeaseSeconds.
func leaseSeconds(ttl time.Duration) int64 {
	return max(int64((ttl+time.Second-1)/time.Second), minLeaseSeconds)
}

// record is the value of a lease key.
type record struct {
	owner     string
	requestID string
	ttl       time.Duration
	acquired  time.Time
	data      []byte
}

const recordVersion = 1

func (r record) encode() string {
	b := make([]byte, 0, 32+len(r.owner)+len(r.requestID)+len(r.data))
	b = append(b, recordVersion)
	b = binary.AppendUvarint(b, uint64(r.ttl))
	b = binary.AppendVarint(b, r.acquired.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(r.owner)))
	b = append(b, r.owner...)
	b = binary.AppendUvarint(b, uint64(len(r.requestID)))
	b = append(b, r.requestID...)
	b = append(b, r.data...)
	return string(b)
}

var errCorrupt = errors.New("etcd: a lease key holds a value this version of leasehold cannot read")

func decodeRecord(v []byte) (record, error) {
	var r record
	if len(v) == 0 || v[0] != recordVersion {
		return r, errCorrupt
	}
	v = v[1:]
	ttl, n := binary.Uvarint(v)
	if n <= 0 {
		return r, errCorrupt
	}
	v = v[n:]
	acq, n := binary.Varint(v)
	if n <= 0 {
		return r, errCorrupt
	}
	v = v[n:]
	str := func() (string, bool) {
		l, n := binary.Uvarint(v)
		if n <= 0 || uint64(len(v)-n) < l {
			return "", false
		}
		s := string(v[n : n+int(l)])
		v = v[n+int(l):]
		return s, true
	}
	var ok1, ok2 bool
	r.owner, ok1 = str()
	r.requestID, ok2 = str()
	if !ok1 || !ok2 {
		return r, errCorrupt
	}
	r.ttl, r.acquired = time.Duration(ttl), time.Unix(0, acq)
	if len(v) > 0 {
		r.data = append([]byte(nil), v...)
	}
	return r, nil
}

// cmpAbsent holds when key does not exist.
func cmpAbsent(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
}
