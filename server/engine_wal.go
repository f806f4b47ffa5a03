package server

import (
	"io"

	"github.com/leasehold/leasehold/server/wal"
)

func init() {
	openLog = func(cfg EngineConfig, load func(io.Reader) error, apply func([]byte) error) (durableLog, error) {
		l, err := wal.Open(wal.Options{Dir: cfg.Dir, NoSync: cfg.NoSync, Syncs: cfg.LogSyncs, OnSync: cfg.Hooks.Sync}, load, apply)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}
