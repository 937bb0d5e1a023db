package transport

import "context"

// afterFunc runs f in its own goroutine once ctx is done, like
// context.AfterFunc, but the returned release does not let that goroutine
// outlive the caller: it unregisters f, or waits for f to finish if it has
// started, and reports whether f ran. Every goroutine of the transport
// calls release before exiting, so Close leaves nothing running.
func afterFunc(ctx context.Context, f func()) (release func() (ran bool)) {
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		f()
	})
	return func() bool {
		if stop() {
			return false
		}
		<-done
		return true
	}
}
