package remote

import (
	"context"
	"fmt"
	"net/url"

	"github.com/leasehold/leasehold"
)

// Open connects to a leasehold server by URL, choosing the protocol by the
// scheme: http:// and https:// use the HTTP/JSON API (OpenHTTP);
// leasehold:// and leaseholds:// (TLS) use the faster pipelined RESP
// protocol (OpenRESP). ctx bounds the first connection of a RESP store.
func Open(ctx context.Context, rawURL string) (leasehold.Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	switch u.Scheme {
	case "http", "https":
		s, err := OpenHTTP(rawURL)
		if err != nil {
			return nil, err
		}
		return s, nil
	case "leasehold", "leaseholds":
		s, err := openRESP(ctx, rawURL)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("remote: scheme %q is not http://, https://, leasehold:// or leaseholds://", u.Scheme)
}
