package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// durationValue is the one flag type of every duration flag of the CLI
// (--ttl, --grace, --wait, --connect-timeout, serve's and sfn's timeouts):
// seconds as flock(1) and the URLs' connect_timeout= take them ("30",
// "1.5", "1e1", "0x10") or a Go duration ("30s", "500ms", "10m"). Issue
// 29's red team: --ttl 30 was refused with "time: missing unit in
// duration", --connect-timeout 5 with "not a positive duration", while
// connect_timeout=5 in a URL meant 5 seconds.
type durationValue time.Duration

// durationFlag defines the duration flag name (default def) on f.
func durationFlag(f *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	f.Var((*durationValue)(p), name, usage+" (seconds or a duration: 30, 1.5, 90s)")
}

// String is "0" for zero, which help leaves out as pflag leaves out a
// zero time.Duration's default.
func (d *durationValue) String() string {
	if *d == 0 {
		return "0"
	}
	return time.Duration(*d).String()
}

func (d *durationValue) Type() string { return "duration" }

func (d *durationValue) Set(s string) error {
	v, err := parseSeconds(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// maxWaitSeconds is the longest plain number of seconds a duration flag
// takes (a time.Duration holds about 292 years).
const maxWaitSeconds = 9e9

// durationHint is how the errors of parseSeconds say what is wanted.
const durationHint = "a number of seconds (30, 1.5, 1e1) or a duration (90s, 10m)"

// parseSeconds reads a duration flag: a number of seconds as strtod(3)
// reads it for flock(1) (decimal, with an optional exponent, or
// hexadecimal: "2", "1.5", ".5", "1e0", "0x1"), else a Go duration.
// Negative values are read here; each flag's check refuses them where
// they make no sense. inf, nan and numbers above maxWaitSeconds are
// refused.
func parseSeconds(s string) (time.Duration, error) {
	num := strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if num != "" && (num[0] == '.' || num[0] >= '0' && num[0] <= '9') && !strings.ContainsAny(num, "_") {
		text := num
		if l := strings.ToLower(num); strings.HasPrefix(l, "0x") && !strings.Contains(l, "p") {
			text += "p0" // strtod's hexadecimal needs no binary exponent; Go's does
		}
		if secs, err := strconv.ParseFloat(text, 64); err == nil {
			if secs > maxWaitSeconds {
				return 0, fmt.Errorf("%q is more seconds than the most taken, %.0f", s, float64(maxWaitSeconds))
			}
			d := time.Duration(math.Round(secs * float64(time.Second)))
			if strings.HasPrefix(s, "-") {
				d = -d
			}
			return d, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not %s", s, durationHint)
	}
	return d, nil
}
