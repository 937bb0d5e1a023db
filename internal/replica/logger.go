package replica

import (
	"fmt"
	"log/slog"
	"os"
)

// raftLogger adapts slog to raft.Logger. raft is chatty at info level about
// routine elections, so Info goes to debug; warnings and errors keep theirs.
type raftLogger struct{ l *slog.Logger }

func newRaftLogger(l *slog.Logger) *raftLogger { return &raftLogger{l.With("component", "raft")} }

func (r *raftLogger) Debug(v ...any)                 { r.l.Debug(fmt.Sprint(v...)) }
func (r *raftLogger) Debugf(format string, v ...any) { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r *raftLogger) Info(v ...any)                  { r.l.Debug(fmt.Sprint(v...)) }
func (r *raftLogger) Infof(format string, v ...any)  { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r *raftLogger) Warning(v ...any)               { r.l.Warn(fmt.Sprint(v...)) }
func (r *raftLogger) Warningf(format string, v ...any) {
	r.l.Warn(fmt.Sprintf(format, v...))
}
func (r *raftLogger) Error(v ...any)                 { r.l.Error(fmt.Sprint(v...)) }
func (r *raftLogger) Errorf(format string, v ...any) { r.l.Error(fmt.Sprintf(format, v...)) }

// Fatal and Panic are raft's invariant violations: nothing safe can follow.
func (r *raftLogger) Fatal(v ...any) { r.l.Error(fmt.Sprint(v...), "fatal", true); os.Exit(70) }
func (r *raftLogger) Fatalf(format string, v ...any) {
	r.l.Error(fmt.Sprintf(format, v...), "fatal", true)
	os.Exit(70)
}
func (r *raftLogger) Panic(v ...any) { panic(fmt.Sprint(v...)) }
func (r *raftLogger) Panicf(format string, v ...any) {
	panic(fmt.Sprintf(format, v...))
}
