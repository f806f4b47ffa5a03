package server

import (
	"fmt"
	"strings"
	"testing"
)

// TestHTTPHolderProofs: only the acquirer gets a grant's secret, and
// renew and release without it (or with another grant's) are refused with
// 403 bad-proof and change nothing.
func TestHTTPHolderProofs(t *testing.T) {
	proofs := RandomHolderProofs()
	proofs.Required = true
	ts := newHTServer(t, HandlerOptions{Holders: proofs})
	a := ts.do("POST", "/v1/leases/p/x/acquire", "", `{"owner":"a","ttl_ms":60000}`)
	ts.want(a, 200, "")
	tok := uint64(a.num("token"))
	sec := a.str("secret")
	if sec == "" || sec != proofs.Secret("p/x", "a", tok) {
		t.Fatalf("acquire secret %q, want the grant's", sec)
	}
	// Nothing but the acquire response carries it.
	for _, path := range []string{"/v1/leases/p/x", "/v1/leases?prefix=p/", "/v1/events/recent", "/v1/elections/p/x/leader", "/v1/stats"} {
		if r := ts.do("GET", path, "", ""); r.status != 200 || strings.Contains(string(r.body), sec) || strings.Contains(string(r.body), `"secret"`) {
			t.Errorf("GET %s: %d %s shows the secret", path, r.status, r.body)
		}
	}
	other := ts.do("POST", "/v1/leases/p/y/acquire", "", `{"owner":"a","ttl_ms":60000}`)
	ts.want(other, 200, "")
	for _, proof := range []string{"", `,"secret":""`, fmt.Sprintf(`,"secret":%q`, other.str("secret")), fmt.Sprintf(`,"secret":%q`, sec+"x")} {
		ts.want(ts.do("POST", "/v1/leases/p/x/renew", "", fmt.Sprintf(`{"owner":"a","token":%d,"ttl_ms":5000%s}`, tok, proof)), 403, "bad-proof")
		ts.want(ts.do("POST", "/v1/leases/p/x/release", "", fmt.Sprintf(`{"owner":"a","token":%d%s}`, tok, proof)), 403, "bad-proof")
	}
	if g := ts.do("GET", "/v1/leases/p/x", "", ""); g.status != 200 || g.str("owner") != "a" || uint64(g.num("token")) != tok || g.num("ttl_ms") != 60000 {
		t.Fatalf("after refused renews and releases: %d %s", g.status, g.body)
	}
	ts.want(ts.do("POST", "/v1/leases/p/x/renew", "", fmt.Sprintf(`{"owner":"a","token":%d,"ttl_ms":5000,"secret":%q}`, tok, sec)), 200, "")
	ts.want(ts.do("POST", "/v1/leases/p/x/release", "", fmt.Sprintf(`{"owner":"a","token":%d,"secret":%q}`, tok, sec)), 204, "")
	ts.want(ts.do("GET", "/v1/leases/p/x", "", ""), 404, "not-found")
	// Force-release answers with the lease it ended, without a secret.
	f := ts.do("POST", "/v1/leases/p/y/force-release", "", "")
	if f.status != 200 || strings.Contains(string(f.body), "secret") {
		t.Errorf("force-release: %d %s", f.status, f.body)
	}

	// Semaphore permits: the acquire response has the permit's secret,
	// and the permit's renew and release need it.
	s := ts.do("POST", "/v1/semaphores/p/pool/acquire", "", `{"owner":"s","permits":2,"ttl_ms":60000}`)
	ts.want(s, 200, "")
	pname, ptok := s.str("name"), uint64(s.num("token"))
	if s.str("secret") != proofs.Secret(pname, "s", ptok) {
		t.Fatalf("semaphore acquire secret %q for %s", s.str("secret"), pname)
	}
	ts.want(ts.do("POST", "/v1/leases/"+pname+"/renew", "", fmt.Sprintf(`{"owner":"s","token":%d,"ttl_ms":5000}`, ptok)), 403, "bad-proof")
	ts.want(ts.do("POST", "/v1/leases/"+pname+"/release", "", fmt.Sprintf(`{"owner":"s","token":%d}`, ptok)), 403, "bad-proof")
	ts.want(ts.do("POST", "/v1/leases/"+pname+"/renew", "", fmt.Sprintf(`{"owner":"s","token":%d,"ttl_ms":5000,"secret":%q}`, ptok, s.str("secret"))), 200, "")
	ts.want(ts.do("POST", "/v1/leases/"+pname+"/release", "", fmt.Sprintf(`{"owner":"s","token":%d,"secret":%q}`, ptok, s.str("secret"))), 204, "")

	// Not required (auth off): a missing secret passes, a wrong one not.
	proofs.Required = false
	b := ts.do("POST", "/v1/leases/p/z/acquire", "", `{"owner":"b","ttl_ms":60000}`)
	ts.want(b, 200, "")
	ts.want(ts.do("POST", "/v1/leases/p/z/release", "", fmt.Sprintf(`{"owner":"b","token":%v,"secret":"nope"}`, b.num("token"))), 403, "bad-proof")
	ts.want(ts.do("POST", "/v1/leases/p/z/release", "", fmt.Sprintf(`{"owner":"b","token":%v}`, b.num("token"))), 204, "")
}
