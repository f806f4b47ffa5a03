package resp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestRepliesOrder: replies built concurrently, finishing in any order,
// are written in the order queued; commands with the same key run one
// after another in that order.
func TestRepliesOrder(t *testing.T) {
	pr, pw := io.Pipe()
	r := NewReplies(pw, 64, NewWorkers(), func() { t.Error("write failed") })
	go func() { r.Run(); pw.Close() }()
	const n = 500
	var mu sync.Mutex
	ran := map[string][]int{}
	go func() {
		for i := 0; i < n; i++ {
			switch {
			case i%10 == 0:
				r.Now(func(b []byte) []byte { return AppendInt(b, int64(i)) })
			default:
				key := ""
				if i%3 == 0 {
					key = fmt.Sprint("k", i%2)
				}
				r.Async(key, i%7 == 0, func(b []byte) []byte {
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					if key != "" {
						mu.Lock()
						ran[key] = append(ran[key], i)
						mu.Unlock()
					}
					return AppendInt(b, int64(i))
				})
			}
		}
		if !r.Push(context.Background(), func(b []byte) []byte { return AppendInt(b, n) }) {
			t.Error("Push refused")
		}
		r.Close()
		if r.Push(context.Background(), func(b []byte) []byte { return AppendInt(b, -1) }) {
			t.Error("Push after Close succeeded")
		}
	}()
	rd := NewReader(bufio.NewReader(pr))
	for i := 0; i < n; i++ {
		v, err := rd.ReadValue()
		if err != nil || v.Int != int64(i) {
			t.Fatalf("reply %d: %v, %v", i, show(v), err)
		}
	}
	if v, err := rd.ReadValue(); err != nil || v.Int != n {
		t.Errorf("pushed reply: %v, %v", show(v), err)
	}
	if _, err := rd.ReadValue(); err != io.EOF {
		t.Errorf("after Close: %v, want EOF", err)
	}
	for key, order := range ran {
		for j := 1; j < len(order); j++ {
			if order[j] < order[j-1] {
				t.Errorf("key %s ran %v, out of order", key, order)
				break
			}
		}
	}
}
