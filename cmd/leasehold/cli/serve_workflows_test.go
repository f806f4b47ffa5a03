package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/server"
)

// TestLoadWorkflows: the --workflows file's lock_wait and lease_ttl are
// durations; anything else is refused with a message naming the field.
func TestLoadWorkflows(t *testing.T) {
	eng, err := server.OpenEngine(server.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	load := func(extra string) error {
		path := filepath.Join(t.TempDir(), "wf.json")
		body := `{"workflows":[{"name":"a","initial":"X","transitions":{"X":["Y"]},"strategy":"lease"` + extra + `}]}`
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := loadWorkflows(path, eng, nil)
		return err
	}
	if err := load(`,"lock_wait":"2s","lease_ttl":"30s"`); err != nil {
		t.Fatalf("valid file: %v", err)
	}
	for _, bad := range []string{`,"lock_wait":"soon"`, `,"lease_ttl":"-1s"`, `,"lease_ttl":"0s"`, `,"lease_ttl":"100h"`} {
		err := load(bad)
		if err == nil || !(strings.Contains(err.Error(), "lock_wait") || strings.Contains(err.Error(), "lease_ttl") || strings.Contains(err.Error(), "ttl")) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
