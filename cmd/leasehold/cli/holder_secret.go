package cli

import "github.com/leasehold/leasehold"

// Holder proofs of the lease server: a grant's secret, returned only to
// the client that acquired it, which renew and release must send. "run"
// and "elect" pass it to their command in LEASEHOLD_SECRET, "hold --json"
// prints it, and "release" sends the one in --secret (default
// $LEASEHOLD_SECRET), so that a grant can be released by another process
// than the one that took it. Other stores have no secrets.

// envSecret is the variable that carries a grant's secret to CMD.
const envSecret = "LEASEHOLD_SECRET"

// holderSecrets is implemented by the lease server's stores (remote).
type holderSecrets interface {
	HolderSecret(name, owner string, token uint64) string
	SetHolderSecret(name, owner string, token uint64, secret string)
}

// grantSecret is the secret of l's grant if store keeps one, else "".
func grantSecret(store leasehold.Store, l *leasehold.Lease) string {
	if hs, ok := store.(holderSecrets); ok {
		return hs.HolderSecret(l.Name(), l.Owner(), l.Token())
	}
	return ""
}

// useSecret gives store the secret of the grant (name, owner, token) to
// send with its release, if store takes secrets and secret is not empty.
func useSecret(store leasehold.Store, name, owner string, token uint64, secret string) {
	if hs, ok := store.(holderSecrets); ok && secret != "" {
		hs.SetHolderSecret(name, owner, token, secret)
	}
}
