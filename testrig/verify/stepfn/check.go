package stepfn

import (
	"fmt"

	"github.com/leasehold/leasehold/testrig/verify"
)

// tokenOrder counts the critical sections (of any client: machines, Go
// workers, run commands) whose token is not above the token of every
// critical section that ended before they began — tokens must increase
// across all clients in real-time order. A section with the same token as
// the highest earlier one, of the same owner, is the same grant (a task
// retried within one execution) and is not counted.
func tokenOrder(evs []verify.Event) (int, string) {
	var cs []verify.Event
	for _, ev := range evs {
		if ev.E == "cs" && ev.Token > 0 {
			cs = append(cs, ev)
		}
	}
	owner := func(ev verify.Event) string {
		if ev.Owner != "" {
			return ev.Owner
		}
		return ev.Worker + "/" + ev.Proc
	}
	n, first := 0, ""
	// top: highest token among the sections ended so far.
	verify.AfterEnded(cs, func(c, top verify.Event) {
		if c.Token > top.Token || (c.Token == top.Token && owner(c) == owner(top)) {
			return
		}
		n++
		if first == "" {
			first = fmt.Sprintf("%s: %s/%s began with token %d after %s/%s had ended with token %d",
				c.Key, c.Worker, c.Proc, c.Token, top.Worker, top.Proc, top.Token)
		}
	})
	return n, first
}
