// Package stores opens a leasehold.Store from a URL, so that programs and
// the CLI can name any store in one string:
//
//	sqlite:///var/lib/leasehold/leases.db   the embedded default (absolute path)
//	sqlite://leases.db                      a path relative to the working directory
//	memory://                               an in-memory store (this process only)
//
// Stores for networked engines register here as they are added.
package stores

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/sqlite"
)

// EnvStore is the environment variable that names the default store URL.
const EnvStore = "LEASEHOLD_STORE"

// Opener opens a store from a parsed URL.
type Opener func(ctx context.Context, u *url.URL) (leasehold.Store, error)

var openers = map[string]Opener{
	"sqlite": openSQLite,
	"memory": func(context.Context, *url.URL) (leasehold.Store, error) { return memory.New(), nil },
}

// Register adds an opener for a URL scheme. It is meant to be called from
// init functions; registering a scheme twice panics.
func Register(scheme string, o Opener) {
	if _, dup := openers[scheme]; dup {
		panic("stores: scheme registered twice: " + scheme)
	}
	openers[scheme] = o
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	out := make([]string, 0, len(openers))
	for s := range openers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open opens the store named by rawURL. An empty rawURL means the value of
// LEASEHOLD_STORE, or if that is empty too, the default SQLite file (see
// DefaultPath).
func Open(ctx context.Context, rawURL string) (leasehold.Store, error) {
	if rawURL == "" {
		rawURL = os.Getenv(EnvStore)
	}
	if rawURL == "" {
		p, err := DefaultPath()
		if err != nil {
			return nil, err
		}
		return sqlite.Open(p)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &leasehold.InvalidError{Field: "store URL", Reason: err.Error()}
	}
	o, ok := openers[u.Scheme]
	if !ok {
		return nil, &leasehold.InvalidError{Field: "store URL",
			Reason: fmt.Sprintf("unknown scheme %q in %q (known: %s)", u.Scheme, redact(u), strings.Join(Schemes(), ", "))}
	}
	return o(ctx, u)
}

// DefaultPath is the default store file: $XDG_DATA_HOME/leasehold/leases.db,
// or ~/.local/share/leasehold/leases.db.
func DefaultPath() (string, error) {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "leasehold", "leases.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no default store: %w (set %s or pass --store)", err, EnvStore)
	}
	return filepath.Join(home, ".local", "share", "leasehold", "leases.db"), nil
}

func openSQLite(_ context.Context, u *url.URL) (leasehold.Store, error) {
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, &leasehold.InvalidError{Field: "store URL", Reason: "sqlite URLs take no query or fragment"}
	}
	p := u.Host + u.Path // sqlite:///abs -> "/abs"; sqlite://rel/x -> "rel/x"
	if u.Opaque != "" {
		p = u.Opaque // sqlite:rel.db
	}
	if p == "" {
		return nil, &leasehold.InvalidError{Field: "store URL", Reason: "sqlite URL has no path (sqlite:///path/to/leases.db)"}
	}
	return sqlite.Open(p)
}

func redact(u *url.URL) string {
	if u.User != nil {
		c := *u
		c.User = url.User(u.User.Username())
		return c.String()
	}
	return u.String()
}
