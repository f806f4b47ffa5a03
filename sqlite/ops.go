package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// Each write is one SQL statement in its own (implicit) transaction: one
// commit, one fsync of the WAL. The rules are those of
// storekit/leasestate, written in SQL; the conformance suite checks both.
//
// A row is live when held = 1, it was written in this boot and its expiry
// (on the boot-time clock) is in the future.

// acquireSQL grants when the row is free, expired or from an earlier boot
// (the token goes up by one), or when the same owner retries the same
// request while it is live (same token, fresh expiry). It returns no row
// when someone else holds the lease.
const acquireSQL = `INSERT INTO leasehold_leases
	(name, owner, request_id, token, data, ttl_ns, expires_ns, boot_id, held, acquired_ns)
	VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6 + ?5, ?7, 1, ?8)
	ON CONFLICT(name) DO UPDATE SET
		token = CASE WHEN held = 1 AND boot_id = ?7 AND expires_ns > ?6 THEN token ELSE token + 1 END,
		acquired_ns = CASE WHEN held = 1 AND boot_id = ?7 AND expires_ns > ?6 THEN acquired_ns ELSE ?8 END,
		owner = ?2, request_id = ?3, data = ?4, ttl_ns = ?5, expires_ns = ?6 + ?5, boot_id = ?7, held = 1
	WHERE NOT (held = 1 AND boot_id = ?7 AND expires_ns > ?6)
		OR (?3 != '' AND owner = ?2 AND request_id = ?3)
	RETURNING token, acquired_ns`

const renewSQL = `UPDATE leasehold_leases SET expires_ns = ?1 + ?2, ttl_ns = ?2
	WHERE name = ?3 AND owner = ?4 AND token = ?5 AND held = 1 AND boot_id = ?6 AND expires_ns > ?1`

// releaseSQL matches the latest grant of that owner and token, held or
// already released; SQLite counts the row as changed either way, which
// makes a repeated release succeed.
const releaseSQL = `UPDATE leasehold_leases SET held = 0, expires_ns = 0
	WHERE name = ?1 AND owner = ?2 AND token = ?3`

// TryAcquire implements leasehold.Store.
func (s *Store) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	data := req.Data
	if data == nil {
		data = []byte{}
	}
	for attempt := 0; ; attempt++ {
		if err := s.writable(ctx); err != nil {
			return leasehold.Record{}, err
		}
		var token, acquired int64
		s.writeMu.Lock()
		now := s.now()
		err := s.db.QueryRowContext(ctx, acquireSQL, req.Name, req.Owner, req.RequestID, data,
			int64(req.TTL), now, s.bootID, time.Now().UnixNano()).Scan(&token, &acquired)
		s.writeMu.Unlock()
		if err == nil {
			return leasehold.Record{
				Name: req.Name, Owner: req.Owner, Token: uint64(token), Data: req.Data, TTL: req.TTL,
				Remaining: req.TTL, Acquired: time.Unix(0, acquired),
			}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return leasehold.Record{}, translate(err)
		}
		// Held: read the holder to report it. If it went away in between,
		// try again.
		r, err := s.load(ctx, s.db, req.Name)
		if err != nil {
			return leasehold.Record{}, err
		}
		now = s.now()
		if r.Live(now) || attempt >= 3 {
			he := &leasehold.HeldError{Name: req.Name}
			if r != nil {
				he.Owner, he.Token, he.Remaining, he.Acquired = r.Owner, r.Token, max(time.Duration(r.Expires-now), 0), r.Acquired
			}
			return leasehold.Record{}, he
		}
	}
}

// Renew implements leasehold.Store.
func (s *Store) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := storekit.ValidateRenew(name, owner, token, ttl); err != nil {
		return err
	}
	return s.exec1(ctx, renewSQL, s.now(), int64(ttl), name, owner, int64(token), s.bootID)
}

// Release implements leasehold.Store.
func (s *Store) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	err := s.exec1(ctx, releaseSQL, name, owner, int64(token))
	if err == nil {
		s.watch.notify(name)
	}
	return err
}

// exec1 runs a conditional update that must change exactly one row, else
// the caller does not hold the lease.
func (s *Store) exec1(ctx context.Context, query string, args ...any) error {
	if err := s.writable(ctx); err != nil {
		return err
	}
	s.writeMu.Lock()
	res, err := s.db.ExecContext(ctx, query, args...)
	s.writeMu.Unlock()
	if err != nil {
		return translate(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return translate(err)
	} else if n == 0 {
		return leasehold.ErrNotHeld
	}
	return nil
}
