package consoletest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// stubNode serves the console's files and a /v1/stats the test steers:
// answering, or holding every request (a node that accepts connections but
// no longer answers: a stalled process, or a partition that drops packets).
type stubNode struct {
	hang atomic.Bool
	done chan struct{}
}

func (s *stubNode) stats(w http.ResponseWriter, r *http.Request) {
	if s.hang.Load() {
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return
	}
	// A leaderless, not-ready node, whose member names carry HTML.
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"time_ms": time.Now().UnixMilli(),
		"name":    `<b id="inj">n1</b>`,
		"cluster": map[string]any{
			"self": "1", "leader": "", "has_leader": false, "ready": false, "term": 3,
			"commit": 5, "applied": 5, "leader_changes": 2,
			"members": []map[string]any{
				{"id": "1", "name": `<img id="xss" src="x">`, "kind": "voter", "role": "candidate", "self": true, "health": "unhealthy"},
				{"id": "2", "name": "n2", "kind": "voter", "role": "follower", "health": "unknown"},
			},
		},
		"storage": map[string]any{"items": 0, "value_bytes": 0, "disk_bytes": 0},
	})
}

func startStub(t *testing.T) (*stubNode, string) {
	t.Helper()
	s := &stubNode{done: make(chan struct{})}
	dir := filepath.Join("..", "..", "httpapi", "console")
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/stats", s.stats)
	mux.Handle("/console/", http.StripPrefix("/console/", http.FileServer(http.Dir(dir))))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(dir, "index.html"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		close(s.done) // release held requests before Close waits for them
		srv.Close()
	})
	return s, srv.URL + "/"
}

// A node that stops answering /v1/stats must not leave the console showing
// its last good state forever: the poll gives up after a timeout, says the
// node is unreachable, and resumes once it answers again. A leaderless,
// not-ready node, and names with HTML in them, render as text.
func TestConsoleNoticesStalledNode(t *testing.T) {
	exe := browser(t)
	stub, url := startStub(t)
	ctx := newBrowser(t, exe)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#members tbody tr"))))

	poll(t, ctx, "not-ready badge", `document.getElementById("conn").textContent`,
		10*time.Second, func(s string) bool { return s == "not ready" })
	leader, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#leader")))
	require.NoError(t, err)
	require.Equal(t, "none", leader)
	injected, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#xss, #inj").length`))
	require.NoError(t, err)
	require.Zero(t, injected, "server text parsed as HTML")
	name, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#members tbody tr").cells[1].textContent`))
	require.NoError(t, err)
	require.Equal(t, `<img id="xss" src="x">`, name)

	stub.hang.Store(true)
	poll(t, ctx, "unreachable badge while the node does not answer", `document.getElementById("conn").textContent`,
		15*time.Second, func(s string) bool { return len(s) >= 11 && s[:11] == "unreachable" })

	stub.hang.Store(false)
	poll(t, ctx, "polling resumes", `document.getElementById("conn").textContent`,
		15*time.Second, func(s string) bool { return s == "not ready" })
}
