// Package timerslack owns the kernel timer slack kvd serve runs with: how
// late the kernel may end a thread's timed sleep, so that it can fold
// wake-ups together.
//
// Why kvd sets it: Go's runtime monitor (sysmon) sleeps 20 µs at a time
// while any thread is in a system call, and the raft log's fdatasync keeps
// one there for most of every write. With Linux's default slack of 50 µs
// that is thousands of wake-ups a second, each a context switch; on the
// virtual machine kvd is benchmarked on, a context switch costs tens of
// microseconds, and sysmon's sleeps alone took a tenth of kvd's CPU under
// write load (bench/RESULTS-core.md, thirty-first session). A slack of 1 ms
// lets sysmon sleep about a millisecond instead. Nothing else in kvd needs
// timers finer than that: Go already rounds the timeout of its network
// poller up to whole milliseconds, and events (a socket becoming readable,
// a goroutine being woken) are never delayed by slack.
//
// Why a re-exec: a thread takes its slack from the thread that created it,
// and sysmon's thread is created before any of kvd's code runs. So Ensure
// sets the slack on the calling thread and executes the same binary again
// with the same arguments; the new image keeps the process ID, the open
// standard streams and the slack, and every thread of it inherits the
// slack. It is done before kvd opens a file or a listener.
package timerslack
