package serverbench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/server"
)

// ScaleResult is what MeasureScale saw.
type ScaleResult struct {
	Leases        int
	AcquireTime   time.Duration // to grant all of them, durable, with 64 concurrent callers
	HeapPerLease  float64       // bytes of live heap per held lease (after GC)
	HeapTotal     uint64
	RSS           uint64 // resident set of the whole process with the leases held (Linux; 0 elsewhere)
	SnapshotBytes int64
	RestartTime   time.Duration // to reopen the engine and recover every lease
	RestartCPU    time.Duration // CPU time the process used meanwhile (Linux; 0 elsewhere)
	Recovered     int
}

func (r ScaleResult) String() string {
	return fmt.Sprintf("%d leases: granted in %s; heap %.0f B/lease (%.0f MB), process RSS %.0f MB; restart %s, %s of CPU (%d recovered)",
		r.Leases, r.AcquireTime.Round(time.Millisecond), r.HeapPerLease, float64(r.HeapTotal)/1e6, float64(r.RSS)/1e6,
		r.RestartTime.Round(time.Millisecond), r.RestartCPU.Round(time.Millisecond), r.Recovered)
}

// MeasureScale fills a durable lease server engine in dir with n held
// leases (names like "scale/000123", owners "owner-N", TTL 1 h), measures
// the live heap they take, closes the engine and measures how long
// reopening takes.
func MeasureScale(ctx context.Context, dir string, n int) (ScaleResult, error) {
	res := ScaleResult{Leases: n}
	heap0 := liveHeap()
	e, err := server.OpenEngine(server.EngineConfig{Dir: dir})
	if err != nil {
		return res, err
	}
	start := time.Now()
	const workers = 64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				_, err := e.Acquire(ctx, server.AcquireRequest{AcquireRequest: leasehold.AcquireRequest{
					Name: "scale/" + strconv.Itoa(i), Owner: "owner-" + strconv.Itoa(i%1000), TTL: time.Hour}})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		e.Close()
		return res, err
	}
	res.AcquireTime = time.Since(start)
	heap1 := liveHeap()
	res.HeapTotal = heap1 - min(heap0, heap1)
	res.HeapPerLease = float64(res.HeapTotal) / float64(n)
	res.RSS = rss()
	if err := e.Close(); err != nil {
		return res, err
	}
	start, cpu := time.Now(), cpuTime()
	e, err = server.OpenEngine(server.EngineConfig{Dir: dir})
	if err != nil {
		return res, err
	}
	res.RestartTime, res.RestartCPU = time.Since(start), cpuTime()-cpu
	res.Recovered = e.Stats().Held
	return res, e.Close()
}

func liveHeap() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// rss reads the process's resident set size from /proc (0 if unavailable).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}
