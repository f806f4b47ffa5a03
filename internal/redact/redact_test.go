package redact

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for raw, want := range map[string]string{
		"leasehold://127.0.0.1:7071?token=s3cr3t-tok":                     "leasehold://127.0.0.1:7071?token=REDACTED",
		"leaseholds://srv:7071/?token=s3cr3t&timeout=5s":                  "leaseholds://srv:7071/?token=REDACTED&timeout=5s",
		"postgres://app:hunter22@db.internal:5432/leases?sslmode=require": "postgres://app:REDACTED@db.internal:5432/leases?sslmode=require",
		"redis://:p%40ss@cache:6379/0":                                    "redis://:REDACTED@cache:6379/0",
		"dynamodb://leases?region=eu-west-1&aws_access_key_id=AKIAEXAMPLE&aws_secret_access_key=wJalrXUtnFEMI&aws_session_token=FQoG": "dynamodb://leases?region=eu-west-1&aws_access_key_id=AKIAEXAMPLE&aws_secret_access_key=REDACTED&aws_session_token=REDACTED",
		"etcd://a:2379,b:2379?password=pw1234&username=root":                                                                          "etcd://a:2379,b:2379?password=REDACTED&username=root",
		"http://h/x?Password=pw&X-Amz-Signature=abcd&api_key=k":                                                                       "http://h/x?Password=REDACTED&X-Amz-Signature=REDACTED&api_key=REDACTED",
		"sqlite:///var/lib/leasehold/leases.db":                                                                                       "sqlite:///var/lib/leasehold/leases.db",
		"memory://":                                                                                                                   "memory://",
		"postgres://user@db/app":                                                                                                      "postgres://user@db/app",
		// A Redis password in the user slot, and PostgreSQL's password
		// passed as a server option (issue 26: both were shown).
		"redis://s3cretpw@cache:6379/0":                                 "redis://REDACTED@cache:6379/0",
		"rediss://s3cretpw@cache:6380":                                  "rediss://REDACTED@cache:6380",
		"postgres://app@db/leases?options=-c%20password%3Dhunter22&x=1": "postgres://app@db/leases?options=REDACTED&x=1",
		"postgres://app@db/leases?options=-c+statement_timeout%3D5s":    "postgres://app@db/leases?options=-c+statement_timeout%3D5s",
		// libpq settings whose names hold a secret word ("session",
		// "auth") but whose values are none (red team of issue 31, item
		// 8: the read-only hint's example was masked); a password
		// beside them still is.
		"postgres://h1,h2/db?target_session_attrs=read-write":                                    "postgres://h1,h2/db?target_session_attrs=read-write",
		"postgres://app:pw1234@h1,h2/db?Target_Session_Attrs=primary&require_auth=scram-sha-256": "postgres://app:REDACTED@h1,h2/db?Target_Session_Attrs=primary&require_auth=scram-sha-256",
		"postgres://h1/db?target_session_attrs=any&password=pw1234&session=s3ss10n":              "postgres://h1/db?target_session_attrs=any&password=REDACTED&session=REDACTED",
	} {
		if got := URL(raw); got != want {
			t.Errorf("URL(%q)\n = %q\nwant %q", raw, got, want)
		}
	}
	// Not a URL Go parses: still no secret.
	for _, raw := range []string{"postgres://u:se cret@h/%zz", "redis://:pass word@h:bad port"} {
		if got := URL(raw); strings.Contains(got, "cret") || strings.Contains(got, "word") {
			t.Errorf("URL(%q) = %q: the password shows", raw, got)
		}
	}
}

func TestString(t *testing.T) {
	in := `open store "leasehold://h:7071?token=abc123xyz": dial: refused; dsn host=db user=app password=hunter22 sslmode=off; token: t0k3nvalue`
	got := String(in)
	for _, secret := range []string{"abc123xyz", "hunter22", "t0k3nvalue"} {
		if strings.Contains(got, secret) {
			t.Errorf("String left %q in %q", secret, got)
		}
	}
	for _, kept := range []string{"leasehold://h:7071?token=", "host=db", "user=app", "sslmode=off", "dial: refused"} {
		if !strings.Contains(got, kept) {
			t.Errorf("String dropped %q: %q", kept, got)
		}
	}
}

// TestReadOnlyHintIntact (red team of issue 31, item 8): the example URL
// of PostgreSQL's read-only hint was shown as
// "target_session_attrs=REDACTED" (its closing parenthesis eaten too),
// and a store URL naming target_session_attrs=read-write made
// "read-write" a secret masked everywhere in the message.
func TestReadOnlyHintIntact(t *testing.T) {
	hint := "read-only (SQLSTATE 25006); name the primary, or list every node with target_session_attrs=read-write (postgres://host1,host2/db?target_session_attrs=read-write), which connects"
	if got := String(hint); got != hint {
		t.Errorf("String(hint)\n = %q\nwant it unchanged", got)
	}
	raw := "postgres://app:hunter22@h1,h2/db?target_session_attrs=read-write&password=pw1234"
	if s := Secrets(raw); len(s) != 2 || s[0] != "hunter22" || s[1] != "pw1234" {
		t.Errorf("Secrets(%q) = %q, want the two passwords only", raw, s)
	}
	got := Error(errors.New("open store "+raw+": "+hint), Secrets(raw)...).Error()
	if !strings.Contains(got, hint) || strings.Contains(got, "hunter22") || strings.Contains(got, "pw1234") {
		t.Errorf("Error = %q, want the hint intact and no password", got)
	}
}

func TestError(t *testing.T) {
	raw := "postgres://app:Zx9%21pass@db/leases?sslpassword=other-secret"
	err := fmt.Errorf("open store: connect as app with Zx9!pass: %w", io.ErrUnexpectedEOF)
	r := Error(err, Secrets(raw)...)
	if !errors.Is(r, io.ErrUnexpectedEOF) {
		t.Error("the redacted error lost its chain")
	}
	if strings.Contains(r.Error(), "Zx9") {
		t.Errorf("secret in %q", r.Error())
	}
	if Error(nil) != nil {
		t.Error("Error(nil) != nil")
	}
	plain := errors.New("no secret here")
	if Error(plain) != plain {
		t.Error("an error without secrets was replaced")
	}
	if s := Secrets(raw); len(s) != 3 || s[0] != "Zx9%21pass" || s[1] != "Zx9!pass" || s[2] != "other-secret" {
		t.Errorf("Secrets = %q", s)
	}
}

// TestMisspeltSecretParameters (red team: "?pasword=hunter2" was shown in
// the store's "did you mean password" error): the value of a parameter
// whose name is a typo of a secret one is masked, and the stores' other
// parameters are not.
func TestMisspeltSecretParameters(t *testing.T) {
	for _, name := range []string{
		"pasword", "Pasword", "sslpasword", "passwrod", "pssword", "sentinel_pasword", "sentinel_passwrd",
		"sentinelpassword", "paswd", "secert", "tokne", "aws_secert_access_key", "credentail", "signatrue", "apikye",
	} {
		raw := "redis://h:6379/0?holdback=1s&" + name + "=hunter2x"
		if got := URL(raw); strings.Contains(got, "hunter2x") || !strings.Contains(got, "holdback=1s") {
			t.Errorf("URL(%q) = %q", raw, got)
		}
		if s := Secrets(raw); len(s) != 1 || s[0] != "hunter2x" {
			t.Errorf("Secrets(%q) = %q", raw, s)
		}
	}
	// Parameters that hold no secret (the Redis and pgx parameters are
	// checked in those packages: TestParamsNotRedacted).
	for _, name := range []string{
		"holdback", "liveness", "prefix", "table", "migrate", "host", "port", "database", "user",
		"connect_timeout", "sslcrl", "application_name", "options", "region", "endpoint", "max_clock_skew",
		"consistent", "create", "ttl_cleanup", "condition_values", "one_write_region", "queue_liveness",
		"dial_timeout", "aws_access_key_id", "timeout", "keepalives", "keepalives_idle",
	} {
		raw := "x://h/?" + name + "=v4lue"
		if got := URL(raw); got != raw {
			t.Errorf("URL(%q) = %q, want it unchanged", raw, got)
		}
	}
}
