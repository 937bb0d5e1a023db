package auth

import "time"

// maxLoggedUser bounds the user name a failure line quotes: it comes from
// the client, which must not choose the size of the log.
const maxLoggedUser = 64

// Failed logs a failed authentication from remote (the client's address)
// as user, for reason ("wrong password or unknown user", "unknown
// mechanism", …): at most one line a second, the line saying how many
// failures it left out since the one before. Never pass a password.
func (s *Store) Failed(remote, user, reason string) {
	if len(user) > maxLoggedUser {
		user = user[:maxLoggedUser] + "…"
	}
	now := s.now()
	s.failMu.Lock()
	if !s.lastFail.IsZero() && now.Sub(s.lastFail) < time.Second {
		s.suppressed++
		s.failMu.Unlock()
		return
	}
	n := s.suppressed
	s.lastFail, s.suppressed = now, 0
	s.failMu.Unlock()
	s.log.Warn("authentication failed", "remote", remote, "user", user, "reason", reason, "suppressed", n)
}

// flushSuppressed logs the count of failures Failed left out, once their
// second is over (or at once with force), so that a burst that stopped is
// still accounted for.
func (s *Store) flushSuppressed(force bool) {
	now := s.now()
	s.failMu.Lock()
	n := s.suppressed
	if n == 0 || !force && now.Sub(s.lastFail) < time.Second {
		s.failMu.Unlock()
		return
	}
	s.lastFail, s.suppressed = now, 0
	s.failMu.Unlock()
	s.log.Warn("authentication failures not logged one by one", "count", n)
}
