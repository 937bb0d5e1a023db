package auth

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

// writeFile writes an htpasswd file of users (name → password), hashed
// at bcrypt.MinCost.
func writeFile(t *testing.T, path string, users map[string]string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# test users\n")
	for u, pw := range users {
		b.WriteString(u + ":" + mustHash(pw, "$2y$") + "\n")
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
}

// logBuf is a text logger into a buffer safe for concurrent writes.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newLogger() (*slog.Logger, *logBuf) {
	lb := &logBuf{}
	return slog.New(slog.NewTextHandler(lb, nil)), lb
}

// countCompares makes s count its bcrypt runs, and the most at once.
func countCompares(s *Store) (runs, peak *atomic.Int64) {
	runs, peak = &atomic.Int64{}, &atomic.Int64{}
	var now atomic.Int64
	s.compare = func(hash, pw []byte) error {
		runs.Add(1)
		n := now.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer now.Add(-1)
		time.Sleep(2 * time.Millisecond) // let concurrent checks overlap
		return bcrypt.CompareHashAndPassword(hash, pw)
	}
	return runs, peak
}

func openTest(t *testing.T, users map[string]string) (*Store, string, *logBuf) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "htpasswd")
	writeFile(t, path, users)
	logger, lb := newLogger()
	s, err := Open(path, logger)
	require.NoError(t, err)
	return s, path, lb
}

func TestOpenErrorsNameFileAndLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file, want string
	}{
		{"plaintext", "alice:hunter2\n", "line 1: plaintext"},
		{"empty", "", "no users"},
		{"duplicate", "a:" + hash2y + "\na:" + hash2y + "\n", "line 2: duplicate user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			require.NoError(t, os.WriteFile(path, []byte(tc.file), 0o600))
			logger, lb := newLogger()
			_, err := Open(path, logger)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "hunter2")
			assert.NotContains(t, lb.String(), "hunter2")
		})
	}
	_, err := Open(filepath.Join(dir, "missing"), slog.New(slog.DiscardHandler))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing")
}

func TestVerify(t *testing.T) {
	s, _, _ := openTest(t, map[string]string{"alice": "secret", "bob": "pass word"})
	runs, _ := countCompares(s)
	for _, tc := range []struct {
		user, password string
		ok             bool
	}{
		{"alice", "secret", true},
		{"bob", "pass word", true},
		{"alice", "Secret", false},
		{"alice", "", false},
		{"bob", "secret", false},
		{"carol", "secret", false},
		{"", "", false},
		{"alice\x00", "secret", false},
	} {
		before := runs.Load()
		assert.Equal(t, tc.ok, s.Verify(tc.user, tc.password), "%q %q", tc.user, tc.password)
		// Every first check runs bcrypt, unknown users' included (the
		// dummy hash): timing must not tell which users exist.
		assert.Equal(t, before+1, runs.Load(), "%q %q: bcrypt runs", tc.user, tc.password)
	}
}

func TestVerifyRemembersSuccessesOnly(t *testing.T) {
	s, _, _ := openTest(t, map[string]string{"alice": "secret"})
	runs, _ := countCompares(s)
	require.True(t, s.Verify("alice", "secret"))
	for range 10 {
		require.True(t, s.Verify("alice", "secret"))
	}
	assert.EqualValues(t, 1, runs.Load(), "a verified pair is answered from memory")
	for range 10 {
		require.False(t, s.Verify("alice", "guess"))
	}
	assert.EqualValues(t, 11, runs.Load(), "every failed attempt costs a bcrypt")
}

// TestVerifyConcurrentSamePair: hundreds of connections authenticating at
// once with the same credentials cost one bcrypt, not one each.
func TestVerifyConcurrentSamePair(t *testing.T) {
	s, _, _ := openTest(t, map[string]string{"alice": "secret"})
	runs, _ := countCompares(s)
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 300 {
		wg.Go(func() {
			if s.Verify("alice", "secret") {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 300, ok.Load())
	assert.EqualValues(t, 1, runs.Load())
}

// TestVerifyFailuresBounded: a flood of failed logins runs bcrypt for each
// one, never more at once than the semaphore allows.
func TestVerifyFailuresBounded(t *testing.T) {
	s, _, _ := openTest(t, map[string]string{"alice": "secret"})
	s.sem = make(chan struct{}, 3)
	runs, peak := countCompares(s)
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			assert.False(t, s.Verify("alice", "guess"+string(rune('a'+i%2))))
		})
	}
	wg.Wait()
	assert.EqualValues(t, 60, runs.Load())
	assert.LessOrEqual(t, peak.Load(), int64(3))
	assert.Positive(t, peak.Load())
}

func TestReload(t *testing.T) {
	s, path, lb := openTest(t, map[string]string{"alice": "secret"})
	runs, _ := countCompares(s)
	require.True(t, s.Verify("alice", "secret"))

	// A changed password: the remembered pair must stop working.
	writeFile(t, path, map[string]string{"alice": "new", "bob": "b"})
	require.NoError(t, s.Reload())
	assert.Equal(t, 2, s.Users())
	assert.False(t, s.Verify("alice", "secret"))
	assert.True(t, s.Verify("alice", "new"))
	assert.True(t, s.Verify("bob", "b"))
	assert.EqualValues(t, 4, runs.Load())

	// A bad file: the credentials before stay, the error is logged.
	require.NoError(t, os.WriteFile(path, []byte("alice:plaintext-pw\n"), 0o600))
	err := s.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 1")
	assert.True(t, s.Verify("alice", "new"))
	assert.Contains(t, lb.String(), "auth file not reloaded")
	assert.NotContains(t, lb.String(), "plaintext-pw")

	// A missing file: likewise.
	require.NoError(t, os.Remove(path))
	require.Error(t, s.Reload())
	assert.True(t, s.Verify("bob", "b"))
}

// TestRunReloadsOnChange: the poll picks up an edit in place and a file
// replaced by a rename, and survives a bad file.
func TestRunReloadsOnChange(t *testing.T) {
	s, path, lb := openTest(t, map[string]string{"alice": "secret"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx, 10*time.Millisecond)
	}()
	t.Cleanup(func() { cancel(); <-done })

	writeFile(t, path, map[string]string{"alice": "two", "bob": "b"})
	require.Eventually(t, func() bool { return s.Users() == 2 }, 5*time.Second, 5*time.Millisecond)
	assert.True(t, s.Verify("alice", "two"))

	tmp := path + ".new"
	writeFile(t, tmp, map[string]string{"carol": "c"})
	require.NoError(t, os.Rename(tmp, path))
	require.Eventually(t, func() bool { return s.Verify("carol", "c") }, 5*time.Second, 5*time.Millisecond)
	assert.False(t, s.Verify("alice", "two"))

	require.NoError(t, os.WriteFile(path, []byte("carol:c\n"), 0o600))
	require.Eventually(t, func() bool { return strings.Contains(lb.String(), "auth file not reloaded") }, 5*time.Second, 5*time.Millisecond)
	assert.True(t, s.Verify("carol", "c"), "a bad file keeps the credentials before")
	assert.Equal(t, 1, strings.Count(lb.String(), "auth file not reloaded"), "a bad file is reported once, not every poll")
}

func TestFailedIsRateLimited(t *testing.T) {
	s, _, lb := openTest(t, map[string]string{"alice": "secret"})
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	for range 200 {
		s.Failed("10.0.0.1:5000", "mallory", "wrong password or unknown user")
	}
	assert.Equal(t, 1, strings.Count(lb.String(), "authentication failed"))
	now = now.Add(1500 * time.Millisecond)
	s.Failed("10.0.0.2:6000", strings.Repeat("x", 1000), "unknown mechanism")
	out := lb.String()
	assert.Equal(t, 2, strings.Count(out, "authentication failed"))
	assert.Contains(t, out, "suppressed=199")
	assert.Contains(t, out, "remote=10.0.0.2:6000")
	assert.NotContains(t, out, strings.Repeat("x", maxLoggedUser+1), "the user name is cut")

	// The failures of a burst that stopped are still counted.
	s.Failed("10.0.0.2:6000", "m", "r")
	now = now.Add(2 * time.Second)
	s.flushSuppressed(false)
	assert.Contains(t, lb.String(), "authentication failures not logged one by one")
	assert.Contains(t, lb.String(), "count=1")
}

// TestVerifyQueueBounded: while every bcrypt slot is busy, at most
// maxWaiting checks queue for one; the rest fail at once rather than pile
// up, and the queued ones still run.
func TestVerifyQueueBounded(t *testing.T) {
	s, _, _ := openTest(t, map[string]string{"alice": "secret"})
	s.sem = make(chan struct{}, 1)
	release := make(chan struct{})
	var runs atomic.Int64
	s.compare = func(hash, pw []byte) error {
		runs.Add(1)
		<-release
		return bcrypt.CompareHashAndPassword(hash, pw)
	}
	var wg sync.WaitGroup
	start := func(i int) { wg.Go(func() { assert.False(t, s.Verify("alice", fmt.Sprintf("guess%d", i))) }) }
	start(0)
	require.Eventually(t, func() bool { return runs.Load() == 1 }, 10*time.Second, time.Millisecond)
	for i := range maxWaiting {
		start(1 + i)
	}
	require.Eventually(t, func() bool { return s.waiting.Load() == maxWaiting }, 10*time.Second, time.Millisecond)
	// The queue is full: these fail without waiting for a slot (were they
	// to wait, this would block until release).
	for i := range 20 {
		assert.False(t, s.Verify("alice", fmt.Sprintf("late%d", i)))
	}
	close(release)
	wg.Wait()
	assert.EqualValues(t, 1+maxWaiting, runs.Load(), "every queued check ran bcrypt")
	assert.True(t, s.Verify("alice", "secret"), "the queue drained")
}

// TestKeySeparatesPairs: no two user/password pairs share a cache key,
// whatever bytes they hold.
func TestKeySeparatesPairs(t *testing.T) {
	s, _, _ := openTest(t, map[string]string{"alice": "secret"})
	assert.NotEqual(t, s.key("a\x00b", "c"), s.key("a", "b\x00c"))
	assert.NotEqual(t, s.key("ab", "c"), s.key("a", "bc"))
	assert.Equal(t, s.key("a", "bc"), s.key("a", "bc"))
}
