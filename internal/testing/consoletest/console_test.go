package consoletest

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// browser finds a Chromium binary, or skips (fails under CI) without one.
func browser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium found on PATH (install the Debian package chromium)"
	if os.Getenv("KVD_REQUIRE_REFERENCE") != "" { // set by .ci/run, which installs it
		t.Fatal(msg + "; CI must run the browser test")
	}
	t.Skip(msg + "; skipping the browser test")
	return ""
}

// newBrowser starts a headless Chromium for the test.
func newBrowser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox, // CI containers run as root, where the sandbox cannot start
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})
	// The first action starts the browser, on a context without a deadline.
	require.NoError(t, chromedp.Do(ctx))
	return ctx
}

// memcacheLoad keeps a modest pipelined read/write load on addr until stop
// is closed: a set and ten gets per batch, a few hundred batches a second.
func memcacheLoad(t *testing.T, addr string, stop <-chan struct{}) *sync.WaitGroup {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer nc.Close()
		r := bufio.NewReader(nc)
		batch := "set load 0 0 5\r\nhello\r\n" + strings.Repeat("get load\r\n", 10)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := nc.Write([]byte(batch)); err != nil {
				t.Errorf("memcache load: %v", err)
				return
			}
			// STORED, then VALUE/data/END per get.
			for range 1 + 3*10 {
				if _, err := r.ReadString('\n'); err != nil {
					t.Errorf("memcache load: %v", err)
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return &wg
}

// screenshotPath is where the console screenshot goes: $KVD_CONSOLE_SCREENSHOT
// or a fixed name in the temporary directory (kept after the test).
func screenshotPath() string {
	if p := os.Getenv("KVD_CONSOLE_SCREENSHOT"); p != "" {
		return p
	}
	return filepath.Join(os.TempDir(), "kvd-console.png")
}

// poll evaluates js every 200ms until cond accepts its result or the
// deadline passes.
func poll[T any](t *testing.T, ctx context.Context, what, js string, within time.Duration, cond func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
		if err == nil && cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last value %v, err %v)", what, within, v, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestConsoleShowsLiveCluster(t *testing.T) {
	exe := browser(t)
	procs := kvdproc.StartCluster(t, 3)
	ctx := newBrowser(t, exe)
	p := procs[0]
	url := "http://" + p.HTTPAddr + "/"

	stop := make(chan struct{})
	load := memcacheLoad(t, p.MemcacheAddr, stop)
	defer func() {
		close(stop)
		load.Wait()
	}()

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#members tbody tr"))))

	// Three members, each named, one of them the leader.
	rows := poll(t, ctx, "three members with a leader",
		`Array.from(document.querySelectorAll("#members tbody tr")).map(tr => Array.from(tr.cells).map(td => td.textContent))`,
		15*time.Second, func(rows [][]string) bool {
			if len(rows) != 3 {
				return false
			}
			leaders := 0
			for _, r := range rows {
				if len(r) > 3 && r[3] == "leader" {
					leaders++
				}
			}
			return leaders == 1
		})
	var names []string
	for _, r := range rows {
		names = append(names, r[1])
	}
	require.ElementsMatch(t, []string{"n1", "n2", "n3"}, names, "rows: %v", rows)
	leader, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#leader")))
	require.NoError(t, err)
	require.NotContains(t, []string{"", "–", "none"}, leader)
	badge, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#conn")))
	require.NoError(t, err)
	require.Equal(t, "ready", badge)

	// The ops/s chart's memcache line rises under the load, on the node
	// whose console this is.
	last := poll(t, ctx, "memcache ops/s above zero on the chart", `document.getElementById("ops").dataset.last || ""`,
		20*time.Second, func(s string) bool {
			f, err := strconv.ParseFloat(strings.Split(s, ",")[0], 64)
			return err == nil && f > 0
		})
	t.Logf("ops/s chart: memcache, http, applied = %s", last)
	// A few more points so the screenshot shows a line, not a dot.
	poll(t, ctx, "ten chart points", `Number(document.getElementById("ops").dataset.points || 0)`,
		20*time.Second, func(n int) bool { return n >= 10 })

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	path := screenshotPath()
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("console screenshot: %s (%d bytes)", path, len(png))
	require.Greater(t, len(png), 10000, "a rendered page, not a blank one")
}

// TestConsoleActionsAskFirst checks the member actions: each asks for
// confirmation, cancel changes nothing, and a confirmed action either
// succeeds or shows the server's error text in the dialog.
func TestConsoleActionsAskFirst(t *testing.T) {
	exe := browser(t)
	procs := kvdproc.StartCluster(t, 3)
	ctx := newBrowser(t, exe)
	url := "http://" + procs[0].HTTPAddr + "/"
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#members tbody tr"))))
	poll(t, ctx, "a remove button per member", `document.querySelectorAll("#members button.remove").length`,
		15*time.Second, func(n int) bool { return n == 3 })
	open := `document.getElementById("confirm").open`

	// Remove: the dialog names the member and offers force; cancel closes it.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#members tbody tr:last-child button.remove")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	))
	title, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#confirm-title")))
	require.NoError(t, err)
	require.Regexp(t, `^Remove n\d from the cluster\?$`, title)
	forceShown, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!document.getElementById("confirm-force-row").hidden`))
	require.NoError(t, err)
	require.True(t, forceShown)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-cancel"))))
	poll(t, ctx, "dialog closed after cancel", open, 5*time.Second, func(o bool) bool { return !o })
	poll(t, ctx, "still three members", `document.querySelectorAll("#members tbody tr").length`,
		3*time.Second, func(n int) bool { return n == 3 })

	// Transfer leadership to a follower, confirmed.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#members button.transfer")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	))
	title, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#confirm-title")))
	require.NoError(t, err)
	require.Regexp(t, `^Transfer leadership to n\d\?$`, title)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-ok"))))
	type outcome struct {
		Open  bool   `json:"open"`
		Error string `json:"error"`
		Msg   string `json:"msg"`
		Busy  bool   `json:"busy"` // the request is in flight
	}
	out := poll(t, ctx, "the transfer's outcome",
		`({open: document.getElementById("confirm").open, error: document.getElementById("confirm-error").textContent, msg: document.getElementById("actionmsg").textContent, busy: document.getElementById("confirm-ok").disabled})`,
		30*time.Second, func(o outcome) bool { return (!o.Open && o.Msg != "") || o.Error != "" })
	require.Empty(t, out.Error, "the transfer failed")
	require.False(t, out.Open)
	target := strings.TrimSuffix(strings.TrimPrefix(title, "Transfer leadership to "), "?")
	require.Equal(t, "Leadership transferred to "+target+".", out.Msg)
	poll(t, ctx, "the console shows the new leader", `document.getElementById("leader").textContent`,
		15*time.Second, func(s string) bool { return strings.HasPrefix(s, target+" ") })

	// A refused removal shows the server's JSON error in the dialog. With
	// one voter down, removing any other one would leave two voters of
	// which one is reachable, so kvd refuses it without force. The member
	// to stop is neither this console's node nor the leader.
	leaderIdx := -1
	for i, p := range procs {
		if v := cluster(t, p.HTTPAddr); v.Self == v.Leader {
			leaderIdx = i
		}
	}
	require.GreaterOrEqual(t, leaderIdx, 0)
	downIdx := 1
	if leaderIdx == 1 {
		downIdx = 2
	}
	victimIdx := 3 - downIdx // the other member that is not this console's node
	down, victim := procs[downIdx].Name, procs[victimIdx].Name
	procs[downIdx].Kill()
	// Wait until the leader's view is settled: the stopped member unhealthy
	// and the others healthy, twice in a row an election timeout apart
	// (the leader re-evaluates member activity once per election timeout).
	settled := func() bool {
		for _, m := range cluster(t, procs[leaderIdx].HTTPAddr).Members {
			if (m.Name == down) != (m.Health == "unhealthy") {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(20 * time.Second)
	for streak := 0; streak < 2; {
		require.True(t, time.Now().Before(deadline), "the leader's view did not settle: %+v", cluster(t, procs[leaderIdx].HTTPAddr))
		if settled() {
			streak++
		} else {
			streak = 0
		}
		time.Sleep(600 * time.Millisecond) // kvdproc's election timeout is 500ms
	}
	t.Logf("leader %s, stopped %s, removing %s; leader's view: %+v", procs[leaderIdx].Name, down, victim, cluster(t, procs[leaderIdx].HTTPAddr))
	// The button is found by the row's name, whatever the row order.
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		for (const tr of document.querySelectorAll("#members tbody tr")) {
			if (tr.cells[1].textContent === `+strconv.Quote(victim)+`) { tr.querySelector("button.remove").click(); return true; }
		}
		throw new Error("no row for the member");
	})()`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#confirm"))))
	title, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#confirm-title")))
	require.NoError(t, err)
	require.Equal(t, "Remove "+victim+" from the cluster?", title)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-ok"))))
	out = poll(t, ctx, "the removal's outcome",
		`({open: document.getElementById("confirm").open, error: document.getElementById("confirm-error").textContent, msg: document.getElementById("actionmsg").textContent})`,
		15*time.Second, func(o outcome) bool { return o.Error != "" || !o.Open })
	t.Logf("removing %s with %s down: dialog shows %q", victim, down, out.Error)
	require.True(t, out.Open, "the removal was accepted: %+v", out)
	require.Contains(t, out.Error, "(HTTP 409)")
	require.Contains(t, out.Error, "force")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-cancel"))))
}

type clusterView struct {
	Self    string `json:"self"`
	Leader  string `json:"leader"`
	Members []struct {
		Name   string `json:"name"`
		Health string `json:"health"`
	} `json:"members"`
}

func cluster(t *testing.T, httpAddr string) clusterView {
	t.Helper()
	var v clusterView
	kvdproc.GetJSON(t, httpAddr, "/v1/cluster", &v)
	return v
}
