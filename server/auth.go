package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"golang.org/x/time/rate"

	"github.com/leasehold/leasehold/storekit"
)

// Access is a permission level on a name prefix. Each level includes the
// ones below it.
type Access int

const (
	AccessNone  Access = iota
	AccessRead         // get, list, watch
	AccessWrite        // acquire, renew, release, sessions
	AccessAdmin        // force-release, the dashboard's admin actions
)

func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	case AccessAdmin:
		return "admin"
	}
	return "none"
}

// ParseAccess parses "read", "write" or "admin".
func ParseAccess(s string) (Access, error) {
	switch s {
	case "read":
		return AccessRead, nil
	case "write":
		return AccessWrite, nil
	case "admin":
		return AccessAdmin, nil
	}
	return AccessNone, fmt.Errorf("unknown access %q (want read, write or admin)", s)
}

// Errors of authentication and authorisation.
var (
	ErrUnauthenticated = errors.New("missing or unknown credentials")
	ErrForbidden       = errors.New("the credentials do not allow this on that name")
	ErrRateLimited     = errors.New("rate limit exceeded")
)

// Grant gives an access level on every name starting with Prefix.
type Grant struct {
	Prefix string `json:"prefix"`
	Access string `json:"access"`
}

// TokenConfig is one bearer token in the auth file. Give the token either in
// clear (Token) or as the hex SHA-256 of it (TokenSHA256, preferred: the
// file then holds no secret).
type TokenConfig struct {
	Identity    string  `json:"identity"`
	Token       string  `json:"token,omitempty"`
	TokenSHA256 string  `json:"token_sha256,omitempty"`
	Grants      []Grant `json:"grants"`
}

// AuthConfig is the auth file: {"tokens": [...]}.
type AuthConfig struct {
	Tokens []TokenConfig `json:"tokens"`
}

// Identity is an authenticated caller with its grants. The nil *Identity
// (auth off) is allowed everything.
type Identity struct {
	Name   string
	grants []grant // longest prefix first
}

type grant struct {
	prefix string
	access Access
}

// Auth checks bearer tokens, permissions and per-identity rate limits. A nil
// *Auth means auth is off: every request is allowed (rate limits off too).
type Auth struct {
	byHash map[[32]byte]*Identity
}

// LoadAuth reads an auth file (JSON, see AuthConfig).
func LoadAuth(path string) (*Auth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg AuthConfig
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("auth file %s: %w", path, err)
	}
	a, err := NewAuth(cfg)
	if err != nil {
		return nil, fmt.Errorf("auth file %s: %w", path, err)
	}
	return a, nil
}

// NewAuth builds an Auth from its configuration.
func NewAuth(cfg AuthConfig) (*Auth, error) {
	a := &Auth{byHash: map[[32]byte]*Identity{}}
	for i, t := range cfg.Tokens {
		if t.Identity == "" {
			return nil, fmt.Errorf("token %d: identity is empty", i)
		}
		var h [32]byte
		switch {
		case t.Token != "" && t.TokenSHA256 != "":
			return nil, fmt.Errorf("token %q: give token or token_sha256, not both", t.Identity)
		case t.Token != "":
			h = sha256.Sum256([]byte(t.Token))
		case t.TokenSHA256 != "":
			b, err := hex.DecodeString(t.TokenSHA256)
			if err != nil || len(b) != 32 {
				return nil, fmt.Errorf("token %q: token_sha256 must be 64 hex digits", t.Identity)
			}
			copy(h[:], b)
		default:
			return nil, fmt.Errorf("token %q: no token or token_sha256", t.Identity)
		}
		if _, dup := a.byHash[h]; dup {
			return nil, fmt.Errorf("token %q: the same token is listed twice", t.Identity)
		}
		id := &Identity{Name: t.Identity}
		for _, g := range t.Grants {
			acc, err := ParseAccess(g.Access)
			if err != nil {
				return nil, fmt.Errorf("token %q: %w", t.Identity, err)
			}
			id.grants = append(id.grants, grant{g.Prefix, acc})
		}
		sort.SliceStable(id.grants, func(i, j int) bool { return len(id.grants[i].prefix) > len(id.grants[j].prefix) })
		a.byHash[h] = id
	}
	return a, nil
}

// Enabled reports whether auth is on.
func (a *Auth) Enabled() bool { return a != nil }

// Authenticate maps a bearer token to its identity. With auth off it
// returns (nil, nil). The comparison is by SHA-256 and constant-time.
func (a *Auth) Authenticate(token string) (*Identity, error) {
	if a == nil {
		return nil, nil
	}
	if token == "" {
		return nil, ErrUnauthenticated
	}
	h := sha256.Sum256([]byte(token))
	for k, id := range a.byHash {
		if subtle.ConstantTimeCompare(k[:], h[:]) == 1 {
			return id, nil
		}
	}
	return nil, ErrUnauthenticated
}

// Access returns the identity's access to name: that of the longest granted
// prefix of name (most specific wins), or AccessNone. The nil identity has
// AccessAdmin everywhere.
func (id *Identity) Access(name string) Access {
	if id == nil {
		return AccessAdmin
	}
	for _, g := range id.grants {
		if strings.HasPrefix(name, g.prefix) {
			return g.access
		}
	}
	return AccessNone
}

// Allowed reports whether id may do what needs access on name.
func (id *Identity) Allowed(name string, need Access) bool { return id.Access(name) >= need }

// ListAllowed reports whether id may list names under prefix: it needs read
// access on the prefix itself. Results must still be filtered with Allowed,
// since a more specific grant may deny part of the prefix.
func (id *Identity) ListAllowed(prefix string) bool { return id.Allowed(prefix, AccessRead) }

// Limits holds per-identity rate limiting. The zero value (or nil) is off.
type Limits struct {
	PerSecond float64 // sustained requests per second per identity; 0 = unlimited
	Burst     int

	mu   sync.Mutex
	byID map[string]*rate.Limiter
}

// Allow takes one request from the identity's budget. Anonymous callers
// (auth off) share the budget of the identity "" .
func (l *Limits) Allow(id *Identity) bool {
	if l == nil || l.PerSecond <= 0 {
		return true
	}
	key := ""
	if id != nil {
		key = id.Name
	}
	l.mu.Lock()
	lim := l.byID[key]
	if lim == nil {
		if l.byID == nil {
			l.byID = map[string]*rate.Limiter{}
		}
		burst := l.Burst
		if burst <= 0 {
			burst = max(1, int(l.PerSecond))
		}
		lim = rate.NewLimiter(rate.Limit(l.PerSecond), burst)
		l.byID[key] = lim
	}
	l.mu.Unlock()
	return lim.Allow()
}

// scopedRequestIDPrefix starts every request id scopedRequestID makes.
const scopedRequestIDPrefix = "id-scoped:"

// scopedRequestID is the request id an acquire over the network hands the
// backend. With auth off (id nil), or without a request id, it is the
// client's. With auth on it is scoped to the authenticated identity:
// "id-scoped:" and the hex SHA-256 of the identity's name (length first)
// and the client's id (74 bytes, within leasehold.MaxRequestIDLen). A backend recognises a
// retried acquire by owner and request id, and answers it with the grant
// (and, through the API, its secret); owners are public and request ids
// often predictable, so unscoped, another identity could replay them and
// take the grant over. Scoped, the same identity's retries still match and
// another identity's never do (its acquire is refused as held). With auth
// off nothing is scoped: any caller may force-release anyway.
func scopedRequestID(id *Identity, reqID string) string {
	if id == nil || reqID == "" {
		return reqID
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(id.Name), id.Name) // length first: no two pairs hash alike
	h.Write([]byte(reqID))
	return scopedRequestIDPrefix + hex.EncodeToString(h.Sum(nil))
}

// checkAcquire is what both APIs do to an acquire's request before the
// backend sees it: it refuses an owner holding characters no reader could
// see (CheckVisible; owners are shown like names) and an invalid request
// id, then scopes the request id to the caller (scopedRequestID).
func checkAcquire(id *Identity, req *AcquireRequest) error {
	if err := CheckVisible("owner", req.Owner); err != nil {
		return err
	}
	if err := storekit.ValidateRequestID(req.RequestID); err != nil {
		return err
	}
	req.RequestID = scopedRequestID(id, req.RequestID)
	return nil
}
