//go:build linux

package main

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// TestWaitLineTerminal runs a waiting "leasehold run" on a terminal: its
// status line, redrawn in place, names the holder with token, since and
// time left (with --permits: every holder); once the holders let go, run
// gets the lease, runs its command and exits 0.
func TestWaitLineTerminal(t *testing.T) {
	store, _ := newStore(t)
	cases := []struct {
		name  string
		holds [][]string // "hold" arguments
		run   []string   // run's extra flags
		want  string
	}{
		{"single", [][]string{{"--owner", "tester/1", "wl/a"}}, nil,
			"\r\x1b[Kwaiting for wl/a (held by tester/1, token 1, since "},
		{"permits", [][]string{{"--owner", "A", "--permits", "2", "wl/pool"}, {"--owner", "B", "--permits", "2", "wl/pool"}}, []string{"--permits", "2"},
			"\r\x1b[Kwaiting for wl/pool (2/2 permits held by "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var holders []*holder
			for _, args := range c.holds {
				holders = append(holders, startHold(t, store, args...))
			}
			name := c.holds[0][len(c.holds[0])-1]
			p := openPTY(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := append([]string{"run", "-w", "50s", "--store", store}, c.run...)
			cmd := leasehold(ctx, append(args, name, "--", "sh", "-c", "echo ran")...)
			p.start(cmd)
			at := p.expect(0, c.want)
			at = p.expect(at, ", expires in ")
			if c.name == "permits" {
				// Both owners, in permit order, whichever took which.
				at = p.expect(at, ": token 1, since ")
				at = p.expect(at, ": token 1, since ")
			}
			// Redrawn in place (every second) while it waits.
			p.expect(at, c.want)
			for _, h := range holders {
				_ = h.cmd.Process.Signal(syscall.SIGTERM)
				if code := h.wait(t); code != 0 {
					t.Errorf("hold after SIGTERM: exit %d", code)
				}
			}
			if code := exitCode(cmd.Wait()); code != 0 {
				t.Errorf("run: exit %d; terminal:\n%q", code, p.output())
			}
			p.expect(at, "ran")
		})
	}
}
