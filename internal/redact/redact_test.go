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
