// Package stores opens a leasehold.Store from a URL, so that programs and
// the CLI can name any store in one string:
//
//	sqlite:///var/lib/leasehold/leases.db   the embedded default (absolute path)
//	sqlite:./leases.db                      a path relative to the working directory (./ or ../ required)
//	memory://                               an in-memory store (this process only)
//
// Stores for networked engines register here as they are added.
package stores

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/sqlite"
)

// EnvStore is the environment variable that names the default store URL.
const EnvStore = "LEASEHOLD_STORE"

// Opener opens a store from its URL. It receives the URL as given, so
// that forms net/url rejects (PostgreSQL's multi-host URLs, say) reach the
// engine's own parser.
type Opener func(ctx context.Context, rawURL string) (leasehold.Store, error)

// asStore gives a store package's Open result as a Store: nil, not a
// typed nil in the interface, when err is set.
func asStore[S leasehold.Store](s S, err error) (leasehold.Store, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// opener is the Opener of a store package's Open.
func opener[S leasehold.Store, O any](open func(context.Context, string, ...O) (S, error)) Opener {
	return func(ctx context.Context, rawURL string) (leasehold.Store, error) {
		return asStore(open(ctx, rawURL))
	}
}

var openers = map[string]Opener{
	"sqlite": openSQLite,
	"memory": openMemory,
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
//
// Every networked scheme takes the parameter connect_timeout= (a duration
// such as 5s; whole seconds also do): it bounds Open, which fails with an
// error saying so when the store has not answered in time. Without it
// Open is bounded by ctx's deadline, or by DefaultConnectTimeout if ctx
// has none. Open does not keep ctx: the store's later operations are
// bounded by their own contexts.
func Open(ctx context.Context, rawURL string) (leasehold.Store, error) {
	return open(ctx, rawURL, nil)
}

// open is Open, with the opener of alt for a scheme alt has one for.
func open(ctx context.Context, rawURL string, alt map[string]Opener) (leasehold.Store, error) {
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
	scheme, err := schemeOf(rawURL)
	if err != nil {
		return nil, err
	}
	o, ok := openers[scheme]
	if a, has := alt[scheme]; has && ok {
		o = a
	}
	if !ok {
		return nil, &leasehold.InvalidError{Field: "store URL",
			Reason: fmt.Sprintf("unknown scheme %q (known: %s)", scheme, strings.Join(Schemes(), ", "))}
	}
	ctx, cancel, rest, d, err := withConnectTimeout(ctx, scheme, rawURL)
	if err != nil {
		return nil, err
	}
	defer cancel()
	st, err := o(ctx, rest)
	// A driver's error may quote the URL, and with it a password or token.
	return st, redact.Error(timedOut(ctx, d, withConnectTimeoutKnown(scheme, err)), redact.Secrets(rawURL)...)
}

// withConnectTimeoutKnown adds connect_timeout= to an engine's list of the
// parameters it knows, in its error for an unknown one: Open takes it off
// the URL before the engine sees it, and the red team's round 6 was told
// the DynamoDB URL's parameters without it.
func withConnectTimeoutKnown(scheme string, err error) error {
	inv, ok := err.(*leasehold.InvalidError)
	if localSchemes[scheme] || !ok || !strings.Contains(inv.Reason, "unknown parameter") {
		return err
	}
	return &leasehold.InvalidError{Field: inv.Field, Reason: inv.Reason + "; every networked store's URL also takes " + connectTimeoutParam + "="}
}

// NoStoreError is OpenExisting's error for a store that does not exist: a
// SQLite store whose file does not exist, or a PostgreSQL or DynamoDB
// store whose table does not exist. It matches fs.ErrNotExist.
type NoStoreError struct {
	Path string // the SQLite file that does not exist; "" for a table
	// Engine ("PostgreSQL", "DynamoDB") and Table name a table that does
	// not exist.
	Engine, Table string
}

func (e *NoStoreError) Error() string {
	if e.Table != "" {
		return fmt.Sprintf("no %s store: table %s does not exist (nothing was created)", e.Engine, e.Table)
	}
	return fmt.Sprintf("no SQLite store at %s: the file does not exist (nothing was created)", e.Path)
}

// Is makes a *NoStoreError match fs.ErrNotExist.
func (e *NoStoreError) Is(target error) bool { return target == fs.ErrNotExist }

// existingOpeners open, for OpenExisting, the schemes whose Open would
// create something (a table, functions) that is missing.
var existingOpeners = map[string]Opener{}

// RegisterExisting adds the opener OpenExisting uses for a URL scheme
// instead of its Opener: one that creates and migrates nothing, and
// returns a *NoStoreError for a store that does not exist. Registering a
// scheme twice panics.
func RegisterExisting(scheme string, o Opener) {
	if _, dup := existingOpeners[scheme]; dup {
		panic("stores: existing opener registered twice: " + scheme)
	}
	existingOpeners[scheme] = o
}

// OpenExisting is Open for what only reads a store or releases in it (a
// status listing, a release): it creates nothing, and returns a
// *NoStoreError for a store that does not exist. A SQLite store whose
// file does not exist, named by a sqlite: URL or the default file, is not
// created (Open creates the file and its directories); a PostgreSQL
// store's lease table is neither created nor migrated (an older schema
// version is refused; see postgres.OpenExisting), nor is a DynamoDB
// table created. A SQLite file this process may not write is opened
// read-only (sqlite.OpenReadOnly): it can be listed, and a release in it
// fails with an error saying what access is missing. Other schemes (etcd,
// Redis, the lease server, memory) have nothing to create and open as
// with Open.
func OpenExisting(ctx context.Context, rawURL string) (leasehold.Store, error) {
	path, err := sqliteFile(rawURL)
	if err != nil {
		return nil, err
	}
	if path != "" {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, &NoStoreError{Path: path}
		}
		if !writable(path) {
			return asStore(sqlite.OpenReadOnly(path))
		}
	}
	return open(ctx, rawURL, existingOpeners)
}

// sqliteFile returns the file of the SQLite store that Open(rawURL) would
// open, or "" for another scheme.
func sqliteFile(rawURL string) (string, error) {
	if rawURL == "" {
		rawURL = os.Getenv(EnvStore)
	}
	if rawURL == "" {
		return DefaultPath()
	}
	scheme, err := schemeOf(rawURL)
	if err != nil || scheme != "sqlite" {
		return "", err
	}
	return sqlitePath(rawURL)
}

// schemeOf returns the URL scheme of rawURL (RFC 3986: a letter, then
// letters, digits, '+', '-' or '.'), lower-cased.
func schemeOf(rawURL string) (string, error) {
	scheme, _, ok := strings.Cut(rawURL, ":")
	valid := ok && scheme != ""
	for i, r := range scheme {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			valid = false
		}
	}
	if !valid {
		return "", &leasehold.InvalidError{Field: "store URL", Reason: "missing or malformed scheme (want e.g. sqlite:///path or postgres://host/db)"}
	}
	return strings.ToLower(scheme), nil
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

func openSQLite(_ context.Context, rawURL string) (leasehold.Store, error) {
	p, err := sqlitePath(rawURL)
	if err != nil {
		return nil, err
	}
	return asStore(sqlite.Open(p))
}

// sqlitePath returns the file a sqlite: URL names. Two forms are accepted,
// each meaning one file whatever the reader guesses:
//
//	sqlite:///var/lib/x.db   (or sqlite:/var/lib/x.db) an absolute path
//	sqlite:./x.db            (or sqlite:../x.db) relative to the working directory
//
// Anything else is refused with a hint: a host part (sqlite://var/lib/x.db,
// which would read as the relative path var/lib/x.db), a bare relative
// path (sqlite:x.db), a query or a fragment.
func sqlitePath(rawURL string) (string, error) {
	bad := func(format string, args ...any) error {
		return &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf(format, args...)}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", bad("%v", err)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", bad("sqlite URLs take no query or fragment (sqlite:///path/to/leases.db)")
	}
	_, rest, _ := strings.Cut(rawURL, ":")
	switch {
	case u.Opaque != "":
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", bad("%v", err)
		}
		if !strings.HasPrefix(p, "./") && !strings.HasPrefix(p, "../") {
			return "", bad("%q is a relative path without ./; did you mean sqlite:./%s (relative to the working directory) or sqlite:///%s (absolute)?", p, p, p)
		}
		return p, nil
	case u.Host != "" || u.User != nil:
		// sqlite://var/lib/x.db: net/url reads "var" as a host.
		hint := strings.TrimPrefix(rest, "//")
		if strings.HasPrefix(hint, "./") || strings.HasPrefix(hint, "../") {
			return "", bad("a sqlite URL has no host part; did you mean sqlite:%s (relative to the working directory)?", hint)
		}
		return "", bad("a sqlite URL has no host part (%q would be read as a relative path); did you mean sqlite:///%s?", u.Host, hint)
	case u.Path != "":
		return u.Path, nil // sqlite:///abs or sqlite:/abs
	}
	return "", bad("sqlite URL has no path (sqlite:///path/to/leases.db, or sqlite:./leases.db relative to the working directory)")
}

// openMemory opens a new in-memory store. memory:// takes no parameters:
// a query is refused rather than ignored.
func openMemory(_ context.Context, rawURL string) (leasehold.Store, error) {
	beforeFragment, _, _ := strings.Cut(rawURL, "#")
	if _, q, _ := strings.Cut(beforeFragment, "?"); q != "" {
		return nil, &leasehold.InvalidError{Field: "store URL", Reason: "memory:// takes no parameters"}
	}
	return memory.New(), nil
}
