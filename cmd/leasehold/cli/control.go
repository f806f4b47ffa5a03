package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// Early release. "leasehold release" in a command that "run" or "elect"
// started, releasing that command's own grant, asks the run to release it
// through a socket (named in LEASEHOLD_CONTROL, in a directory only its
// user can enter): the run releases the lease, stops enforcing it (no
// SIGTERM, no kill at its deadline, the keeper is given none) and waits
// for the command, whose status it then exits with. Released in the store
// behind the run's back, the lease would be found lost at the next renewal
// and the command stopped (exit 76).

// envControl names the run's control socket for its command.
const envControl = "LEASEHOLD_CONTROL"

// releaseRequest is a command's request to release the run's grant.
type releaseRequest struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Token uint64 `json:"token"`
	reply chan error
}

// controlReply is the run's answer: empty Error when released.
type controlReply struct {
	Error string `json:"error,omitempty"`
	// NotHeld says the grant was not the run's or no longer held.
	NotHeld bool `json:"not_held,omitempty"`
}

// controlTimeout bounds a conversation on the control socket.
const controlTimeout = 30 * time.Second

// ownGrant says whether (name, owner, token) is the grant of the run that
// started this process, from the variables run set, and returns its
// control socket.
func ownGrant(name, owner string, token uint64) (string, bool) {
	path := os.Getenv(envControl)
	tok, err := strconv.ParseUint(os.Getenv("LEASEHOLD_TOKEN"), 10, 64)
	if path == "" || err != nil || tok != token || owner != os.Getenv("LEASEHOLD_OWNER") {
		return "", false
	}
	return path, name == os.Getenv("LEASEHOLD_NAME") || name == os.Getenv("LEASEHOLD_PERMIT")
}

// askRun asks the run listening at path to release its grant. handled is
// false when no run answered (it has ended): the caller then releases in
// the store itself.
func askRun(path, name, owner string, token uint64) (handled bool, err error) {
	conn, err := net.DialTimeout("unix", path, controlTimeout)
	if err != nil {
		return false, nil
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(controlTimeout))
	if err := json.NewEncoder(conn).Encode(releaseRequest{Name: name, Owner: owner, Token: token}); err != nil {
		return false, nil
	}
	var rep controlReply
	if err := json.NewDecoder(io.LimitReader(conn, 64<<10)).Decode(&rep); err != nil {
		return false, nil
	}
	switch {
	case rep.NotHeld:
		// rep.Error says "lease not held: ..." already; said twice
		// before (issue 29's red team, #13).
		return true, fmt.Errorf("%w: %s", leasehold.ErrNotHeld, strings.TrimPrefix(rep.Error, leasehold.ErrNotHeld.Error()+": "))
	case rep.Error != "":
		return true, errors.New(rep.Error)
	}
	return true, nil
}

// control is a run's control socket.
type control struct {
	dir  string
	ln   net.Listener
	reqs chan releaseRequest
	done chan struct{}
}

// startControl listens on a socket in a new directory of mode 0700, in
// TMPDIR, or else in /tmp: a Unix socket's path has room for about 107
// bytes, and with a longer TMPDIR (75 bytes or more) the socket could not
// be made and LEASEHOLD_CONTROL was left out without a word (the red team
// of 2026-12-06); a TMPDIR that is missing or unwritable falls back too.
// The path is absolute: a relative TMPDIR gave the command a relative
// LEASEHOLD_CONTROL, which a command that changed its directory could not
// reach, so its release went to the store and run called the lease lost
// (the red team's second look).
func startControl() (*control, error) {
	tmp := os.TempDir()
	if abs, err := filepath.Abs(tmp); err == nil {
		tmp = abs
	}
	parents := []string{tmp}
	if tmp != "/tmp" {
		parents = append(parents, "/tmp")
	}
	var why []string
	for _, parent := range parents {
		c, err := listenControl(parent)
		if err == nil {
			return c, nil
		}
		why = append(why, err.Error())
	}
	// On one line: errors.Join's newline split run's warning in two.
	return nil, errors.New(strings.Join(why, "; "))
}

// listenControl makes the control socket in a new directory in parent.
func listenControl(parent string) (*control, error) {
	dir, err := os.MkdirTemp(parent, "leasehold-run-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", dir+string(os.PathSeparator)+"control")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &control{dir: dir, ln: ln, reqs: make(chan releaseRequest), done: make(chan struct{})}
	go c.serve()
	return c, nil
}

// path is the socket's path, for LEASEHOLD_CONTROL.
func (c *control) path() string { return c.ln.Addr().String() }

func (c *control) serve() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		go c.handle(conn)
	}
}

func (c *control) handle(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(controlTimeout))
	var req releaseRequest
	if err := json.NewDecoder(io.LimitReader(conn, 64<<10)).Decode(&req); err != nil {
		return
	}
	req.reply = make(chan error, 1)
	err := errors.New("the run is ending")
	select {
	case c.reqs <- req:
		select {
		case err = <-req.reply:
		case <-c.done:
		}
	case <-c.done:
	}
	rep := controlReply{}
	if err != nil {
		rep.Error, rep.NotHeld = err.Error(), errors.Is(err, leasehold.ErrNotHeld)
	}
	_ = json.NewEncoder(conn).Encode(rep)
}

// close stops listening and removes the socket's directory.
func (c *control) close() {
	close(c.done)
	c.ln.Close()
	os.RemoveAll(c.dir)
}
