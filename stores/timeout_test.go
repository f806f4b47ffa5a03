package stores_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/silent"
)

func TestConnectTimeoutParameter(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want time.Duration
		ok   bool
	}{
		{"redis://h:6379/0?connect_timeout=5s", 5 * time.Second, true},
		{"postgres://h1,h2/db?sslmode=disable&connect_timeout=2", 2 * time.Second, true},
		{"etcd://h/?prefix=x/&connect_timeout=1500ms#f", 1500 * time.Millisecond, true},
		{"http://h/?connect%5Ftimeout=1m", time.Minute, true},
		{"redis://h:6379/0", 0, false},
		{"redis://h:6379/0?connect_timeouts=5s", 0, false},
		{"sqlite:///x.db?connect_timeout=5s", 0, false}, // not networked: the sqlite parser refuses the query
		{"memory://", 0, false},
	} {
		d, ok, err := stores.ConnectTimeout(tc.url)
		if err != nil || d != tc.want || ok != tc.ok {
			t.Errorf("ConnectTimeout(%q) = %s, %v, %v; want %s, %v", tc.url, d, ok, err, tc.want, tc.ok)
		}
	}
	for _, bad := range []string{
		"redis://h?connect_timeout=0", "redis://h?connect_timeout=-1s", "redis://h?connect_timeout=soon",
		"redis://h?connect_timeout=", "redis://h?connect_timeout=1s&connect_timeout=2s", "postgres://h/db?connect_timeout=%zz",
	} {
		if _, _, err := stores.ConnectTimeout(bad); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("ConnectTimeout(%q): %v, want ErrInvalid", bad, err)
		}
		// Refused before anything is dialled: h does not exist.
		if _, err := stores.Open(context.Background(), bad); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("Open(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

// TestOpenGivesUpAfterConnectTimeout: every networked scheme takes
// connect_timeout=, and a server that accepts connections but never
// answers makes Open fail saying so, not hang on ctx (which has no end).
// (The server's stores, http:// and leasehold://, send nothing when
// opened; the command asks them once, see cmd/leasehold/cli.) The timeout
// is 3 s: with 1 s, the AWS SDK under the race detector on a loaded
// machine once spent it all before dialling, and the check that Open
// connected failed.
func TestOpenGivesUpAfterConnectTimeout(t *testing.T) {
	srv := silent.Listen(t)
	a := srv.Addr()
	for _, u := range []string{
		"redis://" + a + "/0?connect_timeout=3s",
		"postgres://u@" + a + "/db?sslmode=disable&connect_timeout=3s",
		"etcd://" + a + "/?connect_timeout=3s",
		"dynamodb://table?endpoint=http://" + a + "&region=eu-west-1&connect_timeout=3s",
	} {
		t.Run(strings.Split(u, ":")[0], func(t *testing.T) {
			if strings.HasPrefix(u, "dynamodb") {
				t.Setenv("AWS_ACCESS_KEY_ID", "x")
				t.Setenv("AWS_SECRET_ACCESS_KEY", "y")
			}
			before := srv.Accepted()
			done := make(chan error, 1)
			go func() {
				s, err := stores.Open(context.Background(), u)
				if s != nil {
					s.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), "no answer within 3s") {
					t.Errorf("Open(%q) = %v, want an error saying there was no answer within 3s", u, err)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("Open(%q) still hanging after 60s", u)
			}
			if srv.Accepted() == before {
				t.Errorf("Open(%q) never connected to the silent server", u)
			}
		})
	}
}

// TestDynamoDBLocalEndpointWithoutCredentials: with endpoint= and no
// credentials anywhere, Open fails at once saying so, without asking the
// EC2 metadata service (pointed here at a listener that counts) and
// without sending anything to the endpoint.
func TestDynamoDBLocalEndpointWithoutCredentials(t *testing.T) {
	imds, endpoint := silent.Listen(t), silent.Listen(t)
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": dir + "/config", "AWS_SHARED_CREDENTIALS_FILE": dir + "/credentials",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_EC2_METADATA_DISABLED": "",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://" + imds.Addr(),
	} {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := stores.Open(ctx, "dynamodb://table?endpoint=http://"+endpoint.Addr())
	if err == nil || !strings.Contains(err.Error(), "no AWS credentials") {
		t.Errorf("Open without credentials = %v, want a \"no AWS credentials\" error", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Open waited for its context to end: %v", err)
	}
	if n := imds.Accepted(); n != 0 {
		t.Errorf("the EC2 metadata service was asked (%d connections)", n)
	}
	if n := endpoint.Accepted(); n != 0 {
		t.Errorf("the endpoint was contacted (%d connections) without credentials", n)
	}
}

// TestEtcdConnectTimeout (issue 29, item 5): etcd's Open honours
// connect_timeout= both ways around its 5 s dial default: an unreachable
// endpoint (a closed port) is given up on after 1.5 s with 1500ms, and not
// before 7 s with 7s (it gave up at about 5 s whatever the parameter said).
func TestEtcdConnectTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, c := range []struct {
		param    string
		min, max time.Duration
	}{
		{"1500ms", 1500 * time.Millisecond, 4500 * time.Millisecond},
		{"7s", 7 * time.Second, time.Minute},
	} {
		start := time.Now()
		s, err := stores.Open(context.Background(), "etcd://"+addr+"/?connect_timeout="+c.param)
		took := time.Since(start)
		if err == nil {
			s.Close()
			t.Fatalf("connect_timeout=%s: opened a closed port", c.param)
		}
		if took < c.min || took > c.max || !strings.Contains(err.Error(), "no answer within") {
			t.Errorf("connect_timeout=%s: gave up after %s (want [%s, %s]): %v", c.param, took, c.min, c.max, err)
		}
	}
}

// TestUnknownParameterNamesConnectTimeout: an engine's error for an
// unknown URL parameter lists the parameters it knows; through Open,
// which takes connect_timeout= off the URL first, that list names it too
// (the red team's round 6 was told the DynamoDB URL's parameters without
// it), and nothing is opened or created.
func TestUnknownParameterNamesConnectTimeout(t *testing.T) {
	for _, u := range []string{
		"dynamodb://tbl?endpoint=http://127.0.0.1:1&region=us-east-1&bogus=1",
		"etcd://127.0.0.1:1/?bogus=1",
		"leasehold://127.0.0.1:1?bogus=1",
	} {
		_, err := stores.Open(context.Background(), u)
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), `"bogus"`) || !strings.Contains(err.Error(), "connect_timeout=") {
			t.Errorf("Open(%s): %v; want invalid, naming bogus and connect_timeout=", u, err)
		}
	}
}
