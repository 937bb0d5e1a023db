package migrate_test

import (
	"testing"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// TestMain removes the kvd binaries the tests built once they are done.
func TestMain(m *testing.M) { kvdproc.Main(m) }
