// Package consoletest drives the web console of a live kvd cluster in a
// headless Chromium (github.com/chromedp/chromedp). It has no production
// code. Outside CI the tests skip when no Chromium is installed; with CI=true
// a missing browser is a failure.
package consoletest
