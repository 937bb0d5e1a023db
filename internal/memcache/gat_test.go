package memcache

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kvd-project/kvd/internal/mcserver"
)

// TestGatChunkKeys: a gat's chunk holds about the reply budget of values,
// between one key and gatChunk; small values keep full chunks, so bounding
// what a gat holds costs nothing for them.
func TestGatChunkKeys(t *testing.T) {
	for _, tc := range []struct {
		perKey int64
		want   int
	}{
		{0, gatChunk},
		{-1, gatChunk},
		{100 + valueHeaderMax, gatChunk},
		{mcserver.ReplyBudget / gatChunk, gatChunk},
		{mcserver.ReplyBudget/gatChunk + 1, gatChunk - 1},
		{mcserver.ReplyBudget / 4, 4},
		{1 << 20, 1},
		{64 << 20, 1},
	} {
		assert.Equal(t, tc.want, gatChunkKeys(tc.perKey), "perKey %d", tc.perKey)
	}
}
