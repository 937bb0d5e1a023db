package replica

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUnwaitedProposalsGiveBackTheirPlaces: a proposal counts against
// MaxPending until its outcome is delivered, whether or not its proposer
// ever waits for it; proposals nobody waited for used to keep their places
// for good, until every proposal was refused as busy.
func TestUnwaitedProposalsGiveBackTheirPlaces(t *testing.T) {
	r := startSolo(t, 0, func(c *Config) { c.MaxPending = 2 })
	ctx := t.Context()
	for round := range 3 {
		var last uint64
		for i := range 2 {
			id := uint64(1000*round + i + 1)
			_, err := r.Propose(ctx, id, binary.BigEndian.AppendUint64(nil, id))
			require.NoError(t, err, "round %d proposal %d", round, i)
			last = id
		}
		// Not waited for: once applied they must leave the count (read live;
		// Status is published by the loop and may lag).
		require.Eventually(t, func() bool { return r.waits.size() == 0 }, 10*time.Second, time.Millisecond,
			"round %d: last request %d", round, last)
	}
}
