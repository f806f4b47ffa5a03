package memory_test

import (
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Open: func(testing.TB) leasehold.Store { return memory.New() },
	})
}

func TestRecords(t *testing.T) {
	storetest.RunRecords(t, storetest.RecordsHarness{
		Open: func(testing.TB) leasehold.RecordStore { return memory.New() },
		Txn:  true,
	})
}
