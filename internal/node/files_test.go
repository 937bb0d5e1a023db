package node

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStoreFileBudget(t *testing.T) {
	cases := []struct {
		name      string
		limit     uint64
		maxConns  int
		files     int
		shortWarn bool
	}{
		{"limit unknown", 0, 4096, minStoreFiles, false},
		// deploy/systemd: LimitNOFILE=65536 with the default 4096 connections.
		{"systemd unit", 65536, 4096, maxStoreFiles, false},
		{"between the bounds", 4096 + fileReserve + 5000, 4096, 5000, false},
		{"exactly enough", 4096 + fileReserve + minStoreFiles, 4096, minStoreFiles, false},
		{"one short", 4096 + fileReserve + minStoreFiles - 1, 4096, minStoreFiles, true},
		// A common default hard limit, with the default connections.
		{"4096 with 4096 connections", 4096, 4096, minStoreFiles, true},
		{"4096 with 1024 connections", 4096, 1024, 4096 - 1024 - fileReserve, false},
		{"a million", 1 << 20, 4096, maxStoreFiles, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, short := storeFileBudget(tc.limit, tc.maxConns)
			require.Equal(t, tc.files, files)
			require.Equal(t, tc.shortWarn, short)
		})
	}
}
