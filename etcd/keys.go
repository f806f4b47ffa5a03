package etcd

import (
	"encoding/binary"
	"errors"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
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
//	P + "l/" + name + NUL + "a" or "b"
//	                  the grant's token key: empty, on the grant's etcd
//	                  lease, created by the transaction that makes the
//	                  grant, so its CreateRevision is the token. A handoff
//	                  (release.go) rewrites the lease key for the next
//	                  holder, which keeps the lease key's CreateRevision,
//	                  so it deletes the token key and creates the other
//	                  one in the same transaction. Grants of versions
//	                  before handoffs have no token key; their token is
//	                  the lease key's CreateRevision.
//
// A name's grant is the range [P l/name, P l/name + "\x01"): the lease key
// and at most one token key, no other name's (names have no control
// characters). Grants are made only if that whole range is empty.
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

// grantEnd is the end of the range of name's lease and token keys.
func grantEnd(lk string) string { return lk + "\x01" }

// tokenKey is the token key of slot (0 or 1) of the grant at lease key lk.
func tokenKey(lk string, slot int) string { return lk + "\x00" + string(rune('a'+slot)) }

// cmpFree holds when the lease key lk and its token keys are absent.
func cmpFree(lk string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(lk), "=", 0).WithRange(grantEnd(lk))
}

// cmpToken holds while the grant with token has its token key: not
// released, and not expired and deleted.
func cmpToken(lk string, token int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(lk+"\x00"), "=", token).WithRange(grantEnd(lk))
}

// opGetGrant reads the lease key lk and its token key.
func opGetGrant(lk string) clientv3.Op { return clientv3.OpGet(lk, clientv3.WithRange(grantEnd(lk))) }

// grant is a lease key as read with its token key (opGetGrant).
type grant struct {
	kv    *mvccpb.KeyValue // the lease key
	tk    string           // its token key; "" for a grant of an older version
	token int64
}

// grantOf picks the grant out of the keys of opGetGrant (or of a range
// over several names, from kvs[0] on); ok is false when there is no lease
// key. n is how many of kvs belong to it.
func grantOf(kvs []*mvccpb.KeyValue) (g grant, n int, ok bool) {
	if len(kvs) == 0 {
		return grant{}, 0, false
	}
	lk := string(kvs[0].Key)
	if i := strings.IndexByte(lk, 0); i >= 0 { // a token key whose lease key is gone: skip it
		n = 1
		for n < len(kvs) && strings.HasPrefix(string(kvs[n].Key), lk[:i+1]) {
			n++
		}
		return grant{}, n, false
	}
	g = grant{kv: kvs[0], token: kvs[0].CreateRevision}
	for n = 1; n < len(kvs) && strings.HasPrefix(string(kvs[n].Key), lk+"\x00"); n++ {
		g.tk, g.token = string(kvs[n].Key), kvs[n].CreateRevision
	}
	return g, n, true
}

// moveTo returns the puts that rewrite the grant's lease key with val and
// move it and its token key onto etcd lease id (their CreateRevisions, so
// the token, stay).
func (g grant) moveTo(val string, id clientv3.LeaseID) []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpPut(string(g.kv.Key), val, clientv3.WithLease(id))}
	if g.tk != "" {
		ops = append(ops, clientv3.OpPut(g.tk, "", clientv3.WithLease(id)))
	}
	return ops
}

// cmpAbsent holds when key does not exist.
func cmpAbsent(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
}
