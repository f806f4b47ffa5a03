package wrappers

import (
	"bytes"
	"io"
	"os"
	"sync"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// tailer follows the heartbeat log while a run goes on, so that the fault
// injector can aim at supervisors whose commands run.
type tailer struct {
	path string

	mu   sync.Mutex
	last map[string]Record // supervisor → its latest record
}

func newTailer(path string) *tailer { return &tailer{path: path, last: map[string]Record{}} }

// run follows the log every 20 ms until the returned function is called
// (once or more).
func (t *tailer) run() (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		var off int64
		var rest []byte
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			f, err := os.Open(t.path)
			if err != nil {
				continue
			}
			if _, err := f.Seek(off, io.SeekStart); err != nil {
				f.Close()
				continue
			}
			buf, _ := io.ReadAll(f)
			f.Close()
			off += int64(len(buf))
			buf = append(rest, buf...)
			i := bytes.LastIndexByte(buf, '\n')
			if i < 0 {
				rest = buf
				continue
			}
			rest = append([]byte(nil), buf[i+1:]...)
			t.mu.Lock()
			for _, line := range bytes.Split(buf[:i], []byte{'\n'}) {
				if r, ok := parseRecord(string(line)); ok && r.T >= t.last[r.Sup].T {
					t.last[r.Sup] = r
				}
			}
			t.mu.Unlock()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-exited }) }
}

// holders returns the supervisors whose commands wrote a record within
// window, with the lease each holds.
func (t *tailer) holders(window time.Duration) map[string]string {
	now := verify.Mono()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]string{}
	for sup, r := range t.last {
		if r.Kind != 'E' && now-r.T <= int64(window) {
			out[sup] = r.Lease
		}
	}
	return out
}

// latest returns the latest record of supervisor sup's commands.
func (t *tailer) latest(sup string) (Record, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.last[sup]
	return r, ok
}
