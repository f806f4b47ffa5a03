package wal_test

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/server/wal"
)

// A store keeps a set of names in memory and logs every addition.
type store struct {
	mu    sync.Mutex
	names map[string]bool
	log   *wal.Log
}

func openStore(dir string) (*store, error) {
	s := &store{names: make(map[string]bool)}
	load := func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			s.names[sc.Text()] = true
		}
		return sc.Err()
	}
	apply := func(rec []byte) error {
		s.names[string(rec)] = true
		return nil
	}
	l, err := wal.Open(wal.Options{Dir: dir, SegmentSize: 1 << 20}, load, apply)
	if err != nil {
		return nil, err
	}
	s.log = l
	return s, nil
}

// add records name and returns once the change is durable.
func (s *store) add(name string) error {
	done := make(chan error, 1)
	s.mu.Lock()
	s.names[name] = true
	s.log.Append([]byte(name), func(err error) { done <- err })
	s.mu.Unlock()
	return <-done
}

// snapshot writes the state, so that the log can drop what it covers.
func (s *store) snapshot() error {
	s.mu.Lock()
	seq, err := s.log.Rotate()
	var state strings.Builder
	for name := range s.names {
		state.WriteString(name + "\n")
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.log.WriteSnapshot(seq, func(w io.Writer) error {
		_, err := io.WriteString(w, state.String())
		return err
	})
}

func Example() {
	dir, err := os.MkdirTemp("", "wal-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := openStore(dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"alpha", "bravo"} {
		if err := s.add(name); err != nil {
			log.Fatal(err)
		}
	}
	if err := s.snapshot(); err != nil {
		log.Fatal(err)
	}
	if err := s.add("charlie"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("bytes logged since the snapshot:", s.log.Size())
	if err := s.log.Close(); err != nil {
		log.Fatal(err)
	}

	// Reopening loads the snapshot, then replays "charlie".
	s, err = openStore(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer s.log.Close()
	var names []string
	for name := range s.names {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Println(names)
	// Output:
	// bytes logged since the snapshot: 15
	// [alpha bravo charlie]
}
