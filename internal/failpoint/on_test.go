//go:build failpoints && unix

package failpoint

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary a child that hits failpoints (see
// TestHelperHits); the parent tests look at how it ends.
const helperEnv = "FAILPOINT_TEST_HELPER"

// TestHelperHits is the child: it hits raftlog/after-sync five times,
// printing each hit that returned, then, when asked to wait for SIGUSR1,
// signals itself and hits five more times.
func TestHelperHits(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("only runs as the child of the other tests")
	}
	rounds := 1
	if os.Getenv(ArmEnvVar) != "" {
		rounds = 2
	}
	for r := range rounds {
		if r == 1 {
			if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			for !counting.Load() {
				time.Sleep(time.Millisecond)
			}
		}
		for i := 1; i <= 5; i++ {
			Hit(RaftlogAfterSync)
			Hit(FSMAfterApply) // not armed: must not count for the other
			os.Stdout.WriteString("passed\n")
		}
	}
}

func runHelper(t *testing.T, env ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHits$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=1"}, env...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func TestArmedProcess(t *testing.T) {
	tests := []struct {
		name       string
		env        []string
		killed     bool
		passed     int    // hits that returned before the end
		stderrHas  string // a line the process must have written
		exitStatus int    // when not killed
	}{
		{name: "crash on the third hit", env: []string{EnvVar + "=raftlog/after-sync=crash@3"},
			killed: true, passed: 2, stderrHas: "failpoint raftlog/after-sync: crash on hit 3"},
		{name: "crash without a count is the first hit", env: []string{EnvVar + "=raftlog/after-sync=crash"},
			killed: true, passed: 0, stderrHas: "crash on hit 1"},
		{name: "a count never reached", env: []string{EnvVar + "=raftlog/after-sync=crash@6"},
			passed: 5, stderrHas: "failpoint armed: raftlog/after-sync=crash@6"},
		{name: "sleep only stalls", env: []string{EnvVar + "=raftlog/after-sync=sleep(1ms)"}, passed: 5},
		{name: "held until SIGUSR1", env: []string{EnvVar + "=raftlog/after-sync=crash@2", ArmEnvVar + "=usr1"},
			killed: true, passed: 6, stderrHas: "SIGUSR1 received"},
		{name: "a bad spec stops the start", env: []string{EnvVar + "=raftlog/after-synk=crash"},
			exitStatus: 2, stderrHas: `kvd: failpoints: KVD_FAILPOINTS: "raftlog/after-synk=crash": unknown failpoint`},
		{name: "a bad arm value stops the start", env: []string{EnvVar + "=raftlog/after-sync=crash", ArmEnvVar + "=usr2"},
			exitStatus: 2, stderrHas: "KVD_FAILPOINTS_ARM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runHelper(t, tt.env...)
			switch {
			case tt.killed:
				if !killedBySIGKILL(err) {
					t.Fatalf("want death by SIGKILL, got %v\nstderr:\n%s", err, stderr)
				}
			case tt.exitStatus != 0:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != tt.exitStatus {
					t.Fatalf("want exit status %d, got %v\nstderr:\n%s", tt.exitStatus, err, stderr)
				}
			default:
				if err != nil {
					t.Fatalf("child failed: %v\nstderr:\n%s", err, stderr)
				}
			}
			if got := strings.Count(stdout, "passed\n"); got != tt.passed {
				t.Errorf("%d hits returned, want %d\nstdout:\n%s", got, tt.passed, stdout)
			}
			if !strings.Contains(stderr, tt.stderrHas) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderrHas, stderr)
			}
		})
	}
}
