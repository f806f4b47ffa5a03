package storekit_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

func TestValidators(t *testing.T) {
	long := strings.Repeat("n", leasehold.MaxNameLen+1)
	cases := []struct {
		name  string
		err   error
		field string // "" for valid
	}{
		{"name ok", storekit.ValidateName("jobs/nightly"), ""},
		{"name empty", storekit.ValidateName(""), "name"},
		{"name long", storekit.ValidateName(long), "name"},
		{"name control", storekit.ValidateName("a\nb"), "name"},
		{"name utf8", storekit.ValidateName("a\xffb"), "name"},
		{"prefix empty", storekit.ValidatePrefix(""), ""},
		{"prefix long", storekit.ValidatePrefix(long), "prefix"},
		{"owner empty", storekit.ValidateOwner(""), "owner"},
		{"request id empty", storekit.ValidateRequestID(""), ""},
		{"request id long", storekit.ValidateRequestID(strings.Repeat("r", leasehold.MaxRequestIDLen+1)), "request id"},
		{"ttl short", storekit.ValidateTTL(leasehold.MinTTL - 1), "ttl"},
		{"ttl max", storekit.ValidateTTL(leasehold.MaxTTL), ""},
		{"ttl long", storekit.ValidateTTL(leasehold.MaxTTL + time.Nanosecond), "ttl"},
		{"data max", storekit.ValidateData(make([]byte, leasehold.MaxDataLen)), ""},
		{"data big", storekit.ValidateData(make([]byte, leasehold.MaxDataLen+1)), "data"},
		{"token 0", storekit.ValidateToken(0), "token"},
		{"token 1", storekit.ValidateToken(1), ""},
		{"holder ok", storekit.ValidateHolder("n", "o", 1), ""},
		{"holder owner", storekit.ValidateHolder("n", "", 1), "owner"},
		{"holder token", storekit.ValidateHolder("n", "o", 0), "token"},
		{"key empty", storekit.ValidateKey(""), "key"},
		{"value big", storekit.ValidateValue(make([]byte, leasehold.MaxValueLen+1)), "value"},
		{"renew ok", storekit.ValidateRenew("n", "o", 1, time.Minute), ""},
		{"renew token first", storekit.ValidateRenew("n", "o", 0, 0), "token"},
		{"renew ttl", storekit.ValidateRenew("n", "o", 1, 0), "ttl"},
		{"put ok", storekit.ValidatePut("k", nil), ""},
		{"put key first", storekit.ValidatePut("", make([]byte, leasehold.MaxValueLen+1)), "key"},
		{"put value", storekit.ValidatePut("k", make([]byte, leasehold.MaxValueLen+1)), "value"},
	}
	for _, c := range cases {
		if c.field == "" {
			if c.err != nil {
				t.Errorf("%s: %v, want nil", c.name, c.err)
			}
			continue
		}
		var ie *leasehold.InvalidError
		if !errors.As(c.err, &ie) || !errors.Is(c.err, leasehold.ErrInvalid) || ie.Field != c.field {
			t.Errorf("%s: %v, want an *InvalidError for %q", c.name, c.err, c.field)
		}
	}
}

func TestCounter(t *testing.T) {
	if n, err := storekit.ParseCounter("c", []byte("-42")); n != -42 || err != nil {
		t.Errorf("ParseCounter(-42) = %d, %v", n, err)
	}
	if _, err := storekit.ParseCounter("c", []byte("x")); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("ParseCounter(x) = %v, want ErrInvalid", err)
	}
	if n, err := storekit.AddInt64("c", 40, 2); n != 42 || err != nil {
		t.Errorf("AddInt64(40, 2) = %d, %v", n, err)
	}
	if _, err := storekit.AddInt64("c", math.MaxInt64, 1); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("AddInt64 overflow = %v, want ErrInvalid", err)
	}
	if _, err := storekit.AddInt64("c", math.MinInt64, -1); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("AddInt64 underflow = %v, want ErrInvalid", err)
	}
}
