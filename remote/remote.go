package remote

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/leasehold/leasehold"
)

// Open connects to a leasehold server by URL, choosing the protocol by the
// scheme: http:// and https:// use the HTTP/JSON API (OpenHTTP);
// leasehold:// and leaseholds:// (TLS) use the faster pipelined RESP
// protocol (OpenRESP). ctx bounds the first connection of a RESP store.
func Open(ctx context.Context, rawURL string) (leasehold.Store, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
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
	return nil, &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf("scheme %q is not http://, https://, leasehold:// or leaseholds://", u.Scheme)}
}

// parseURL parses a store URL. Its error never repeats the URL, which may
// carry a token (?token=) or a password.
func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &leasehold.InvalidError{Field: "store URL", Reason: err.Error()}
	}
	return u, nil
}
