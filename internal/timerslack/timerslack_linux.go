package timerslack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"syscall"
	"time"
)

const (
	prSetTimerslack = 29 // PR_SET_TIMERSLACK, linux/prctl.h
	prGetTimerslack = 30 // PR_GET_TIMERSLACK

	// marker is set in the environment of the re-executed process, so that
	// a kernel that does not keep the slack across execve cannot make kvd
	// execute itself forever.
	marker = "KVD_TIMER_SLACK_REEXEC"
)

// Supported reports whether this platform has a timer slack to set.
const Supported = true

// Current returns the calling thread's timer slack.
func Current() (time.Duration, error) {
	v, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTimerslack, 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("prctl(PR_GET_TIMERSLACK): %w", errno)
	}
	return time.Duration(v), nil
}

// Ensure makes want the timer slack of every thread of this process, by
// executing the binary again with it when the process started with another
// (see the package comment). It returns only when no re-exec was needed or
// when one was not possible; then it logs why and kvd runs with the slack it
// inherited, which is slower but correct. want <= 0 leaves the slack alone.
//
// Once ctx is done (a SIGTERM or Ctrl-C already came) it does not execute
// kvd again: the new image would not know of the signal, and would run on
// until its supervisor killed it. A signal in the instant between that
// check and execve is still lost.
func Ensure(ctx context.Context, want time.Duration, log *slog.Logger) {
	if want <= 0 || ctx.Err() != nil {
		return
	}
	// The slack read and set below is this thread's, and execve must run on
	// the same thread for the new image to start with it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cur, err := Current()
	if err != nil {
		log.Warn("timer slack: cannot read it; keeping the inherited one", "err", err)
		return
	}
	if cur == want {
		return
	}
	if os.Getenv(marker) != "" {
		log.Warn("timer slack: the kernel did not keep it across execve; running with the inherited one",
			"want", want, "have", cur)
		return
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, uintptr(want), 0); errno != 0 {
		log.Warn("timer slack: cannot set it; keeping the inherited one", "want", want, "err", errno)
		return
	}
	err = syscall.Exec(executable(), os.Args, append(os.Environ(), marker+"=1"))
	// Still here: the exec failed, and this thread's slack alone changed.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, uintptr(cur), 0); errno != 0 {
		log.Warn("timer slack: cannot restore this thread's", "err", errno)
	}
	log.Warn("timer slack: cannot execute kvd again to apply it; keeping the inherited one", "want", want, "err", err)
}

// executable names this binary for execve. Its path comes first, because
// the kernel names the new image's threads after the file executed (ps and
// pgrep show "kvd", not "exe"); /proc/self/exe, which reaches the binary
// even if its file was replaced or removed since it started, is the
// fallback.
func executable() string {
	if p, err := os.Executable(); err == nil {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			if self, err := os.Stat("/proc/self/exe"); err == nil && os.SameFile(st, self) {
				return p
			}
		}
	}
	return "/proc/self/exe"
}
