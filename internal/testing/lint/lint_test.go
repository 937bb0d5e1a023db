package lint

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/kvd-project/kvd/"

// imports maps each package directory (relative to the repo root) to the
// imports of its non-test files.
func imports(t *testing.T) map[string]map[string]bool {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	out := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		if out[rel] == nil {
			out[rel] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[rel][p] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportBoundaries(t *testing.T) {
	pkgs := imports(t)
	if len(pkgs) < 5 {
		t.Fatalf("found only %d packages: the walk is broken", len(pkgs))
	}
	rules := []struct {
		name    string
		banned  func(imp string) bool
		allowed map[string]bool // package dirs exempt from the rule
	}{
		{
			// raftlog needs raft.Storage's error sentinels; raftpb (the
			// message types) is not the algorithm and transport uses it.
			name:    "only replica runs the raft algorithm",
			banned:  func(imp string) bool { return imp == "go.etcd.io/raft/v3" },
			allowed: map[string]bool{"internal/replica": true, "internal/raftlog": true},
		},
		{
			name:    "only raftlog and fsm use Pebble",
			banned:  func(imp string) bool { return strings.HasPrefix(imp, "github.com/cockroachdb/pebble") },
			allowed: map[string]bool{"internal/raftlog": true, "internal/fsm": true, "internal/durable": true},
		},
		{
			// membership is node's control plane, moved out of it: it speaks
			// the replica's and the member table's types (through interfaces
			// of its own) and serves no client.
			name: "listeners talk to kv, never to replica, fsm or raftlog",
			banned: func(imp string) bool {
				return imp == module+"internal/replica" || imp == module+"internal/fsm" || imp == module+"internal/raftlog"
			},
			allowed: map[string]bool{"internal/replica": true, "internal/fsm": true, "internal/raftlog": true,
				"internal/kv": true, "internal/node": true, "internal/membership": true, "internal/metrics": true, "internal/transport": true},
		},
	}
	// Test helpers live under internal/testing; nothing outside it may
	// compile them into a production package.
	for dir, imps := range pkgs {
		if strings.HasPrefix(dir, "internal/testing/") {
			continue
		}
		for imp := range imps {
			if strings.HasPrefix(imp, module+"internal/testing/") {
				t.Errorf("test-only packages stay in tests: %s imports %s", dir, imp)
			}
		}
	}
	for _, r := range rules {
		for dir, imps := range pkgs {
			if r.allowed[dir] {
				continue
			}
			for imp := range imps {
				if r.banned(imp) {
					t.Errorf("%s: %s imports %s", r.name, dir, imp)
				}
			}
		}
	}
	// The front end's layers: codecs know bytes and the neutral vocabulary
	// only; the listener knows codecs, not what requests mean; meaning
	// (internal/memcache) talks to kv like every listener. ratelog, a leaf
	// that knows only log lines, is how the listener logs what outsiders
	// can provoke (failed TLS handshakes).
	front := []struct {
		dir     string
		allowed map[string]bool
	}{
		{"internal/mcproto", nil},
		{"internal/mcproto/ascii", map[string]bool{module + "internal/mcproto": true}},
		{"internal/mcproto/binary", map[string]bool{module + "internal/mcproto": true}},
		{"internal/mcserver", map[string]bool{module + "internal/mcproto": true, module + "internal/ratelog": true}},
	}
	for _, f := range front {
		if pkgs[f.dir] == nil {
			t.Errorf("package %s not found", f.dir)
		}
		for imp := range pkgs[f.dir] {
			if strings.HasPrefix(imp, module) && !f.allowed[imp] {
				t.Errorf("%s must not import %s", f.dir, imp)
			}
		}
	}
	for _, dir := range []string{"internal/command"} {
		for imp := range pkgs[dir] {
			if strings.HasPrefix(imp, module) {
				t.Errorf("%s must import nothing internal, imports %s", dir, imp)
			}
		}
	}
	// The state machine applies the log the same on every member whatever
	// protocol a write came in by: its rules (incr's reading of a counter
	// among them) are its own, never borrowed from a client codec or a
	// listener, whose changes must not change what apply does. Nor does it
	// reach up into consensus: the replica calls it, through the node, and
	// its results travel in command's types.
	for _, dir := range []string{"internal/fsm", "internal/command"} {
		if pkgs[dir] == nil {
			t.Fatalf("package %s not found", dir)
		}
		for imp := range pkgs[dir] {
			if strings.HasPrefix(imp, "go.etcd.io/raft/") {
				t.Errorf("%s imports %s: the state machine and the log format import no raft package", dir, imp)
			}
			for _, other := range []string{"mcproto", "mcserver", "memcache", "httpapi", "kv", "cli", "bench", "replica", "node", "transport", "raftlog"} {
				if imp == module+"internal/"+other {
					t.Errorf("%s imports %s: the state machine and the log format import no listener, codec or consensus package", dir, imp)
				}
			}
		}
	}
}

// TestApplyIsDeterministic: the state machine may read no clock and no
// randomness; time comes from the entry's stamp.
func TestApplyIsDeterministic(t *testing.T) {
	pkgs := imports(t)
	for _, dir := range []string{"internal/fsm", "internal/command"} {
		if pkgs[dir] == nil {
			t.Fatalf("package %s not found", dir)
		}
		for _, banned := range []string{"time", "math/rand", "math/rand/v2", "crypto/rand"} {
			if pkgs[dir][banned] {
				t.Errorf("%s imports %s: apply must be a pure function of (state, entry)", dir, banned)
			}
		}
	}
}
