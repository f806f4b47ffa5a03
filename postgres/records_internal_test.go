package postgres

import "testing"

func TestRecordsTableFor(t *testing.T) {
	long := "a23456789_123456789_123456789_123456789_123456789_123456789_123"
	for _, c := range []struct{ lease, want string }{
		{"leasehold_leases", "leasehold_records"},
		{"leases", "records"},
		{"locks.leases", "locks.records"},
		{"jobs", "jobs_records"},
		{"app.my_leases", "app.my_records"},
		{"myleases", "myleases_records"},
	} {
		lt, err := parseTable(c.lease)
		if err != nil {
			t.Fatal(err)
		}
		if got := recordsTableFor(lt).String(); got != c.want {
			t.Errorf("records table of %s = %s, want %s", c.lease, got, c.want)
		}
	}
	lt, _ := parseTable(long)
	lt2, _ := parseTable(long[:62] + "4")
	a, b := recordsTableFor(lt).name, recordsTableFor(lt2).name
	if len(a) != 63 || len(b) != 63 || a == b {
		t.Errorf("records tables of two long lease tables: %q, %q; want distinct names of 63 bytes", a, b)
	}
}
