package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/storetest"
)

func TestRecords(t *testing.T) {
	storetest.RunRecords(t, storetest.RecordsHarness{
		Open: func(t testing.TB) leasehold.RecordStore {
			return open(t, filepath.Join(t.TempDir(), "records.db"))
		},
		Txn: true,
	})
}

// TestRecordsTwoOpeners checks histories whose operations alternate
// between two Stores on one file.
func TestRecordsTwoOpeners(t *testing.T) {
	s1, s2 := twoOpeners(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res := storetest.CheckRecordHistories(ctx, storetest.AlternateRecords(s1, s2), storetest.RecordHistoryConfig{Histories: 20})
	t.Logf("linearizability: %s", res)
	if !res.Passed() {
		t.Errorf("histories not linearizable: %s\n%s", res, res.FirstBad)
	}
}

// The child processes of TestRecordsAcrossProcesses run recordsChild.
const childEnv = "LEASEHOLD_SQLITE_RECORDS_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		if err := recordsChild(path, os.Getenv(childEnv+"_ID")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const (
	childAdds      = 60
	childUpdates   = 15
	childTransfers = 16 // even: each child ends where it began
)

// recordsChild adds to a shared counter, increments another with Update,
// and moves money between two accounts with transactions, each writing an
// order record.
func recordsChild(path, id string) error {
	s, err := sqlite.Open(path)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := 0; i < childAdds; i++ {
		if _, _, err := s.AddCounter(ctx, "adds", 1); err != nil {
			return fmt.Errorf("add: %w", err)
		}
	}
	for i := 0; i < childUpdates; i++ {
		_, err := leasehold.Update(ctx, s, "updates", func(old []byte, exists bool) ([]byte, error) {
			n := int64(0)
			if exists {
				var err error
				if n, err = storekit.ParseCounter("updates", old); err != nil {
					return nil, err
				}
			}
			return []byte(strconv.FormatInt(n+1, 10)), nil
		}, leasehold.UpdateOptions{MaxAttempts: 10000, BackoffMax: 20 * time.Millisecond})
		if err != nil {
			return fmt.Errorf("update: %w", err)
		}
	}
	for i := 0; i < childTransfers; i++ {
		from, to := "acct/a", "acct/b"
		if i%2 == 1 {
			from, to = to, from
		}
		for {
			src, err := s.GetRecord(ctx, from)
			if err != nil {
				return err
			}
			_, err = s.Txn(ctx, leasehold.Txn{
				If: []leasehold.Condition{{Key: src.Key, Version: src.Version}},
				Then: []leasehold.Write{
					{Key: fmt.Sprintf("order/%s/%d", id, i), Value: []byte(from + "->" + to)},
					{Key: from, Add: -1}, {Key: to, Add: 1},
				},
			})
			if errors.Is(err, leasehold.ErrConflict) {
				continue
			}
			if err != nil {
				return fmt.Errorf("transfer: %w", err)
			}
			break
		}
	}
	return nil
}

// TestRecordsAcrossProcesses: processes sharing one file lose no add, no
// update and no transfer.
func TestRecordsAcrossProcesses(t *testing.T) {
	p := filepath.Join(t.TempDir(), "shared.db")
	s := open(t, p)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, k := range []string{"acct/a", "acct/b"} {
		if _, err := s.PutRecord(ctx, k, []byte("1000"), 0); err != nil {
			t.Fatal(err)
		}
	}
	const children = 3
	var wg sync.WaitGroup
	errs := make([]error, children)
	outs := make([][]byte, children)
	for c := 0; c < children; c++ {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+p, fmt.Sprintf("%s_ID=%d", childEnv, c))
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[c], errs[c] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for c, err := range errs {
		if err != nil {
			t.Fatalf("child %d: %v\n%s", c, err, outs[c])
		}
	}
	want := map[string]string{
		"adds":    strconv.Itoa(children * childAdds),
		"updates": strconv.Itoa(children * childUpdates),
		"acct/a":  "1000", "acct/b": "1000", // each child moves 1 back and forth, ending where it began
	}
	for k, v := range want {
		r, err := s.GetRecord(ctx, k)
		if err != nil || string(r.Value) != v {
			t.Errorf("%s = %q, %v; want %q", k, r.Value, err, v)
		}
	}
	for c := 0; c < children; c++ {
		for i := 0; i < childTransfers; i++ {
			if _, err := s.GetRecord(ctx, fmt.Sprintf("order/%d/%d", c, i)); err != nil {
				t.Errorf("order %d/%d: %v", c, i, err)
			}
		}
	}
}
