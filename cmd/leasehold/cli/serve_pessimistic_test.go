package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/workflow"
)

// TestServePessimisticOnPostgres (issue 28, finding 3): `serve --store
// postgres://... --workflows` with "strategy":"pessimistic" serves the
// row-locking Pessimistic strategy (a killed server's lock ends with its
// connection), as the library does on PostgreSQL. Before, the proxy's
// records took no row locks: it silently served a lease (a killed server
// stalled the instance for lease_ttl). Where there are no row locks (the
// in-process engine), it is still a lease, and serve names the definition
// in a startup warning.
func TestServePessimisticOnPostgres(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.Open(ctx, enginetest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := server.NewProxy(st, server.ProxyConfig{})
	defer proxy.Close()
	name := "pess" + randid.Hex(4)
	path := filepath.Join(t.TempDir(), "wf.json")
	body := `{"workflows":[{"name":"` + name + `","initial":"A","transitions":{"A":["B"]},"strategy":"pessimistic"}]}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	flows, err := loadWorkflows(path, proxy, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := flows[name]
	if got := w.Serves(); got != workflow.Pessimistic {
		t.Fatalf("over a PostgreSQL store, pessimistic is served as %s", got)
	}
	if names := leaseInsteadOfPessimistic(flows); len(names) != 0 {
		t.Errorf("warned about %v over PostgreSQL", names)
	}
	if _, err := w.Create(ctx, "i"); err != nil {
		t.Fatal(err)
	}
	r, err := w.Transition(ctx, "i", "A", "B", "ann", "r1")
	if err != nil || r.Outcome != workflow.Applied || r.Strategy != workflow.Pessimistic {
		t.Fatalf("transition: %+v, %v; want applied by pessimistic", r, err)
	}

	eng, err := server.OpenEngine(server.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	flows, err = loadWorkflows(path, eng, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := flows[name].Serves(); got != workflow.Lease {
		t.Fatalf("over the engine, pessimistic is served as %s, want lease", got)
	}
	if names := leaseInsteadOfPessimistic(flows); !slices.Equal(names, []string{name}) {
		t.Errorf("the startup warning names %v, want [%s]", names, name)
	}
}
