package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// The Lua code. Every lease and record operation is a Lua function
// (acquire.lua, records_put.lua, ...) over shared helpers (lease_lib.lua,
// records_lib.lua). On Redis 7.0 or later the store loads them all once as
// one Redis Function library and calls each with FCALL (FCALL_RO for get):
// the helpers are defined once at load, not at every call as a script's
// are. The library's name carries a hash of its source (leasehold_<hash>),
// and so do its functions' names (lh_<hash>_acquire, ...), since function
// names are global on a server: two versions of leasehold on one Redis
// load two libraries and each calls its own, and a library of another
// version is never taken for this one.
//
// Where the server has no functions (Redis before 7.0, or an ACL that
// denies FUNCTION or FCALL), each operation is sent as a script with
// EVALSHA instead (goredis.Script: EVAL when the server does not have it).
// The same source serves both: a script is the helpers, the operation's
// function and a call of it.
//
// The library is lost with the server's data (a restart without
// persistence, a failover to a replica that missed it, FUNCTION FLUSH): a
// call that finds its function missing loads the library and calls again,
// once, as EVALSHA's NOSCRIPT is answered with EVAL. The restart check
// (epoch.go) also lists the library and loads it when it is missing, so
// the first call after a restart seldom misses it. On Redis Cluster the
// library is loaded on every master (ForEachMaster); replicas get it from
// their master.
var (
	//go:embed lease_lib.lua
	leaseLibSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed get.lua
	getSrc string
	//go:embed epoch.lua
	epochSrc string
	//go:embed wait.lua
	waitSrc string
	//go:embed leave.lua
	leaveSrc string
	//go:embed records_lib.lua
	recordsLibSrc string
	//go:embed records_put.lua
	recordsPutSrc string
	//go:embed records_delete.lua
	recordsDeleteSrc string
	//go:embed records_add.lua
	recordsAddSrc string
	//go:embed records_txn.lua
	recordsTxnSrc string
)

// luaOp is one operation: a function of the library, or a script.
type luaOp struct {
	fn     string          // the registered function name, lh_<hash>_<name>
	ro     bool            // flagged no-writes: called with FCALL_RO
	script *goredis.Script // the same function as a script
}

// luaLib is the library and its operations.
type luaLib struct {
	name string // leasehold_<hash>
	code string // the FUNCTION LOAD source

	acquire, renew, release, get, epoch, wait, leave *luaOp
	recPut, recDelete, recAdd, recTxn                *luaOp
}

var lua = newLuaLib()

// scriptPrelude starts every script: effects replication on Redis before
// 5 (a no-op since; functions always replicate effects).
const scriptPrelude = "if redis.replicate_commands then redis.replicate_commands() end\n"

func newLuaLib() *luaLib {
	l := &luaLib{}
	// Flags: get writes nothing (FCALL_RO; it may run on a replica).
	// release and leave may run when Redis is out of memory (maxmemory
	// reached), as they did as scripts, whose deletes Redis allows then: a
	// function without allow-oom is refused whole in that state.
	defs := []struct {
		op    **luaOp
		name  string
		lib   string
		src   string
		flags string
	}{
		{&l.acquire, "acquire", leaseLibSrc, acquireSrc, ""},
		{&l.release, "release", leaseLibSrc, releaseSrc, "'allow-oom'"},
		{&l.wait, "wait", leaseLibSrc, waitSrc, ""},
		{&l.leave, "leave", leaseLibSrc, leaveSrc, "'allow-oom'"},
		{&l.renew, "renew", "", renewSrc, ""},
		{&l.get, "get", "", getSrc, "'no-writes'"},
		{&l.epoch, "epoch", "", epochSrc, ""},
		{&l.recPut, "records_put", recordsLibSrc, recordsPutSrc, ""},
		{&l.recDelete, "records_delete", recordsLibSrc, recordsDeleteSrc, ""},
		{&l.recAdd, "records_add", recordsLibSrc, recordsAddSrc, ""},
		{&l.recTxn, "records_txn", recordsLibSrc, recordsTxnSrc, ""},
	}
	var body strings.Builder
	body.WriteString(leaseLibSrc)
	body.WriteString(recordsLibSrc)
	for _, d := range defs {
		body.WriteString(d.src)
	}
	// The hash covers the source and the registrations' names and flags.
	h := sha1.New()
	h.Write([]byte(body.String()))
	for _, d := range defs {
		fmt.Fprintf(h, "\x00%s\x00%s", d.name, d.flags)
	}
	sum := hex.EncodeToString(h.Sum(nil)[:8])
	l.name = "leasehold_" + sum
	var code strings.Builder
	code.WriteString("#!lua name=" + l.name + "\n")
	code.WriteString(body.String())
	for _, d := range defs {
		fn := "lh_" + sum + "_" + d.name
		fmt.Fprintf(&code, "redis.register_function{function_name='%s', callback=%s, flags={%s}}\n", fn, d.name, d.flags)
		*d.op = &luaOp{
			fn: fn, ro: d.flags == "'no-writes'",
			script: goredis.NewScript(scriptPrelude + d.lib + d.src + "return " + d.name + "(KEYS, ARGV)\n"),
		}
	}
	l.code = code.String()
	return l
}

// fnState is whether and how the store calls the library.
type fnState struct {
	// off: send scripts. Set when the server refuses FUNCTION or FCALL as
	// unknown or not permitted; each restart check sets it again from
	// FUNCTION LIST (a failover may reach another server).
	off     atomic.Bool
	loading chan struct{} // holds a token while a load runs
	loads   atomic.Uint64 // completed loads
}

// run calls op with keys and args: FCALL, or the script where the server
// has no functions. A call that finds the function missing loads the
// library and calls again, once.
func (s *Store) run(ctx context.Context, op *luaOp, keys []string, args ...any) *goredis.Cmd {
	for attempt := 0; ; attempt++ {
		if s.fn.off.Load() {
			return op.script.Run(ctx, s.rdb, keys, args...)
		}
		loads := s.fn.loads.Load()
		var cmd *goredis.Cmd
		if op.ro {
			cmd = s.rdb.FCallRO(ctx, op.fn, keys, args...)
		} else {
			cmd = s.rdb.FCall(ctx, op.fn, keys, args...)
		}
		if attempt > 0 {
			return cmd
		}
		retry, err := s.recoverFunctions(ctx, cmd.Err(), loads)
		if err != nil {
			cmd = goredis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd
		}
		if !retry {
			return cmd
		}
	}
}

// recoverFunctions looks at the error of a call of the library made when
// loads completed loads had been seen. A missing function is loaded (retry);
// a server without functions switches the store to scripts (retry); any
// other error, or none, is the call's answer (no retry). err is the load's
// error, if it failed.
func (s *Store) recoverFunctions(ctx context.Context, callErr error, loads uint64) (retry bool, err error) {
	switch {
	case callErr == nil:
		return false, nil
	case functionMissing(callErr):
		if err := s.loadFunctions(ctx, loads); err != nil {
			if noFunctions(err) {
				s.fn.off.Store(true)
				return true, nil
			}
			return false, err
		}
		return true, nil
	case noFunctions(callErr):
		s.fn.off.Store(true)
		return true, nil
	}
	return false, nil
}

// loadFunctions loads the library (on every master of a cluster) unless a
// load completed since loads were seen.
func (s *Store) loadFunctions(ctx context.Context, loads uint64) error {
	select {
	case s.fn.loading <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.fn.loading }()
	if s.fn.loads.Load() != loads {
		return nil // another call loaded it meanwhile
	}
	var err error
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.FunctionLoadReplace(ctx, lua.code).Err()
		})
	} else {
		err = s.rdb.FunctionLoadReplace(ctx, lua.code).Err()
	}
	if err != nil {
		return fmt.Errorf("loading the function library %s: %w", lua.name, err)
	}
	s.fn.loads.Add(1)
	return nil
}

// checkFunctions is the restart check's look at the library: the reply of
// FUNCTION LIST LIBRARYNAME <name> on the server checked. A server that
// refuses it gets scripts; one that lacks the library gets it loaded.
func (s *Store) checkFunctions(ctx context.Context, list *goredis.Cmd) error {
	res, err := list.Slice()
	switch {
	case err != nil && noFunctions(err):
		s.fn.off.Store(true)
		return nil
	case err != nil:
		return nil // not known: the calls find out
	}
	s.fn.off.Store(false)
	if len(res) > 0 {
		return nil
	}
	if err := s.loadFunctions(ctx, s.fn.loads.Load()); err != nil {
		if noFunctions(err) {
			s.fn.off.Store(true)
			return nil
		}
		return err
	}
	return nil
}

// functionMissing reports FCALL's answer for a function the server does
// not have.
func functionMissing(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && strings.Contains(err.Error(), "Function not found")
}

// noFunctions reports a server that has no functions (an unknown command:
// Redis before 7.0) or does not let this user call or load them (an ACL's
// NOPERM for FCALL, FCALL_RO or FUNCTION).
func noFunctions(err error) bool {
	var re goredis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := strings.ToLower(err.Error())
	if !strings.Contains(msg, "fcall") && !strings.Contains(msg, "function") {
		return false
	}
	return strings.Contains(msg, "unknown command") || strings.Contains(msg, "noperm")
}
