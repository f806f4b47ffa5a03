package postgres

import (
	"context"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold"
)

// Fencing: a lease alone cannot stop a holder that was paused (GC, swap,
// a stopped VM) past its expiry from writing after someone else took the
// lease over. The resource it writes can: each protected row keeps the
// highest fencing token that has written it, and a write is applied only
// if its token is at least that high. A stale holder's token is lower than
// its successor's, so once the successor has written, the stale write
// changes nothing.
//
//	ALTER TABLE accounts ADD COLUMN fence bigint NOT NULL DEFAULT 0;
//
//	UPDATE accounts SET balance = $2, fence = $3
//	WHERE id = $1 AND "fence" <= $3     -- Fence("fence", 3)
//
// Use one lease name per protected resource: tokens of different names are
// unrelated.

// ErrFenced reports a fenced write that changed nothing: a writer holding
// a newer token of the lease has already written (or the row does not
// exist). It matches leasehold.ErrLost with errors.Is, since a newer token
// means the lease has been taken over.
var ErrFenced = fmt.Errorf("%w: fenced write refused: a newer token has written, or the row does not exist", leasehold.ErrLost)

var columnRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Fence returns the predicate that admits a write carrying the token
// in parameter $param: `"column" <= $param`, with column quoted (it must be
// a plain identifier, [A-Za-z_][A-Za-z0-9_]*, matched case-sensitively). Put
// it in the WHERE clause of an UPDATE that also sets column = $param. It
// panics on a bad column or a param below 1, which are programming errors.
func Fence(column string, param int) string {
	if !columnRE.MatchString(column) || param < 1 {
		panic(fmt.Sprintf("postgres.Fence(%q, %d): want a plain identifier and a parameter number >= 1", column, param))
	}
	return fmt.Sprintf("%s <= $%d", pgx.Identifier{column}.Sanitize(), param)
}

// Execer is what FencedExec runs a statement on: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// FencedExec runs stmt, a write guarded by Fence, and returns
// ErrFenced when it changed no row. Database errors come back with their
// message (no driver types); context errors pass through. Pass the token as
// an int64 or uint64 argument.
func FencedExec(ctx context.Context, db Execer, stmt string, args ...any) error {
	tag, err := db.Exec(ctx, stmt, args...)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return pgError(err)
	case tag.RowsAffected() == 0:
		return ErrFenced
	}
	return nil
}
