package stores

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// DefaultConnectTimeout bounds Open when the URL has no connect_timeout=
// parameter and ctx has no deadline of its own.
const DefaultConnectTimeout = 10 * time.Second

// connectTimeoutParam is the URL parameter every networked scheme takes.
const connectTimeoutParam = "connect_timeout"

// localSchemes take no connect_timeout= (nothing to connect to); their
// own parsers see it and refuse or ignore it as they do any parameter.
var localSchemes = map[string]bool{"sqlite": true, "memory": true}

// ConnectTimeout returns the connect_timeout= parameter of a store URL (a
// Go duration such as 5s, or a whole number of seconds as libpq writes
// it) and whether the URL has one. Schemes without a network (sqlite,
// memory) never have one. A malformed, repeated or non-positive value is
// an *leasehold.InvalidError that does not repeat the URL.
func ConnectTimeout(rawURL string) (time.Duration, bool, error) {
	scheme, err := schemeOf(rawURL)
	if err != nil {
		return 0, false, err
	}
	d, _, ok, err := splitConnectTimeout(scheme, rawURL)
	return d, ok, err
}

// splitConnectTimeout returns the connect_timeout= of rawURL and rawURL
// without it, byte for byte otherwise (the engines' parsers see the rest
// as given). For postgres:// it replaces libpq's connect_timeout (whole
// seconds are read as libpq does) and bounds the whole of Open, all hosts
// together, rather than each connection attempt. The query is cut out of the string without net/url, which refuses some
// URLs the engines accept (PostgreSQL's several hosts).
func splitConnectTimeout(scheme, rawURL string) (time.Duration, string, bool, error) {
	if localSchemes[scheme] {
		return 0, rawURL, false, nil
	}
	base, query, hasQuery := strings.Cut(rawURL, "?")
	if !hasQuery {
		return 0, rawURL, false, nil
	}
	query, frag, hasFrag := strings.Cut(query, "#")
	var (
		d     time.Duration
		found bool
		kept  []string
	)
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if name, err := url.QueryUnescape(k); err != nil || name != connectTimeoutParam {
			kept = append(kept, kv)
			continue
		}
		if found {
			return 0, "", false, &leasehold.InvalidError{Field: "store URL", Reason: connectTimeoutParam + "= given more than once"}
		}
		val, err := url.QueryUnescape(v)
		if err == nil {
			d, err = parseConnectTimeout(val)
		}
		if err != nil {
			return 0, "", false, &leasehold.InvalidError{Field: "store URL",
				Reason: fmt.Sprintf("%s=%q: want a positive duration such as 5s", connectTimeoutParam, val)}
		}
		found = true
	}
	if !found {
		return 0, rawURL, false, nil
	}
	out := base
	if len(kept) > 0 {
		out += "?" + strings.Join(kept, "&")
	}
	if hasFrag {
		out += "#" + frag
	}
	return d, out, true, nil
}

// parseConnectTimeout reads a Go duration, or whole seconds (libpq's form).
func parseConnectTimeout(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 32); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("not positive")
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("not positive")
	}
	return d, nil
}

// withConnectTimeout returns the context an opener or initializer of
// scheme runs under and the URL it is given: ctx bounded by the URL's
// connect_timeout= or, when the URL has none and ctx no deadline, by
// DefaultConnectTimeout. Local schemes get ctx and rawURL unchanged. The
// caller must call cancel.
func withConnectTimeout(ctx context.Context, scheme, rawURL string) (_ context.Context, cancel context.CancelFunc, rest string, d time.Duration, err error) {
	d, rest, set, err := splitConnectTimeout(scheme, rawURL)
	if err != nil || localSchemes[scheme] {
		return ctx, func() {}, rest, 0, err
	}
	if !set {
		if _, has := ctx.Deadline(); has {
			return ctx, func() {}, rest, 0, nil
		}
		d = DefaultConnectTimeout
	}
	ctx, cancel = context.WithTimeout(ctx, d)
	return ctx, cancel, rest, d, nil
}

// timedOut explains err when ctx, bounded by d, ran out: engines report
// it in words of their own ("i/o timeout", "context deadline exceeded").
func timedOut(ctx context.Context, d time.Duration, err error) error {
	if err == nil || d == 0 || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("no answer within %s (connect_timeout): %w", d, err)
}
