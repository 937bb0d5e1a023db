package httpapi_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The console writes server data only as text: no API that parses HTML or
// runs strings as code may appear in its script, and the page has no inline
// script or handler (the Content-Security-Policy would block them anyway).
func TestConsoleNeverParsesDataAsHTML(t *testing.T) {
	js, err := os.ReadFile("console/console.js")
	require.NoError(t, err)
	for _, banned := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setTimeout(\"", "createContextualFragment"} {
		require.NotContains(t, string(js), banned)
	}
	html, err := os.ReadFile("console/index.html")
	require.NoError(t, err)
	require.NotRegexp(t, regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]`), string(html), "inline script")
	require.NotRegexp(t, regexp.MustCompile(`\son[a-z]+\s*=`), string(html), "inline event handler")
	// The member actions go through the confirmation dialog.
	require.Contains(t, string(html), `<dialog id="confirm"`)
	require.Contains(t, string(js), `"/v1/cluster/transfer-leader"`)
	require.Contains(t, string(js), `"/v1/cluster/members/" + encodeURIComponent(m.name)`)
}

// The cluster endpoints take a POST only as application/json (a page on
// another site cannot send that without a preflight): every console POST
// has a body, and a body goes out declared as JSON.
func TestConsolePostsJSON(t *testing.T) {
	js, err := os.ReadFile("console/console.js")
	require.NoError(t, err)
	posts := regexp.MustCompile(`method: "POST"[^\n]*`).FindAllString(string(js), -1)
	require.NotEmpty(t, posts)
	for _, p := range posts {
		require.Contains(t, p, "body: {", "a console POST without a body would go out without a Content-Type")
	}
	require.Regexp(t, regexp.MustCompile(`if \(a\.body !== undefined\) \{\s*init\.headers = \{ "Content-Type": "application/json" \};`), string(js))
}
