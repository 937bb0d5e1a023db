package lint

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

var (
	fuzzFunc    = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	fuzzTargets = regexp.MustCompile(`(?m)^FUZZ_TARGETS = ((?:.*\\\n)*.*)$`)
)

// TestMakeFuzzRunsEveryTarget keeps `make fuzz`, which CI runs, in step
// with the fuzz targets in the tree: a target left out of FUZZ_TARGETS would
// only ever run its seeds.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	var inTree []string
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg, _ := filepath.Rel(filepath.Join(root, "internal"), filepath.Dir(path))
		for _, m := range fuzzFunc.FindAllSubmatch(b, -1) {
			inTree = append(inTree, filepath.ToSlash(pkg)+":"+string(m[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := fuzzTargets.FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no FUZZ_TARGETS list")
	}
	inMake := strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))
	slices.Sort(inTree)
	slices.Sort(inMake)
	if len(inTree) < 10 {
		t.Fatalf("found only %d fuzz targets: the walk is broken", len(inTree))
	}
	if !slices.Equal(inTree, inMake) {
		t.Fatalf("fuzz targets in the tree:\n  %v\nFUZZ_TARGETS in the Makefile:\n  %v", inTree, inMake)
	}
}
