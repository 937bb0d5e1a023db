package compat

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMissingProgramFailsInCI: a reference program (memcached,
// memccapable) that is missing skips its test on a developer's machine,
// and fails it under .ci/run (KVD_REQUIRE_REFERENCE), which installs them
// all: a skip there would pass the run without the comparison ever being
// made. The check
// runs in a child test process, which is the only way to see a skip or a
// failure from outside.
func TestMissingProgramFailsInCI(t *testing.T) {
	if os.Getenv("KVD_TEST_MISSING_PROGRAM") != "" {
		needProgram(t, filepath.Join(t.TempDir(), "no-such-memcached"), "memcached")
		t.Log("needProgram returned for a missing program")
		return
	}
	for _, tc := range []struct {
		require, want string
	}{
		{"", "--- SKIP: TestMissingProgramFailsInCI"},
		{"1", "--- FAIL: TestMissingProgramFailsInCI"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingProgramFailsInCI$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "KVD_TEST_MISSING_PROGRAM=1", requireReferenceEnv+"="+tc.require)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%s=%q: want %q in the child's output:\n%s", requireReferenceEnv, tc.require, tc.want, out)
		}
	}
}
