package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestUsage: the command line of the bench command, without engines:
// help lists every suite, a wrong command line exits 2, and a suite that
// cannot run its reference fails (exit 1) in a smoke run.
func TestUsage(t *testing.T) {
	off := []string{"--memory", "off", "--sqlite", "off", "--redis", "off", "--postgres", "off", "--etcd", "off", "--dynamodb", "off"}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "suites:"},
		{[]string{"help"}, 0, "workflow flags:"},
		{[]string{"server", "--help"}, 0, "--leases"},
		{nil, 2, "name a suite"},
		{[]string{"nosuch"}, 2, `unknown suite "nosuch"`},
		{[]string{"all", "--clients", "2"}, 2, "all takes no flags but --smoke"},
		{[]string{"stores", "extra"}, 2, "unexpected arguments"},
		{append([]string{"stores"}, off...), 1, "no engine given"},
		{[]string{"--smoke", "stores", "--redis", "off"}, 1, "no Redis: the smoke run measures every engine"},
		{[]string{"server", "--smoke", "--redis", "off"}, 1, "the smoke run measures the server beside both references"},
		{[]string{"server", "--smoke", "--redis-server", "off"}, 1, "no redis-server (--redis-server)"},
		{[]string{"--smoke", "workflow", "--redis", "redis://127.0.0.1:1/0", "--postgres", "off"}, 1, "no PostgreSQL"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), c.args, &out, &errOut)
		if code != c.code || !strings.Contains(out.String()+errOut.String(), c.want) {
			t.Errorf("%q: exit %d (want %d), output lacks %q:\n%s%s", c.args, code, c.code, c.want, out.String(), errOut.String())
		}
	}
}
