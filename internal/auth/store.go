package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// maxRemembered bounds the verified pairs kept: more distinct successes
// than users are possible (bcrypt reads only a password's first 72 bytes,
// so longer ones sharing them all match), and memory must not grow with
// them. Past it, the memory starts over.
const maxRemembered = 4096

// maxWaiting bounds the checks queued for a bcrypt slot. Past it a check
// fails at once: a flood of wrong passwords (every one of which costs a
// full bcrypt) must not pile up goroutines and connections without end.
// A pair already verified never queues, so a client that logged in before
// the flood still does.
const maxWaiting = 256

// pairKey is the keyed digest of a (user, password) pair.
type pairKey [sha256.Size]byte

// credentials is one load of the file: immutable once built.
type credentials struct {
	users map[string][]byte // user → bcrypt hash
	// dummy is a hash of the file's highest cost that an unknown user is
	// checked against, so that the answer takes as long as for a known one.
	dummy []byte
}

// Store is the credentials of one htpasswd file. Safe for concurrent use.
type Store struct {
	path string
	log  *slog.Logger
	// salt keys the digests of remembered pairs; random per process.
	salt [32]byte
	// sem bounds the bcrypt runs at a time, and waiting the checks
	// queued for it (see maxWaiting).
	sem     chan struct{}
	waiting atomic.Int64
	// now is the clock of the failure log's rate limit, and compare is
	// bcrypt's check (tests set both).
	now     func() time.Time
	compare func(hash, password []byte) error

	mu    sync.Mutex
	creds *credentials
	// verified are the pairs bcrypt accepted since the last load.
	verified map[pairKey]struct{}
	// inflight are the pairs being checked now: a check of the same pair
	// waits for the channel to close, then looks at verified again.
	inflight map[pairKey]chan struct{}
	// gen counts loads: a check that started before one does not
	// remember its success in the new load's memory.
	gen uint64
	// seen is the file as last read, loaded or refused: Run reloads when
	// it differs.
	seen fileID

	failMu sync.Mutex
	// lastFail is when the last failure line was written; suppressed
	// counts the failures not logged since.
	lastFail   time.Time
	suppressed int
}

// Open reads the htpasswd file at path. Every problem with it is an error
// naming the file and the line.
func Open(path string, logger *slog.Logger) (*Store, error) {
	s := &Store{
		path:     path,
		log:      logger,
		sem:      make(chan struct{}, runtime.NumCPU()),
		now:      time.Now,
		compare:  bcrypt.CompareHashAndPassword,
		verified: map[pairKey]struct{}{},
		inflight: map[pairKey]chan struct{}{},
	}
	if _, err := rand.Read(s.salt[:]); err != nil {
		return nil, fmt.Errorf("auth: random salt: %w", err)
	}
	creds, id, err := s.read()
	if err != nil {
		return nil, err
	}
	s.install(creds, id)
	logger.Info("auth file loaded", "path", path, "users", len(creds.users))
	return s, nil
}

// read loads and checks the file, and returns its identity as it was
// before the read (a change during the read is then seen by the next poll).
func (s *Store) read() (*credentials, fileID, error) {
	id, err := statID(s.path)
	if err != nil {
		return nil, fileID{}, fmt.Errorf("auth file %s: %w", s.path, err)
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return nil, id, fmt.Errorf("auth file %s: %w", s.path, err)
	}
	users, err := parse(data)
	if err != nil {
		return nil, id, fmt.Errorf("auth file %s: %w", s.path, err)
	}
	cost := bcrypt.MinCost
	for _, h := range users {
		if c, err := bcrypt.Cost(h); err == nil && c > cost {
			cost = c
		}
	}
	var pw [16]byte
	_, _ = rand.Read(pw[:])
	dummy, err := bcrypt.GenerateFromPassword(pw[:], cost)
	if err != nil {
		return nil, id, fmt.Errorf("auth: hash for unknown users: %w", err)
	}
	return &credentials{users: users, dummy: dummy}, id, nil
}

// install makes creds the current credentials and forgets every verified
// pair: a password removed or changed in the file must stop working.
func (s *Store) install(creds *credentials, id fileID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creds = creds
	s.verified = map[pairKey]struct{}{}
	s.gen++
	s.seen = id
}

// Reload reads the file again. When the new file is bad, the credentials
// loaded before stay in force, and the error is logged and returned.
func (s *Store) Reload() error {
	creds, id, err := s.read()
	if err != nil {
		s.mu.Lock()
		s.seen = id // not retried every second: the next change is
		s.mu.Unlock()
		s.log.Error("auth file not reloaded; the credentials loaded before stay in force", "path", s.path, "err", err)
		return err
	}
	s.install(creds, id)
	s.log.Info("auth file reloaded", "path", s.path, "users", len(creds.users))
	return nil
}

// Users is the number of users loaded.
func (s *Store) Users() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.creds.users)
}

// Verify reports whether password is user's. A pair verified since the
// file was last loaded is answered from memory; any other costs a bcrypt,
// of which at most runtime.NumCPU() run at once (Verify waits for a turn).
func (s *Store) Verify(user, password string) bool {
	key := s.key(user, password)
	s.mu.Lock()
	if _, ok := s.verified[key]; ok {
		s.mu.Unlock()
		return true
	}
	if wait, busy := s.inflight[key]; busy {
		s.mu.Unlock()
		// The same pair is being checked: its success will be
		// remembered. A failure is not, and this check then runs bcrypt
		// itself, as every failed attempt must.
		<-wait
		s.mu.Lock()
		_, ok := s.verified[key]
		s.mu.Unlock()
		if ok {
			return true
		}
		return s.check(user, password, &key)
	}
	done := make(chan struct{})
	s.inflight[key] = done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.inflight, key)
		s.mu.Unlock()
		close(done)
	}()
	return s.check(user, password, &key)
}

// check runs bcrypt for the pair (at most len(s.sem) at a time) and, when
// remember is set and it matches, remembers the pair.
func (s *Store) check(user, password string, remember *pairKey) bool {
	s.mu.Lock()
	creds, gen := s.creds, s.gen
	s.mu.Unlock()
	hash, known := creds.users[user]
	if !known {
		hash = creds.dummy
	}
	if s.waiting.Add(1) > maxWaiting {
		s.waiting.Add(-1)
		return false
	}
	s.sem <- struct{}{}
	s.waiting.Add(-1)
	err := s.compare(hash, []byte(password))
	<-s.sem
	ok := err == nil && known
	if ok && remember != nil {
		s.mu.Lock()
		if s.gen == gen {
			if len(s.verified) >= maxRemembered {
				s.verified = map[pairKey]struct{}{}
			}
			s.verified[*remember] = struct{}{}
		}
		s.mu.Unlock()
	}
	return ok
}

// key is the keyed digest of the length of user, user and password: the
// length prefix keeps any two pairs apart, whatever bytes a login sends
// (an HTTP Basic user name may hold a NUL).
func (s *Store) key(user, password string) pairKey {
	m := hmac.New(sha256.New, s.salt[:])
	m.Write(binary.BigEndian.AppendUint64(nil, uint64(len(user))))
	m.Write([]byte(user))
	m.Write([]byte(password))
	var k pairKey
	m.Sum(k[:0])
	return k
}

// Run polls the file every second and reloads it when its modification
// time, size or inode changed (an editor's rename, a configuration
// manager's rewrite), and writes the count of failure lines Failed left
// out. It returns when ctx ends.
func (s *Store) Run(ctx context.Context) {
	s.run(ctx, time.Second)
}

func (s *Store) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var statErr string
	for {
		select {
		case <-ctx.Done():
			s.flushSuppressed(true)
			return
		case <-t.C:
		}
		s.flushSuppressed(false)
		id, err := statID(s.path)
		if err != nil {
			// A file being replaced may be missing for an instant; say
			// so once per distinct error, not every second.
			if err.Error() != statErr {
				statErr = err.Error()
				s.log.Warn("auth file unreadable; the credentials loaded before stay in force", "path", s.path, "err", err)
			}
			continue
		}
		statErr = ""
		s.mu.Lock()
		changed := id != s.seen
		s.mu.Unlock()
		if changed {
			_ = s.Reload() // logged by Reload
		}
	}
}
