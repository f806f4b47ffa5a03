package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/leasehold/leasehold/workflow"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// Config configures a Server: its listeners, TLS, auth and limits.
type Config struct {
	// Addr is the HTTP API's listen address ("host:port"). Empty (with no
	// HTTPListener) serves no HTTP.
	Addr string
	// RESPAddr is the RESP protocol's listen address. Empty (with no
	// RESPListener) serves no RESP.
	RESPAddr string
	// HTTPListener and RESPListener, when set, are used instead of
	// listening on Addr and RESPAddr (tests, socket activation). The
	// Server closes them.
	HTTPListener, RESPListener net.Listener

	// TLSCert and TLSKey are PEM files of the server's certificate chain
	// and key; with them both listeners speak TLS (HTTP/2 over TLS too).
	TLSCert, TLSKey string
	// ClientCA is a PEM file of the CAs that sign client certificates; when
	// set, a client must present a certificate it signed (mutual TLS) on
	// both listeners. It needs TLSCert and TLSKey.
	ClientCA string

	Auth   *Auth   // bearer tokens and per-prefix grants; nil: auth off
	Limits *Limits // per-identity rate limits; nil: none
	// Quotas bound what one client (identity, or address with auth off)
	// holds through this server at once; zero fields take the defaults.
	Quotas Quotas
	// Logger receives the server's logs; nil discards.
	Logger *slog.Logger
	// Metrics, if set, are served at /metrics (give Metrics.Hooks() to the
	// Backend too).
	Metrics *Metrics
	// Dashboard, if set, is served under /dashboard/.
	Dashboard http.Handler
	// Workflows are served at /v1/workflows/{name}/... (see HandlerOptions).
	Workflows map[string]*workflow.Workflows
	// Holders, if set, are the holder proofs of both ports: every grant
	// gets a secret, returned only to its acquirer, that renew and release
	// must present (see HandlerOptions.Holders, RESPOptions.Holders). Nil
	// turns holder proofs off.
	Holders *HolderProofs
	// MaxBodyBytes caps HTTP request bodies (default 128 KiB).
	MaxBodyBytes int64
	// BodyTimeout bounds reading an HTTP request body (default 10s; see
	// HandlerOptions.BodyTimeout).
	BodyTimeout time.Duration
	// WriteTimeout bounds sending an HTTP response (default 30s; see
	// HandlerOptions.WriteTimeout).
	WriteTimeout time.Duration
	// AllowedHosts are the HTTP Host names served with auth off besides
	// the loopback ones (see HandlerOptions.AllowedHosts).
	AllowedHosts []string
	// HTTPMaxConns caps the HTTP port's open connections (default
	// 10,000) and HTTPMaxConnsPerAddr those from one client IP (default
	// 1,000); a connection over a cap is closed at once (plain HTTP gets
	// a 503 first).
	HTTPMaxConns, HTTPMaxConnsPerAddr int
	// RESP are the RESP port's resource bounds (zero fields: the
	// defaults; see RESPOptions). Its Auth, Limits, Logger, TLS, Metrics
	// and Holders are taken from this Config.
	RESP RESPOptions

	// ReadHeaderTimeout bounds reading a request's headers (default 5s).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections (default 2m).
	IdleTimeout time.Duration
	// MaxHeaderBytes caps request headers (default 16 KiB).
	MaxHeaderBytes int
	// ShutdownTimeout is how long a graceful shutdown lets in-flight
	// requests finish before closing their connections (default 10s).
	// Long-polls and event streams are ended at once, with 503 for a
	// waiting acquire.
	ShutdownTimeout time.Duration
}

func (c *Config) defaults() {
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = 5 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = 16 << 10
	}
	if c.HTTPMaxConns <= 0 {
		c.HTTPMaxConns = DefaultHTTPMaxConns
	}
	if c.HTTPMaxConnsPerAddr <= 0 {
		c.HTTPMaxConnsPerAddr = DefaultHTTPMaxConnsPerAddr
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// ErrConfig is matched (errors.Is) by NewServer's errors about its
// configuration (TLS files, nothing to serve), as opposed to a listener
// that cannot bind.
var ErrConfig = errors.New("server configuration")

// Server runs the HTTP API and the RESP protocol over one Backend.
type Server struct {
	b      Backend
	cfg    Config
	log    *slog.Logger
	api    *httpAPI
	hs     *http.Server
	resp   *RESPServer
	tls    *tls.Config
	httpLn net.Listener
	respLn net.Listener

	runOnce sync.Once
}

// NewServer checks cfg, loads the TLS files and binds the listeners, so
// that HTTPAddr and RESPAddr are known (for ":0") before Run. On error
// nothing is left open (b is not closed).
func NewServer(b Backend, cfg Config) (*Server, error) {
	cfg.defaults()
	s := &Server{b: b, cfg: cfg, log: cfg.Logger}
	tc, err := loadTLS(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s.tls = tc
	s.httpLn, s.respLn = cfg.HTTPListener, cfg.RESPListener
	closeAll := func() {
		for _, ln := range []net.Listener{s.httpLn, s.respLn} {
			if ln != nil {
				ln.Close()
			}
		}
	}
	if s.httpLn == nil && cfg.Addr != "" {
		if s.httpLn, err = net.Listen("tcp", cfg.Addr); err != nil {
			closeAll()
			return nil, fmt.Errorf("HTTP listener: %w", err)
		}
	}
	if s.respLn == nil && cfg.RESPAddr != "" {
		if s.respLn, err = net.Listen("tcp", cfg.RESPAddr); err != nil {
			closeAll()
			return nil, fmt.Errorf("RESP listener: %w", err)
		}
	}
	if s.httpLn == nil && s.respLn == nil {
		return nil, fmt.Errorf("%w: nothing to serve: no HTTP or RESP address", ErrConfig)
	}
	if s.httpLn != nil {
		s.httpLn = newCapListener(s.httpLn, cfg.HTTPMaxConns, cfg.HTTPMaxConnsPerAddr, tc == nil, cfg.Metrics)
	}
	if tc != nil && s.httpLn != nil {
		s.httpLn = tls.NewListener(s.httpLn, httpTLS(tc))
	}
	// Both ports count what their clients hold against one set of quotas.
	fronted := WithQuotas(b, cfg.Quotas, cfg.Metrics)
	s.api = newHTTPAPI(fronted, HandlerOptions{
		Auth: cfg.Auth, Limits: cfg.Limits, Logger: cfg.Logger, Metrics: cfg.Metrics,
		Dashboard: cfg.Dashboard, MaxBodyBytes: cfg.MaxBodyBytes,
		Workflows: cfg.Workflows, BodyTimeout: cfg.BodyTimeout, WriteTimeout: cfg.WriteTimeout, AllowedHosts: cfg.AllowedHosts,
		Holders: cfg.Holders,
	})
	s.hs = &http.Server{
		Handler:           s.api,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	if s.respLn != nil {
		var rt *tls.Config
		if tc != nil {
			rt = tc.Clone() // the RESP server wraps its listener itself
		}
		ro := cfg.RESP
		ro.Auth, ro.Limits, ro.Logger, ro.TLS, ro.Metrics = cfg.Auth, cfg.Limits, cfg.Logger, rt, cfg.Metrics
		ro.Holders, ro.Workflows = cfg.Holders, cfg.Workflows
		s.resp = NewRESPServer(fronted, ro)
	}
	if !cfg.Auth.Enabled() {
		for _, ln := range []net.Listener{s.httpLn, s.respLn} {
			if ln != nil && !isLoopback(ln.Addr()) {
				s.log.Warn("auth is off on a non-loopback address: anyone who can reach it can take and release every lease",
					"addr", ln.Addr().String())
			}
		}
	}
	return s, nil
}

// httpTLS is the TLS config of the HTTP listener: HTTP/2 and HTTP/1.1 by
// ALPN.
func httpTLS(tc *tls.Config) *tls.Config {
	c := tc.Clone()
	c.NextProtos = []string{"h2", "http/1.1"}
	return c
}

func loadTLS(cfg Config) (*tls.Config, error) {
	switch {
	case cfg.TLSCert == "" && cfg.TLSKey == "" && cfg.ClientCA == "":
		return nil, nil
	case cfg.TLSCert == "" || cfg.TLSKey == "":
		return nil, errors.New("TLS needs both a certificate and a key file (and a client CA needs them too)")
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, CipherSuites: aeadSuites}
	if cfg.ClientCA != "" {
		pem, err := os.ReadFile(cfg.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s: no PEM certificates in it", cfg.ClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// aeadSuites are the TLS 1.2 cipher suites served: ECDHE with AES-GCM or
// ChaCha20-Poly1305 only, no CBC (TLS 1.3's suites are all AEAD and not
// configurable).
var aeadSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// HTTPAddr is the HTTP listener's address, or nil.
func (s *Server) HTTPAddr() net.Addr {
	if s.httpLn == nil {
		return nil
	}
	return s.httpLn.Addr()
}

// RESPAddr is the RESP listener's address, or nil.
func (s *Server) RESPAddr() net.Addr {
	if s.respLn == nil {
		return nil
	}
	return s.respLn.Addr()
}

// TLS reports whether the listeners speak TLS.
func (s *Server) TLS() bool { return s.tls != nil }

// Run serves until ctx ends or a listener fails, then shuts down
// gracefully: it stops accepting, ends long-polls and event streams, lets
// other in-flight requests finish for up to ShutdownTimeout, and closes
// the Backend. It returns nil after a shutdown asked for by ctx. Run may be
// called once.
func (s *Server) Run(ctx context.Context) error {
	err := errors.New("server: Run called twice")
	s.runOnce.Do(func() { err = s.run(ctx) })
	return err
}

func (s *Server) run(ctx context.Context) error {
	errc := make(chan error, 2)
	var wg sync.WaitGroup
	if s.httpLn != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.hs.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("HTTP server: %w", err)
			}
		}()
	}
	if s.resp != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.resp.Serve(s.respLn); err != nil && !errors.Is(err, ErrRESPServerClosed) && !errors.Is(err, net.ErrClosed) {
				errc <- fmt.Errorf("RESP server: %w", err)
			}
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	s.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	var shut sync.WaitGroup
	shut.Add(1)
	go func() {
		defer shut.Done()
		if err := s.hs.Shutdown(sctx); err != nil {
			s.log.Warn("HTTP shutdown: closing connections", "error", err)
			s.hs.Close()
		}
	}()
	// Long-polls and event streams would hold Shutdown up until its
	// deadline: end them now (a waiting acquire gets 503 and retries).
	s.api.cancelDrain()
	if s.resp != nil {
		shut.Add(1)
		go func() {
			defer shut.Done()
			if err := s.resp.Shutdown(sctx); err != nil {
				s.log.Warn("RESP shutdown", "error", err)
			}
		}()
	}
	shut.Wait()
	wg.Wait()
	if err := s.b.Close(); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("closing the backend: %w", err))
	}
	s.log.Info("stopped")
	return runErr
}

// Serve runs a Server over b with cfg until ctx ends (see Server.Run). It
// closes b when it returns, also on error.
func Serve(ctx context.Context, b Backend, cfg Config) error {
	s, err := NewServer(b, cfg)
	if err != nil {
		b.Close()
		return err
	}
	return s.Run(ctx)
}
