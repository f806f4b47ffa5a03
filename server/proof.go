package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Holder proofs: a grant's secret.
//
// A lease's owner and fencing token are visible to every reader (they are
// how a resource checks a fenced write). Releasing, renewing or updating a
// lease therefore needs more than them: the secret returned only to the
// acquirer, with the grant. The secret is an HMAC of the grant (name,
// owner, token) under a server key, so the server keeps no state for it:
// it survives restarts for as long as the key does, and every server
// given the same key (several `leasehold serve --store X` in front of one
// store) accepts the others' secrets.

// HolderKeyLen is the length of a holder key in bytes.
const HolderKeyLen = 32

// holderSecretLen is the secret's length in bytes before encoding (128
// bits; 22 characters of base64url).
const holderSecretLen = 16

// ErrBadProof is the error of a renew, release or update whose holder
// proof (secret) is missing or does not match the grant.
var ErrBadProof = errors.New("the holder proof (secret) does not match the grant")

// HolderProofs computes and checks grants' secrets under one key.
type HolderProofs struct {
	key []byte
	// Required makes a missing secret an error. Servers with auth on
	// require it; with auth off, where every caller may force-release any
	// lease anyway, a given secret is still checked but may be left out.
	Required bool
}

// NewHolderProofs returns proofs under key, which must be HolderKeyLen
// bytes.
func NewHolderProofs(key []byte) (*HolderProofs, error) {
	if len(key) != HolderKeyLen {
		return nil, fmt.Errorf("holder key: want %d bytes, got %d", HolderKeyLen, len(key))
	}
	return &HolderProofs{key: append([]byte(nil), key...)}, nil
}

// RandomHolderProofs returns proofs under a new random key: secrets stop
// matching when the process ends.
func RandomHolderProofs() *HolderProofs {
	key := make([]byte, HolderKeyLen)
	if _, err := rand.Read(key); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return &HolderProofs{key: key}
}

// LoadHolderKey reads the key in path, or, if path does not exist,
// creates it (mode 0600) with a new random key. The file holds the key
// as 64 hex digits.
func LoadHolderKey(path string) (*HolderProofs, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key := make([]byte, HolderKeyLen)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("holder key: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, err = fmt.Fprintf(f, "%x\n", key)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				return NewHolderProofs(key)
			}
			return nil, fmt.Errorf("holder key: %w", err)
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("holder key: %w", err)
		}
		// Another process created it first: read theirs.
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("holder key: %w", err)
	}
	var key []byte
	if n, err := fmt.Sscanf(string(b), "%x", &key); n != 1 || err != nil || len(key) != HolderKeyLen {
		return nil, fmt.Errorf("holder key %s: want %d hex digits on the first line", path, 2*HolderKeyLen)
	}
	return NewHolderProofs(key)
}

// Secret returns the secret of the grant (name, owner, token).
func (p *HolderProofs) Secret(name, owner string, token uint64) string {
	m := hmac.New(sha256.New, p.key)
	m.Write([]byte("leasehold holder v1\x00"))
	m.Write([]byte(name))
	m.Write([]byte{0})
	m.Write([]byte(owner))
	m.Write([]byte{0})
	m.Write([]byte(strconv.FormatUint(token, 10)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:holderSecretLen])
}

// Check returns nil if secret proves holding the grant (name, owner,
// token), or if p is nil (proofs off), or if secret is empty and proofs
// are not Required; ErrBadProof otherwise. The comparison takes constant
// time.
func (p *HolderProofs) Check(name, owner string, token uint64, secret string) error {
	if p == nil || (secret == "" && !p.Required) {
		return nil
	}
	if secret == "" || !hmac.Equal([]byte(secret), []byte(p.Secret(name, owner, token))) {
		return ErrBadProof
	}
	return nil
}
