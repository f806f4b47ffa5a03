package stepfn

import (
	"fmt"
	"sort"

	"github.com/leasehold/leasehold/internal/verify"
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
	byTo := append([]verify.Event(nil), cs...)
	sort.Slice(byTo, func(i, j int) bool { return byTo[i].To < byTo[j].To })
	sort.Slice(cs, func(i, j int) bool { return cs[i].From < cs[j].From })
	n, first := 0, ""
	var top verify.Event // highest token among the sections ended so far
	j := 0
	for _, c := range cs {
		for j < len(byTo) && byTo[j].To < c.From {
			if byTo[j].Token > top.Token {
				top = byTo[j]
			}
			j++
		}
		if c.Token > top.Token || (c.Token == top.Token && owner(c) == owner(top)) {
			continue
		}
		n++
		if first == "" {
			first = fmt.Sprintf("%s: %s/%s began with token %d after %s/%s had ended with token %d",
				c.Key, c.Worker, c.Proc, c.Token, top.Worker, top.Proc, top.Token)
		}
	}
	return n, first
}
