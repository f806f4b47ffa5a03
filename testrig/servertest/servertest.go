// Package servertest holds what the tests of the lease server and of its
// clients share: waiting for a condition, and a throwaway PKI (a CA with
// server and client certificates, as PEM files) for TLS, running workers
// at once. It imports
// nothing of this module, so that package server's own tests can use it
// as well as remote's.
package servertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing t if it does not within 30 s
// (a generous bound: it waits for order, not for speed).
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Parallel runs work(0) … work(n-1) in n goroutines at once, waits for
// all of them and reports every error they return with t.Error.
func Parallel(t testing.TB, n int, work func(i int) error) {
	t.Helper()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- work(i)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// PKI is a throwaway CA with a server certificate (for 127.0.0.1) and a
// client certificate, and a second CA that signed neither. The fields are
// the paths of PEM files in a temporary directory of the test.
type PKI struct {
	CAFile                string // the CA's certificate
	CertFile, KeyFile     string // the server's certificate and key
	ClientCert, ClientKey string // the client's certificate and key
	OtherCA               string // a CA that signed neither

	CA         *x509.Certificate
	ServerCert tls.Certificate
}

// NewPKI makes a PKI in a temporary directory of t.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := MakeCert(t, nil, nil, "test CA", true)
	srv, srvKey := MakeCert(t, ca, caKey, "127.0.0.1", false)
	cli, cliKey := MakeCert(t, ca, caKey, "client", false)
	other, _ := MakeCert(t, nil, nil, "other CA", true)
	return &PKI{
		CAFile:     WritePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw),
		CertFile:   WritePEM(t, dir, "server.pem", "CERTIFICATE", srv.Raw),
		KeyFile:    WriteKey(t, dir, "server.key", srvKey),
		ClientCert: WritePEM(t, dir, "client.pem", "CERTIFICATE", cli.Raw),
		ClientKey:  WriteKey(t, dir, "client.key", cliKey),
		OtherCA:    WritePEM(t, dir, "other.pem", "CERTIFICATE", other.Raw),
		CA:         ca,
		ServerCert: tls.Certificate{Certificate: [][]byte{srv.Raw}, PrivateKey: srvKey},
	}
}

// MutualTLS is a server's TLS configuration with p's server certificate
// that requires a client certificate signed by p's CA.
func (p *PKI) MutualTLS() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(p.CA)
	return &tls.Config{
		Certificates: []tls.Certificate{p.ServerCert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
}

// MakeCert makes a certificate for cn with a new P-256 key, valid from an
// hour ago to an hour from now: a self-signed one when parent is nil, else
// one parent signs. A certificate that is not a CA's is for server and
// client authentication, with the IP address 127.0.0.1.
func MakeCert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		BasicConstraintsValid: true,
		IsCA:                  isCA,
	}
	if isCA {
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// WritePEM writes der as one PEM block of type typ to dir/name and
// returns the file's path.
func WritePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteKey writes key as an EC PRIVATE KEY PEM file dir/name and returns
// its path.
func WriteKey(t testing.TB, dir, name string, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return WritePEM(t, dir, name, "EC PRIVATE KEY", der)
}
