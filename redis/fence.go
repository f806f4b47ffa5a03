package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// A lease does not fence writes by itself: a holder that stalls past its
// lease (a GC pause, a suspended VM) may still write after another owner
// took the lease over. The resource must reject such writes by token.
// FencedSet does that for a value kept in Redis; docs/stores/redis.md has
// a WATCH/MULTI recipe for data of other shapes.

//go:embed fencedset.lua
var fencedSetSrc string

var fencedSetScript = goredis.NewScript(fencedSetSrc)

// ErrFenced reports a write refused because a write with a greater fencing
// token was already stored. It matches leasehold.ErrLost with errors.Is,
// since a greater token means the writer's lease was taken over, like
// ErrFenced of the other stores; it also still matches
// leasehold.ErrNotHeld, as it did before, so that code written against
// that keeps recognising a refused write.
var ErrFenced = fmt.Errorf("%w: a write with a greater fencing token was already stored (%w)", leasehold.ErrLost, leasehold.ErrNotHeld)

// FencedSet stores value under key (a hash with the fields value and
// token) as a write made with the lease token token, atomically and in one
// round trip, unless the key already holds a write with a greater token;
// then it changes nothing and returns an error matching ErrFenced (and
// leasehold.ErrLost). Writes with an equal token are accepted, so one
// holder may write many times. client is any go-redis client (a cluster
// client too: only key is touched). Other errors are the connection's.
func FencedSet(ctx context.Context, client goredis.Scripter, key, value string, token uint64) error {
	if err := storekit.ValidateToken(token); err != nil {
		return err
	}
	res, err := fencedSetScript.Run(ctx, client, []string{key}, value, strconv.FormatUint(token, 10)).Slice()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("redis fenced set %q: %s", key, err.Error())
	}
	if ok, _ := toInt(res[0]); ok == 1 {
		return nil
	}
	return fmt.Errorf("%w (key %q: token %d, stored token %v)", ErrFenced, key, token, res[1])
}

// FencedGet returns the value and token last stored by FencedSet under
// key, or leasehold.ErrNotFound if there is none.
func FencedGet(ctx context.Context, client goredis.Cmdable, key string) (value string, token uint64, err error) {
	vals, err := client.HMGet(ctx, key, "value", "token").Result()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return "", 0, cerr
		}
		return "", 0, fmt.Errorf("redis fenced get %q: %s", key, err.Error())
	}
	v, ok1 := vals[0].(string)
	t, ok2 := vals[1].(string)
	if !ok1 || !ok2 {
		return "", 0, leasehold.ErrNotFound
	}
	token, err = strconv.ParseUint(t, 10, 64)
	if err != nil {
		return "", 0, errors.New("redis fenced get: stored token is not a number")
	}
	return v, token, nil
}
