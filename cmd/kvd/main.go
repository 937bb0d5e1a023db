// Command kvd is a replicated, persistent key-value server that speaks the
// memcached protocol. main only wires the process: a signal-cancelled context,
// the root command, and the mapping from error to exit code.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvd-project/kvd/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal starts a graceful shutdown, which may take twice
	// --shutdown-timeout; a second one ends the process at once, as its
	// default action does, rather than be ignored.
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := cli.NewRoot(os.Stdout, os.Stderr).ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvd:", err)
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}
