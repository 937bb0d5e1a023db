package fsm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// BenchmarkApply is the write hot path: batches of committed entries as the
// Ready loop hands them over, over a working set of keys that stays the
// same size, so that a run measures apply and not a growing store. Per op
// is per entry; allocs/op is what each write costs the garbage collector.
func BenchmarkApply(b *testing.B) {
	const keys, batch = 1000, 64
	for _, bc := range []struct {
		name string
		cmd  func(key []byte) command.Command
	}{
		{"set", func(k []byte) command.Command {
			return command.Command{Op: command.OpSet, Key: k, Value: []byte("value-of-some-thirty-two-bytes.."), Stamp: t0}
		}},
		{"incr", func(k []byte) command.Command {
			return command.Command{Op: command.OpIncr, Key: k, Delta: 1, Stamp: t0}
		}},
		{"touch", func(k []byte) command.Command {
			return command.Command{Op: command.OpTouch, Key: k, Exptime: 3600, Stamp: t0}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f, err := Open(b.TempDir(), discardLogger(), Options{})
			require.NoError(b, err)
			defer f.Close()
			// Counters, so that incr finds numbers.
			pre := make([]Entry, keys)
			for i := range pre {
				data, err := command.Encode(nil, &command.Command{Op: command.OpSet, Key: []byte(fmt.Sprintf("key-%d", i)), Value: []byte("1000"), Stamp: t0})
				require.NoError(b, err)
				pre[i] = Entry{Index: uint64(i + 1), Data: data}
			}
			_, err = f.Apply(pre)
			require.NoError(b, err)
			next := uint64(keys + 1)
			data := make([][]byte, keys)
			for i := range data {
				c := bc.cmd([]byte(fmt.Sprintf("key-%d", i)))
				c.ReqID = uint64(i + 1)
				data[i], err = command.Encode(nil, &c)
				require.NoError(b, err)
			}
			ents := make([]Entry, batch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				n := min(batch, b.N-i)
				for j := range n {
					ents[j] = Entry{Index: next, Data: data[(i+j)%keys]}
					next++
				}
				if _, err := f.Apply(ents[:n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
