//go:build unix

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/server"
)

// holderCall is one HTTP call of the holder-proof tests: method POST,
// bearer token tok, JSON body; it returns the status and decoded body.
func holderCall(t *testing.T, url, tok, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	m := map[string]any{}
	_ = json.Unmarshal(b, &m)
	return res.StatusCode, m
}

func holderAuthFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(p, []byte(`{"tokens":[{"identity":"a","token":"tok-a","grants":[{"prefix":"svc/","access":"write"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeHolderKeyEngine: the engine's holder key is holder.key in its
// data directory (created 0600), secrets are required with auth on, and a
// grant's secret still works after a restart.
func TestServeHolderKeyEngine(t *testing.T) {
	catchSIGTERM(t)

	dir := filepath.Join(t.TempDir(), "data")
	args := []string{"--addr", "127.0.0.1:0", "--resp-addr", "", "--data-dir", dir, "--auth-file", holderAuthFile(t), "--log-level", "warn"}
	s := startServing(t, args...)
	keyFile := filepath.Join(dir, "holder.key")
	if out := s.out.String(); !strings.Contains(out, "holder proofs: key in "+keyFile+"; secrets required") {
		t.Errorf("start-up lines:\n%s", out)
	}
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("holder key file: %v %v", fi, err)
	}
	code, a := holderCall(t, s.base+"/v1/leases/svc/x/acquire", "tok-a", `{"owner":"a","ttl_ms":3600000}`)
	sec, _ := a["secret"].(string)
	if code != 200 || sec == "" {
		t.Fatalf("acquire: %d %v", code, a)
	}
	tok := a["token"]
	if code, m := holderCall(t, s.base+"/v1/leases/svc/x/renew", "tok-a", fmt.Sprintf(`{"owner":"a","token":%v,"ttl_ms":3600000}`, tok)); code != 403 || !strings.HasSuffix(fmt.Sprint(m["type"]), "bad-proof") {
		t.Errorf("renew without the secret: %d %v", code, m)
	}
	stopAll(t, s)

	s = startServing(t, args...)
	if code, m := holderCall(t, s.base+"/v1/leases/svc/x/renew", "tok-a", fmt.Sprintf(`{"owner":"a","token":%v,"ttl_ms":3600000,"secret":%q}`, tok, sec)); code != 200 {
		t.Errorf("renew with the secret after a restart: %d %v", code, m)
	}
	if code, m := holderCall(t, s.base+"/v1/leases/svc/x/release", "tok-a", fmt.Sprintf(`{"owner":"a","token":%v,"secret":%q}`, tok, sec)); code != 204 {
		t.Errorf("release with the secret after a restart: %d %v", code, m)
	}
	stopAll(t, s)
}

// TestServeHolderKeyProxies: two proxies in front of one store given one
// --holder-key-file accept each other's secrets; a proxy without it uses
// a random key (and says so in its log), so it refuses them.
func TestServeHolderKeyProxies(t *testing.T) {
	catchSIGTERM(t)

	tmp := t.TempDir()
	store := "sqlite://" + filepath.Join(tmp, "leases.db")
	keyFile := filepath.Join(tmp, "keys", "holder.key")
	auth := holderAuthFile(t)
	common := []string{"--addr", "127.0.0.1:0", "--resp-addr", "", "--store", store, "--auth-file", auth}
	s1 := startServing(t, append(common, "--holder-key-file", keyFile)...)
	s2 := startServing(t, append(common, "--holder-key-file", keyFile)...)
	s3 := startServing(t, common...)
	for _, s := range []*serving{s1, s2} {
		if out := s.out.String(); !strings.Contains(out, "holder proofs: key in "+keyFile+"; secrets required") {
			t.Errorf("start-up lines:\n%s", out)
		}
		if strings.Contains(s.errb.String(), "random key") {
			t.Errorf("random-key warning with --holder-key-file:\n%s", s.errb.String())
		}
	}
	if out, log := s3.out.String(), s3.errb.String(); !strings.Contains(out, "holder proofs: random key") ||
		!strings.Contains(log, "restarts stop matching") || !strings.Contains(log, "share one key file") {
		t.Errorf("proxy without --holder-key-file: start-up lines:\n%s\nlog:\n%s", out, log)
	}

	code, a := holderCall(t, s1.base+"/v1/leases/svc/x/acquire", "tok-a", `{"owner":"a","ttl_ms":3600000}`)
	sec, _ := a["secret"].(string)
	if code != 200 || sec == "" {
		t.Fatalf("acquire: %d %v", code, a)
	}
	renew := fmt.Sprintf(`{"owner":"a","token":%v,"ttl_ms":3600000,"secret":%q}`, a["token"], sec)
	if code, m := holderCall(t, s3.base+"/v1/leases/svc/x/renew", "tok-a", renew); code != 403 {
		t.Errorf("renew through the random-key proxy: %d %v", code, m)
	}
	if code, m := holderCall(t, s2.base+"/v1/leases/svc/x/renew", "tok-a", renew); code != 200 {
		t.Errorf("renew through the other proxy with the shared key: %d %v", code, m)
	}
	if code, m := holderCall(t, s2.base+"/v1/leases/svc/x/release", "tok-a", fmt.Sprintf(`{"owner":"a","token":%v,"secret":%q}`, a["token"], sec)); code != 204 {
		t.Errorf("release through the other proxy: %d %v", code, m)
	}
	stopAll(t, s1, s2, s3)
}

// TestServeHolderKeyBad: a key file that is not a key is a usage error.
func TestServeHolderKeyBad(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bad, short, dir} {
		r := h.run("serve", "--addr", "127.0.0.1:0", "--resp-addr", "", "--data-dir", filepath.Join(dir, "data"), "--holder-key-file", f)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "--holder-key-file") {
			t.Errorf("--holder-key-file %s: exit %d\n%s", f, r.code, r.stderr)
		}
	}
	if b, _ := os.ReadFile(bad); string(b) != "not a key\n" {
		t.Errorf("the bad key file was changed: %q", b)
	}
}

// TestServeHolderKeyReadable: a key file others may read is used, with a
// warning at start-up.
func TestServeHolderKeyReadable(t *testing.T) {
	catchSIGTERM(t)

	dir := t.TempDir()
	keyFile := filepath.Join(dir, "holder.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keyFile, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	s := startServing(t, "--addr", "127.0.0.1:0", "--resp-addr", "", "--data-dir", filepath.Join(dir, "data"), "--holder-key-file", keyFile)
	r := s.stop(t)
	if r.code != 0 || !strings.Contains(r.stdout, "holder proofs: key in "+keyFile+"; secrets checked when given (auth is off)") ||
		!strings.Contains(r.stderr, "readable by others") {
		t.Errorf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "holder.key")); !os.IsNotExist(err) {
		t.Errorf("a key was made in the data directory although --holder-key-file was given: %v", err)
	}
}

// TestServeHolderSecretHandoff: through a lease server with auth on,
// "run" gives its command the grant's secret in LEASEHOLD_SECRET, and
// "release" of a grant taken by another client succeeds with the secret
// ($LEASEHOLD_SECRET or --secret) and is refused without it (exit 76,
// nothing changed).
func TestServeHolderSecretHandoff(t *testing.T) {
	catchSIGTERM(t)

	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	s := startServing(t, "--addr", "127.0.0.1:0", "--resp-addr", "127.0.0.1:0", "--data-dir", dir, "--auth-file", holderAuthFile(t), "--log-level", "warn")
	proofs, err := server.LoadHolderKey(filepath.Join(dir, "holder.key"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	for _, url := range []string{s.base + "?token=tok-a", "leasehold://" + s.resp + "?token=tok-a"} {
		out := filepath.Join(tmp, "child.env")
		r := h.run("run", "--store", url, "--owner", "runner", "svc/job", "--", "sh", "-c",
			`printf '%s %s %s' "$LEASEHOLD_OWNER" "$LEASEHOLD_TOKEN" "$LEASEHOLD_SECRET" > "$0"`, out)
		if r.code != 0 {
			t.Fatalf("run through %s: exit %d\n%s", url, r.code, r.stderr)
		}
		b, err := os.ReadFile(out)
		f := strings.Fields(string(b))
		if err != nil || len(f) != 3 {
			t.Fatalf("the command's LEASEHOLD_OWNER, _TOKEN, _SECRET through %s: %q %v", url, b, err)
		}
		tok, _ := strconv.ParseUint(f[1], 10, 64)
		if f[0] != "runner" || f[2] != proofs.Secret("svc/job", "runner", tok) {
			t.Errorf("through %s the command got %q; want the grant's secret", url, b)
		}
	}

	for i, how := range []string{"env", "flag"} {
		name := fmt.Sprintf("svc/handoff%d", i)
		code, a := holderCall(t, s.base+"/v1/leases/"+name+"/acquire", "tok-a", `{"owner":"a","ttl_ms":3600000}`)
		sec, _ := a["secret"].(string)
		if code != 200 || sec == "" {
			t.Fatalf("acquire: %d %v", code, a)
		}
		tok := fmt.Sprint(a["token"])
		url := s.base + "?token=tok-a"
		if i == 1 {
			url = "leasehold://" + s.resp + "?token=tok-a"
		}
		t.Setenv("LEASEHOLD_SECRET", "")
		if r := h.run("release", "--store", url, name, "--owner", "a", "--token", tok); r.code != ExitLost {
			t.Errorf("release without the secret: exit %d, want %d\n%s", r.code, ExitLost, r.stderr)
		}
		args := []string{"release", "--store", url, name, "--owner", "a", "--token", tok}
		if how == "env" {
			t.Setenv("LEASEHOLD_SECRET", sec)
		} else {
			args = append(args, "--secret", sec)
		}
		if r := h.run(args...); r.code != 0 {
			t.Errorf("release with the secret (%s): exit %d\n%s", how, r.code, r.stderr)
		}
	}
	stopAll(t, s)
}
