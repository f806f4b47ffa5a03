package dynamodb

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/leasehold/leasehold"
)

type parsedURL struct {
	table, region, endpoint string
	opts                    []Option
}

func parseURL(raw string) (parsedURL, error) {
	var p parsedURL
	bad := func(format string, args ...any) (parsedURL, error) {
		return p, &leasehold.InvalidError{Field: "dynamodb URL", Reason: fmt.Sprintf(format, args...)}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("%s", err.Error())
	}
	switch {
	case u.Scheme != "dynamodb":
		return bad("want dynamodb://TABLE[?region=...&endpoint=...]")
	case u.Opaque != "" || u.User != nil || u.Port() != "" || (u.Path != "" && u.Path != "/") || u.Fragment != "":
		return bad("want dynamodb://TABLE[?param=value&...], with no user, port, path or fragment")
	}
	p.table = u.Host
	if err := ValidateTable(p.table); err != nil {
		return p, err
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %s", err.Error())
	}
	for k, v := range q {
		if len(v) != 1 {
			return bad("%s= given %d times", k, len(v))
		}
		val := v[0]
		boolean := func(set func(bool) Option) error {
			b, err := strconv.ParseBool(val)
			if err != nil {
				return &leasehold.InvalidError{Field: "dynamodb URL", Reason: fmt.Sprintf("%s=%q is not true or false", k, val)}
			}
			p.opts = append(p.opts, set(b))
			return nil
		}
		switch k {
		case "region":
			if !regionRE.MatchString(val) {
				return bad("region=%q is not a region name", val)
			}
			p.region = val
		case "endpoint":
			e, err := url.Parse(val)
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil || e.RawQuery != "" || e.Fragment != "" {
				return bad("endpoint=%q: want http(s)://host[:port]", val)
			}
			p.endpoint = val
		case "max_clock_skew":
			d, err := time.ParseDuration(val)
			if err != nil {
				return bad("max_clock_skew=%q: %s", val, err.Error())
			}
			p.opts = append(p.opts, WithMaxClockSkew(d))
		case "consistent":
			err = boolean(WithConsistentReads)
		case "create":
			err = boolean(WithCreateTable)
		case "ttl_cleanup":
			err = boolean(WithTTLCleanup)
		case "condition_values":
			err = boolean(WithConditionFailureValues)
		case "one_write_region":
			err = boolean(WithOneWriteRegion)
		default:
			return bad("unknown parameter %q (known: region, endpoint, max_clock_skew, consistent, create, ttl_cleanup, condition_values, one_write_region)", k)
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

var regionRE = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)
