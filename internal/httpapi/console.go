package httpapi

import (
	"embed"
	"net/http"
)

// The web console: static files embedded in the binary (no build step), which
// poll /v1/cluster and /v1/stats from the browser.
//
//go:embed console/index.html console/console.js console/console.css
var consoleFS embed.FS

// consoleRoutes maps each console path to its handler.
func consoleRoutes() map[string]func(http.ResponseWriter, *http.Request) {
	files := map[string]struct{ name, ctype string }{
		"/":                    {"console/index.html", "text/html; charset=utf-8"},
		"/console/console.js":  {"console/console.js", "text/javascript; charset=utf-8"},
		"/console/console.css": {"console/console.css", "text/css; charset=utf-8"},
	}
	out := make(map[string]func(http.ResponseWriter, *http.Request), len(files))
	for path, f := range files {
		body, err := consoleFS.ReadFile(f.name)
		if err != nil {
			panic("httpapi: console file missing from the embed: " + f.name) // a build error, not a runtime one
		}
		out[path] = func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h.Set("Content-Type", f.ctype)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Cache-Control", "no-cache")
			h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
			h.Set("X-Frame-Options", "DENY")
			h.Set("Referrer-Policy", "no-referrer")
			_, _ = w.Write(body)
		}
	}
	return out
}
