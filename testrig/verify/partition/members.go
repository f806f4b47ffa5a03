package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Members asks the members of an etcd cluster for their status through
// etcd's gRPC gateway (POST /v3/maintenance/status on the client port):
// whom each takes for leader, in which raft term. A Cluster has one; so
// may a cluster of members on loopback (NewMembers with a nil dial).
type Members struct {
	Addrs []string // each member's client address, host:port
	Names []string // for messages
	http  *http.Client

	mu  sync.Mutex
	ids map[string]int // member id → index
}

// NewMembers returns the Members at addrs (host:port), named names,
// reached through dial (nil: the test process's own network).
func NewMembers(addrs, names []string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Members {
	tr := &http.Transport{DisableKeepAlives: true}
	if dial != nil {
		tr.DialContext = dial
	}
	return &Members{Addrs: addrs, Names: names, ids: map[string]int{},
		http: &http.Client{Timeout: time.Second, Transport: tr}}
}

// Endpoints are the members' client addresses, for an etcd store URL.
func (c *Members) Endpoints() []string { return append([]string(nil), c.Addrs...) }

// Status is what one member says of itself.
type Status struct {
	Member   int // index in Addrs
	ID       string
	LeaderID string
	Term     uint64
}

// Status asks member i for its status.
func (c *Members) Status(i int) (Status, error) {
	resp, err := c.http.Post("http://"+c.Addrs[i]+"/v3/maintenance/status", "application/json", strings.NewReader("{}"))
	if err != nil {
		return Status{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return Status{}, fmt.Errorf("etcd %s status: %s: %s", c.Names[i], resp.Status, b)
	}
	var body struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
		Leader   string `json:"leader"`
		RaftTerm string `json:"raftTerm"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return Status{}, err
	}
	term, _ := strconv.ParseUint(body.RaftTerm, 10, 64)
	c.mu.Lock()
	c.ids[body.Header.MemberID] = i
	c.mu.Unlock()
	return Status{Member: i, ID: body.Header.MemberID, LeaderID: body.Leader, Term: term}, nil
}

// statuses asks every member at once; a member that does not answer in
// time (down, cut off from the client, or from a quorum) is left out.
func (c *Members) statuses() []Status {
	out := make([]*Status, len(c.Addrs))
	var wg sync.WaitGroup
	for i := range c.Addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, err := c.Status(i); err == nil {
				out[i] = &st
			}
		}()
	}
	wg.Wait()
	var sts []Status
	for _, st := range out {
		if st != nil {
			sts = append(sts, *st)
		}
	}
	return sts
}

// Leader returns the index of the member that every member that answers
// names as leader, or an error if they do not agree or none answers.
func (c *Members) Leader() (int, error) {
	leader, answered := "", 0
	for _, st := range c.statuses() {
		answered++
		if st.LeaderID == "" || st.LeaderID == "0" || (leader != "" && st.LeaderID != leader) {
			return -1, errors.New("no agreed leader")
		}
		leader = st.LeaderID
	}
	if answered == 0 {
		_, err := c.Status(0)
		return -1, fmt.Errorf("no member answered (%s: %v)", c.Names[0], err)
	}
	c.mu.Lock()
	i, ok := c.ids[leader]
	c.mu.Unlock()
	if !ok {
		return -1, fmt.Errorf("leader %s is not among the members that answered", leader)
	}
	return i, nil
}

// Term returns the highest raft term that a member that answers reports,
// or 0 if none answers, and how many answered. (etcd 3.4's status reports
// the term of a leader once the member has applied that leader's first
// entry: a member cut off from the others, campaigning in ever higher
// terms, keeps reporting the term it last applied.)
func (c *Members) Term() (term uint64, answered int) {
	for _, st := range c.statuses() {
		term = max(term, st.Term)
		answered++
	}
	return term, answered
}
