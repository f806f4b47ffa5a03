package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"

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

// clientTLS is a store's TLS configuration from its URL's parameters:
// server_name (the name to check the server's certificate against), ca
// (PEM file of the CAs to trust instead of the system's), and cert and key
// (a client certificate, for mutual TLS). Its error is the reason the URL
// is refused.
func clientTLS(serverName, ca, cert, key string) (*tls.Config, error) {
	tc := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca %s: no PEM certificates in it", ca)
		}
		tc.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("cert and key go together")
	}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %v", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}
