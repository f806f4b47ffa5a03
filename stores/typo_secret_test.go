package stores_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/stores"
)

// TestTypoOfSecretParameterNotEchoed (red team finding: a misspelt
// password parameter was shown in clear): a store URL whose parameter is
// a typo of a secret one (pasword=, sslpasword=, sentinel_pasword=, ...)
// is refused, and neither the error nor the URL as the command line shows
// it (redact.URL, then the error) holds the value. Every store with URL
// parameters, on the test engines.
func TestTypoOfSecretParameterNotEchoed(t *testing.T) {
	engine := func(env string) string {
		u := os.Getenv(env)
		if u == "" {
			t.Skipf("%s not set (scripts/engines.sh)", env)
		}
		return u
	}
	base := func(u string) string { b, _, _ := strings.Cut(u, "?"); return b }
	const secret = "Hunter2Secret"
	type form struct{ env, url string }
	var forms []form
	add := func(env string, urls ...string) {
		for _, u := range urls {
			forms = append(forms, form{env, u})
		}
	}
	add("LEASEHOLD_TEST_POSTGRES",
		"PG?sslmode=disable&pasword=S", "PG?sslmode=disable&sslpasword=S", "PG?sslmode=disable&passwrod=S",
		"PG?sslmode=disable&Pasword=S", "PG?pasword=S&sslmode=disable", "PG?sslmode=disable&pssword=S",
		"PG?sslmode=disable&sslpassowrd=S")
	add("LEASEHOLD_TEST_REDIS",
		"RD?pasword=S", "RD?passwrod=S", "RD?sentinel_pasword=S", "RD?sentinel_passwrd=S",
		"RD?holdback=1s&Pasword=S", "RDPW?pasword=S")
	add("LEASEHOLD_TEST_REDIS",
		"redis+sentinel://HOST/lh?sentinel_pasword=S", "redis+sentinel://HOST/lh?sentinel_passwrod=S",
		"redis+sentinel://HOST/lh?pasword=S", "redis+sentinel://HOST/lh?sentinelpassword=S")
	add("LEASEHOLD_TEST_ETCD", "ET?pasword=S", "ET?passwd=S", "ET?pwd=S", "ET?tokne=S", "ET?secert=S")
	add("LEASEHOLD_TEST_DYNAMODB", "DY&aws_secret_acess_key=S", "DY&aws_secert_access_key=S", "DY&aws_sesion_token=S")
	for _, f := range forms {
		u := engine(f.env)
		host := strings.TrimPrefix(base(u), "redis://")
		host, _, _ = strings.Cut(host, "/")
		raw := strings.NewReplacer(
			"PG", base(u), "RDPW", "redis://:pw-"+secret+"@"+host+"/0", "RD", base(u), "HOST", host,
			"ET", base(u), "DY", u, "=S", "="+secret,
		).Replace(f.url)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := stores.Open(ctx, raw)
		cancel()
		if err == nil {
			s.Close()
			t.Errorf("Open(%s): no error, want the parameter refused", redact.URL(raw))
			continue
		}
		if !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("Open(%s): %v, want ErrInvalid", redact.URL(raw), err)
		}
		shown := "open store " + redact.URL(raw) + ": " + err.Error()
		if strings.Contains(shown, secret) {
			t.Errorf("the secret shows: %s", shown)
		}
	}
}
