package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestURLSettingsNotTypos: no setting of the engines' PostgreSQL, no
// libpq parameter and no parameter pgx takes is taken for a typo (each
// goes to pgx or to the server as before), and real settings in the URL
// still reach the server's sessions.
func TestURLSettingsNotTypos(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	base := enginetest.PostgresURL(t)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT name FROM pg_settings")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) < 100 {
		t.Fatalf("pg_settings: %d names, %v", len(names), err)
	}
	names = append(names, "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "channel_binding",
		"connect_timeout", "client_encoding", "options", "application_name", "fallback_application_name",
		"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
		"replication", "gssencmode", "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey",
		"sslpassword", "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version",
		"ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service", "target_session_attrs",
		"load_balance_hosts", "sslcertmode", "sslnegotiation", "require_auth", "pool_max_conns", "pool_min_conns",
		"pool_min_idle_conns", "pool_max_conn_lifetime", "pool_max_conn_idle_time", "pool_health_check_period",
		"pool_max_conn_lifetime_jitter", "pool_ping_timeout", "statement_cache_capacity",
		"description_cache_capacity", "default_query_exec_mode", "DateStyle", "TimeZone", "lh.custom_setting")
	for _, n := range names {
		if near := postgres.NearParam(n); near != "" {
			t.Errorf("%s= taken for a typo of %s=", n, near)
		}
	}

	u := withParam(base, "table", freshTable(t, base, "lh_test_rtparams_")) + "&application_name=lh_rt_test&search_path=public,pg_catalog"
	s := open(t, u)
	defer s.Close()
	for name, want := range map[string]string{"application_name": "lh_rt_test", "search_path": "public,pg_catalog"} {
		if got, err := postgres.Setting(ctx, s, name); err != nil || got != want {
			t.Errorf("%s in the store's sessions: %q, %v; want %q", name, got, err, want)
		}
	}
}
