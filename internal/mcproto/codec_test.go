package mcproto

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sniff decides by the first byte alone and hands every byte it read on.
func TestSniff(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		binary   bool
	}{
		{"text", "get a\r\n", false},
		{"meta", "mg a v\r\n", false},
		{"binary", "\x80\x00\x00\x01", true},
		{"binary magic later", "x\x80", false},
	} {
		for how, r := range map[string]io.Reader{
			"whole":    strings.NewReader(tc.in),
			"one byte": iotest.OneByteReader(strings.NewReader(tc.in)),
		} {
			bin, rest, err := Sniff(r)
			require.NoError(t, err, "%s %s", tc.name, how)
			assert.Equal(t, tc.binary, bin, "%s %s", tc.name, how)
			all, err := io.ReadAll(rest)
			require.NoError(t, err)
			assert.Equal(t, tc.in, string(all), "%s %s", tc.name, how)
		}
	}
	_, _, err := Sniff(strings.NewReader(""))
	assert.ErrorIs(t, err, io.EOF)

	// Bytes that came with an error are handed on before the error.
	boom := errors.New("boom")
	_, rest, err := Sniff(iotest.DataErrReader(io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(boom))))
	require.NoError(t, err)
	b, err := io.ReadAll(rest)
	assert.Equal(t, "ab", string(b))
	assert.ErrorIs(t, err, boom)
}

func TestKindOf(t *testing.T) {
	for line, want := range map[string]ErrorKind{
		"ERROR": KindError, "ERROR: shutdown not enabled": KindError,
		"CLIENT_ERROR bad data chunk": KindClient, "SERVER_ERROR object too large for cache": KindServer,
	} {
		assert.Equal(t, want, KindOf(line), line)
	}
}
