package wal

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	acked := make(map[string]bool)
	for round := range 4 {
		cmd := exec.Command(exe, "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "WAL_CRASH_DIR="+dir, "WAL_CRASH_ROUND="+strconv.Itoa(round))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n, killed := 0, false
		var other []string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			id, ok := strings.CutPrefix(sc.Text(), "ack ")
			if !ok {
				other = append(other, sc.Text())
				continue
			}
			acked[id] = true
			n++
			// Kill at a different point each round.
			if !killed && n >= 1500+700*round {
				cmd.Process.Kill()
				killed = true
			}
		}
		err = cmd.Wait()
		if !killed {
			t.Fatalf("round %d: child ended by itself (%v) after %d acks\n%s\n%s", round, err, n, strings.Join(other, "\n"), stderr.Bytes())
		}

		state := make(map[string]bool)
		l, err := Open(Options{Dir: dir, SegmentSize: crashSegmentSize},
			func(r io.Reader) error { return readState(r, state) },
			func(rec []byte) error { state[string(rec)] = true; return nil })
		if err != nil {
			t.Fatalf("round %d: Open after kill: %v", round, err)
		}
		closeLog(t, l)
		missing := 0
		for id := range acked {
			if !state[id] {
				if missing < 10 {
					t.Errorf("round %d: acknowledged record %s lost", round, id)
				}
				missing++
			}
		}
		if missing > 0 {
			t.Fatalf("round %d: %d of %d acknowledged records lost", round, missing, len(acked))
		}
		segs, snaps := files(t, dir)
		t.Logf("round %d: %d acks, %d records recovered, segments %v, snapshots %v", round, n, len(state), segs, snaps)
	}
}

const crashSegmentSize = 16 << 10

func readState(r io.Reader, state map[string]bool) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		state[sc.Text()] = true
	}
	return sc.Err()
}

// TestCrashChild is TestCrash's child process. It behaves like the
// server: state changes and Appends happen under one mutex, and a
// snapshot copies the state under it right after Rotate.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("WAL_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	round := os.Getenv("WAL_CRASH_ROUND")
	var mu sync.Mutex
	state := make(map[string]bool)
	// Odd rounds let two group commits sync at once.
	n, _ := strconv.Atoi(round)
	l, err := Open(Options{Dir: dir, SegmentSize: crashSegmentSize, Syncs: 1 + n%2},
		func(r io.Reader) error { return readState(r, state) },
		func(rec []byte) error { state[string(rec)] = true; return nil })
	if err != nil {
		t.Fatal(err)
	}

	snap := make(chan struct{}, 1)
	go func() {
		for range snap {
			mu.Lock()
			seq, err := l.Rotate()
			if err != nil {
				panic(err)
			}
			var buf bytes.Buffer
			for id := range state {
				buf.WriteString(id + "\n")
			}
			mu.Unlock()
			if err := l.WriteSnapshot(seq, func(w io.Writer) error {
				_, err := buf.WriteTo(w)
				return err
			}); err != nil {
				panic(err)
			}
		}
	}()

	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := make(chan error, 1)
			for i := range 1_000_000 {
				id := fmt.Sprintf("r%s-g%02d-%07d", round, g, i)
				mu.Lock()
				state[id] = true
				l.Append([]byte(id), func(err error) {
					if err == nil {
						os.Stdout.WriteString("ack " + id + "\n")
					}
					ch <- err
				})
				mu.Unlock()
				if err := <-ch; err != nil {
					panic(err)
				}
				if g == 0 && i%40 == 39 {
					select {
					case snap <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Error("not killed")
}

func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name   string
		noSync bool
		syncs  int
	}{{"durable/syncs=1", false, 1}, {"durable/syncs=2", false, 2}, {"durable/syncs=4", false, 4}, {"nosync", true, 1}} {
		for _, par := range []int{4, 16, 64} { // goroutines per CPU
			b.Run(fmt.Sprintf("%s/g=%d", bc.name, par*runtime.GOMAXPROCS(0)), func(b *testing.B) {
				var syncs, syncTime atomic.Int64
				l, _ := open(b, Options{
					Dir:    b.TempDir(),
					NoSync: bc.noSync,
					Syncs:  bc.syncs,
					OnSync: func(d time.Duration, _ int) { syncs.Add(1); syncTime.Add(int64(d)) },
				})
				defer l.Close()
				rec := bytes.Repeat([]byte("r"), 100)
				b.SetParallelism(par)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					ch := make(chan error, 1)
					done := func(err error) { ch <- err }
					for pb.Next() {
						l.Append(rec, done)
						if err := <-ch; err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
				commits := float64(max(syncs.Load(), 1))
				b.ReportMetric(float64(b.N)/commits, "records/commit")
				b.ReportMetric(float64(syncTime.Load())/commits/1e3, "µs/commit")
			})
		}
	}
}

// BenchmarkOpen measures recovery: replaying a log of 100-byte records.
func BenchmarkOpen(b *testing.B) {
	const n = 500_000
	opts := Options{Dir: b.TempDir()}
	l, _ := open(b, opts)
	rec := bytes.Repeat([]byte("r"), 100)
	for range n {
		l.Append(rec, nil)
	}
	if err := l.Sync(); err != nil {
		b.Fatal(err)
	}
	closeLog(b, l)
	b.ResetTimer()
	for b.Loop() {
		count := 0
		l, err := Open(opts, nil, func([]byte) error { count++; return nil })
		if err != nil {
			b.Fatal(err)
		}
		if count != n {
			b.Fatalf("replayed %d records, want %d", count, n)
		}
		b.StopTimer()
		closeLog(b, l)
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
