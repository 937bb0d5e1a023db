package httpapi_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/kvd-project/kvd/internal/testutil/kvdproc"
)

// TestMain removes the kvd binaries the tests built once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := kvdproc.RemoveBinaries(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}
