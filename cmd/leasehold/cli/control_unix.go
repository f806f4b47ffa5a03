//go:build unix

package cli

import (
	"bytes"
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// control is the keeper's end of the control pipe, read without blocking
// and only by the keeper's own goroutine, so that every decision on the
// deadline is taken on every line the supervisor has written by then.
//
// A reader goroutine that blocks in read(2) and hands each line over
// would let the keeper judge a deadline while a newer one sits in the pipe
// or in that goroutine: a keeper that starts slowly (its exec and runtime
// start on a starved machine) read the first deadline after the lease had
// been renewed, found it passed and refused to start the command; a keeper
// whose timer and newer line came at once chose between them at random.
// Here a goroutine only waits for the pipe to become readable (poll(2))
// and says so; the keeper drains it itself.
type control struct {
	fd     int
	buf    []byte        // a line not yet complete
	wake   chan struct{} // the pipe is readable (data, or its end)
	ack    chan struct{} // the keeper drained it: watch polls again
	closed bool          // end of file, a read error or a bad line: the supervisor is gone
}

// newControl reads fd, the read end of the control pipe.
func newControl(fd int) (*control, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	c := &control{fd: fd, wake: make(chan struct{}), ack: make(chan struct{}, 1)}
	go c.watch()
	return c, nil
}

// watch sends to wake each time the pipe is readable, then waits for the
// keeper to drain it (ack) before it polls again.
func (c *control) watch() {
	fds := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			// Cannot poll: wake the keeper every tick instead.
			time.Sleep(keeperTick)
		}
		c.wake <- struct{}{}
		<-c.ack
	}
}

// woken drains the pipe after a wake and lets watch poll again (not once
// the pipe is closed: nothing more can come, and the keeper stops
// listening).
func (c *control) woken() (hostTime, bool) {
	d, ok := c.drain()
	if !c.closed {
		c.ack <- struct{}{}
	}
	return d, ok
}

// drain reads everything the pipe holds now, without waiting, and returns
// the latest deadline among the complete lines read (ok false if none).
func (c *control) drain() (latest hostTime, ok bool) {
	var b [512]byte
	for !c.closed {
		n, err := unix.Read(c.fd, b[:])
		if n > 0 {
			c.buf = append(c.buf, b[:n]...)
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		c.closed = true // end of file (n == 0), or an error
	}
	for {
		i := bytes.IndexByte(c.buf, '\n')
		if i < 0 {
			break
		}
		d, err := parseDeadline(string(c.buf[:i+1]))
		c.buf = c.buf[i+1:]
		if err != nil {
			c.closed = true
			break
		}
		latest, ok = d, true
	}
	return latest, ok
}

// first waits for the first deadline and returns the latest one written
// by the time it has one (ok false if the pipe closed first).
func (c *control) first() (hostTime, bool) {
	d, ok := c.drain()
	for !ok && !c.closed {
		<-c.wake
		d, ok = c.woken()
	}
	return d, ok
}

// newest returns latest, or a newer deadline the supervisor has written
// since, read now: call it before acting on a deadline that has passed.
// (Check closed afterwards.)
func (c *control) newest(latest hostTime) hostTime {
	if d, ok := c.drain(); ok {
		return d
	}
	return latest
}
