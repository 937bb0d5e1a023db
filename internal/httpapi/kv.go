package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/kv"
)

// The key-value API.
//
//	GET    /v1/kv/{key}[?consistency=linearizable|lease|local]
//	       (default: the node's --read-consistency). linearizable and
//	       lease both name the node's linearizable path, which is
//	       ReadIndex, or the leader's read lease on a node started with
//	       --read-consistency lease: a query picks linearizable or local,
//	       not whether the lease is used.
//	       200 value as the body; ETag "<cas>", X-Kvd-Flags, X-Kvd-Expires
//	       (absolute Unix seconds, absent if never); 412 on If-Match
//	       matching no tag (strong comparison; * any); else 304 on
//	       If-None-Match matching the ETag; 404 missing.
//	PUT    /v1/kv/{key}[?flags=N][&ttl=N]    body = value
//	       flags (uint32) and ttl (memcached exptime: 0 never, up to 30 days
//	       relative seconds, larger an absolute Unix time, negative already
//	       expired) also as X-Kvd-Flags / X-Kvd-TTL headers.
//	       If-Match: "<cas>" stores only if the item's CAS is that (cas);
//	       If-Match: * only if it exists (replace); If-None-Match: * only if
//	       it does not (add). 204 stored, with the new item's ETag (none
//	       when it was stored already expired, ttl < 0); 412
//	       precondition failed; a Content-Range (partial PUT) is a 400, a
//	       Content-Encoding other than identity a 415.
//	DELETE /v1/kv/{key}   204 deleted; 404 missing.
//	GET    /v1/kv?prefix=P&after=K&limit=N[&consistency=…]
//	       keys in byte order with their metadata (not values), JSON.
//
// Keys are percent-decoded, 1 to 250 bytes. A key PUT creates obeys
// memcached's documented rule: no control characters or spaces. GET, HEAD,
// DELETE and a listing's prefix take any key the memcache port can store,
// which, like memcached, splits a line on spaces only: every byte but a
// space or a newline, so that every key a listing shows can be read and
// deleted (after, a position in the listing, takes any bytes up to 250).
// Unknown or repeated query parameters are errors, so a typo never silently
// falls back to a default.
const (
	kvPrefix = "/v1/kv/"

	// HeaderFlags carries the item's 32-bit client flags.
	HeaderFlags = "X-Kvd-Flags"
	// HeaderTTL carries memcached's exptime on PUT.
	HeaderTTL = "X-Kvd-TTL"
	// HeaderExpires carries the item's absolute expiry on GET: the first Unix
	// second at which it is gone.
	HeaderExpires = "X-Kvd-Expires"
)

// inputError is a client mistake, answered without touching the service.
type inputError struct {
	status    int
	code, msg string
}

func badRequest(code, format string, args ...any) *inputError {
	return &inputError{http.StatusBadRequest, code, fmt.Sprintf(format, args...)}
}

// reject answers e and returns the result label for kvd_requests_total.
func reject(w http.ResponseWriter, e *inputError) string {
	writeError(w, e.status, e.code, e.msg)
	if e.status == http.StatusRequestEntityTooLarge {
		return "too_large"
	}
	return "bad_request"
}

func (a *api) serveKey(w http.ResponseWriter, r *http.Request, rawKey string) {
	var cmd, result string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		cmd, result = "get", a.getKey(w, r, rawKey)
	case http.MethodPut:
		cmd, result = "put", a.putKey(w, r, rawKey)
	case http.MethodDelete:
		cmd, result = "delete", a.deleteKey(w, r, rawKey)
	default:
		methodNotAllowed(w, "GET PUT DELETE")
		return
	}
	if a.opts.Metrics != nil {
		a.opts.Metrics.CountRequest("http", cmd, result)
	}
}

// ready refuses work the node cannot do correctly yet (DESIGN decision 7):
// writes it cannot commit and linearizable reads before it knows a leader.
func (a *api) ready() error {
	if !a.svc.Status().Ready {
		return kv.ErrNotReady
	}
	return nil
}

func (a *api) getKey(w http.ResponseWriter, r *http.Request, rawKey string) string {
	key, e := parseKey(rawKey, keyToReach)
	if e != nil {
		return reject(w, e)
	}
	q, e := parseQuery(r, "consistency")
	if e != nil {
		return reject(w, e)
	}
	level, e := a.consistencyOf(q)
	if e != nil {
		return reject(w, e)
	}
	// RFC 9110 13.1.1: If-Match is evaluated before any method, reads
	// included, with the strong comparison (a weak tag matches nothing).
	var im, inm []etag
	if v := r.Header.Values("If-Match"); len(v) > 0 {
		if im, e = parseETags(v, false); e != nil {
			return reject(w, e)
		}
	}
	if v := r.Header.Values("If-None-Match"); len(v) > 0 {
		if inm, e = parseETags(v, true); e != nil {
			return reject(w, e)
		}
	}
	if level != kv.Local {
		if err := a.ready(); err != nil {
			return a.failErr(w, r, err)
		}
	}
	if err := a.svc.Barrier(r.Context(), level); err != nil {
		return a.failErr(w, r, err)
	}
	it, ok, err := a.svc.Get(key)
	if err != nil {
		return a.failErr(w, r, err)
	}
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "key not found")
		return "miss"
	}
	h := w.Header()
	h.Set("ETag", formatETag(it.CAS))
	h.Set(HeaderFlags, strconv.FormatUint(uint64(it.Flags), 10))
	if it.ExpiresAt != 0 {
		h.Set(HeaderExpires, strconv.FormatInt(it.ExpirySec(), 10))
	}
	h.Set("Cache-Control", "no-cache")
	// RFC 9110 13.2.2: If-Match first, then If-None-Match.
	if len(im) > 0 && !matchETag(im, it.CAS) {
		writeError(w, http.StatusPreconditionFailed, "precondition_failed", "the item's ETag matches no If-Match tag")
		return "precondition_failed"
	}
	if matchETag(inm, it.CAS) {
		w.WriteHeader(http.StatusNotModified)
		return "not_modified"
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(it.Value)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(it.Value)
	}
	return "hit"
}

func (a *api) putKey(w http.ResponseWriter, r *http.Request, rawKey string) string {
	key, e := parseKey(rawKey, keyToStore)
	if e != nil {
		return reject(w, e)
	}
	q, e := parseQuery(r, "flags", "ttl")
	if e != nil {
		return reject(w, e)
	}
	c := &command.Command{Op: command.OpSet, Key: key}
	flags, e := paramOrHeader(q, r.Header, "flags", HeaderFlags)
	if e != nil {
		return reject(w, e)
	}
	if flags != "" {
		v, err := strconv.ParseUint(flags, 10, 32)
		if err != nil {
			return reject(w, badRequest("bad_flags", "flags %q: want an unsigned 32-bit decimal number", flags))
		}
		c.Flags = uint32(v)
	}
	ttl, e := paramOrHeader(q, r.Header, "ttl", HeaderTTL)
	if e != nil {
		return reject(w, e)
	}
	if ttl != "" {
		v, err := strconv.ParseInt(ttl, 10, 64)
		if err != nil {
			return reject(w, badRequest("bad_ttl", "ttl %q: want a decimal number of seconds (memcached exptime)", ttl))
		}
		c.Exptime = v
	}
	if len(r.Header.Values("Content-Range")) > 0 {
		// RFC 9110: the body is likely a part, which would replace the
		// whole value.
		return reject(w, badRequest("bad_request", "Content-Range: partial PUT is not supported; send the whole value"))
	}
	for _, ce := range r.Header.Values("Content-Encoding") {
		for part := range strings.SplitSeq(ce, ",") {
			if p := strings.TrimSpace(part); p != "" && !strings.EqualFold(p, "identity") {
				// kvd decodes no content coding: the encoded bytes stored as
				// the value would read back as other bytes than the client
				// meant (RFC 9110 8.4).
				return reject(w, &inputError{http.StatusUnsupportedMediaType, "unsupported_media_type",
					fmt.Sprintf("Content-Encoding %q: send the value uncoded", p)})
			}
		}
	}
	if e := writeCondition(r.Header, c); e != nil {
		return reject(w, e)
	}
	maxSize := a.maxItemSize()
	if r.ContentLength > int64(maxSize) {
		return reject(w, tooLarge(r.ContentLength, maxSize))
	}
	if err := a.ready(); err != nil {
		return a.failErr(w, r, err)
	}
	if c.Value, e = readBody(w, r, maxSize); e != nil {
		return reject(w, e)
	}
	res, err := a.svc.Do(r.Context(), c)
	if err != nil {
		return a.failErr(w, r, err)
	}
	switch {
	case res.Status == command.StatusStored:
		if res.CAS != 0 {
			w.Header().Set("ETag", formatETag(res.CAS))
		}
		w.WriteHeader(http.StatusNoContent)
		return "stored"
	case res.Status == command.StatusNotStored && c.Op == command.OpAdd:
		writeError(w, http.StatusPreconditionFailed, "precondition_failed", "key exists (If-None-Match: *)")
		return "precondition_failed"
	case res.Status == command.StatusNotStored && c.Op == command.OpReplace,
		res.Status == command.StatusNotFound && c.Op == command.OpCAS:
		writeError(w, http.StatusPreconditionFailed, "precondition_failed", "key not found (If-Match)")
		return "precondition_failed"
	case res.Status == command.StatusExists && c.Op == command.OpCAS:
		writeError(w, http.StatusPreconditionFailed, "cas_mismatch", "the item changed: its CAS token no longer matches If-Match")
		return "cas_mismatch"
	}
	return a.failErr(w, r, fmt.Errorf("put: unexpected result %s for %s", res.Status, c.Op))
}

func (a *api) deleteKey(w http.ResponseWriter, r *http.Request, rawKey string) string {
	key, e := parseKey(rawKey, keyToReach)
	if e != nil {
		return reject(w, e)
	}
	if _, e := parseQuery(r); e != nil {
		return reject(w, e)
	}
	if len(r.Header.Values("If-Match")) > 0 || len(r.Header.Values("If-None-Match")) > 0 {
		// The log has no conditional delete; ignoring the precondition would
		// delete what the client meant to protect.
		return reject(w, badRequest("bad_precondition", "conditional DELETE (If-Match, If-None-Match) is not supported"))
	}
	if err := a.ready(); err != nil {
		return a.failErr(w, r, err)
	}
	res, err := a.svc.Do(r.Context(), &command.Command{Op: command.OpDelete, Key: key})
	if err != nil {
		return a.failErr(w, r, err)
	}
	switch res.Status {
	case command.StatusDeleted:
		w.WriteHeader(http.StatusNoContent)
		return "deleted"
	case command.StatusNotFound:
		writeError(w, http.StatusNotFound, "not_found", "key not found")
		return "not_found"
	}
	return a.failErr(w, r, fmt.Errorf("delete: unexpected result %s", res.Status))
}

// listItem is one key of a listing. Key is the key when it is valid UTF-8
// (JSON strings cannot carry other bytes); otherwise KeyBase64 carries it.
type listItem struct {
	Key       string `json:"key,omitempty"`
	KeyBase64 []byte `json:"key_base64,omitempty"`
	Flags     uint32 `json:"flags"`
	CAS       uint64 `json:"cas"`
	// Expires is the first Unix second at which the item is gone; 0 means
	// never.
	Expires int64 `json:"expires"`
	Size    int   `json:"size"`
}

type listResponse struct {
	Items []listItem `json:"items"`
	// Truncated: more keys match; Next is the URL of the next page.
	Truncated bool   `json:"truncated"`
	Next      string `json:"next,omitempty"`
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	result := a.listKeys(w, r)
	if a.opts.Metrics != nil {
		a.opts.Metrics.CountRequest("http", "list", result)
	}
}

func (a *api) listKeys(w http.ResponseWriter, r *http.Request) string {
	q, e := parseQuery(r, "prefix", "after", "limit", "consistency")
	if e != nil {
		return reject(w, e)
	}
	prefix, after := q.Get("prefix"), q.Get("after")
	if e := checkKeyBytes("prefix", prefix, keyToReach); e != nil {
		return reject(w, e)
	}
	// after is a position in key order, not a key to store: any bytes will
	// do. The memcache port splits keys on spaces only, as memcached does,
	// so a page may end on a key with control bytes, and the next link
	// carries it here.
	if len(after) > command.MaxKeyLen {
		return reject(w, badRequest("bad_key", "after: %d bytes exceeds the limit of %d", len(after), command.MaxKeyLen))
	}
	limit := DefaultListLimit
	if q.Has("limit") {
		s := q.Get("limit")
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxListLimit {
			return reject(w, badRequest("bad_limit", "limit %q: want a number from 1 to %d", s, MaxListLimit))
		}
		limit = n
	}
	level, e := a.consistencyOf(q)
	if e != nil {
		return reject(w, e)
	}
	if level != kv.Local {
		if err := a.ready(); err != nil {
			return a.failErr(w, r, err)
		}
	}
	// One more than asked tells whether another page exists.
	items, err := a.svc.List(r.Context(), level, []byte(prefix), []byte(after), limit+1)
	if err != nil {
		return a.failErr(w, r, err)
	}
	resp := listResponse{Items: make([]listItem, 0, min(len(items), limit))}
	if len(items) > limit {
		items = items[:limit]
		next := url.Values{"after": {string(items[limit-1].Key)}, "limit": {strconv.Itoa(limit)}}
		if prefix != "" {
			next.Set("prefix", prefix)
		}
		if c := q.Get("consistency"); c != "" {
			next.Set("consistency", c)
		}
		resp.Truncated, resp.Next = true, "/v1/kv?"+next.Encode()
	}
	for _, it := range items {
		li := listItem{Flags: it.Flags, CAS: it.CAS, Expires: it.Expiry, Size: it.Size}
		if utf8.Valid(it.Key) {
			li.Key = string(it.Key)
		} else {
			li.KeyBase64 = it.Key
		}
		resp.Items = append(resp.Items, li)
	}
	writeJSON(w, http.StatusOK, resp)
	return "ok"
}

func (a *api) maxItemSize() int {
	if n := a.svc.Config().MaxItemSize; n > 0 {
		return n
	}
	return 1 << 20
}

// keyRule is which bytes a key may hold.
type keyRule uint8

const (
	// keyToStore is memcached's documented rule, for keys HTTP creates: no
	// control characters or spaces.
	keyToStore keyRule = iota
	// keyToReach admits every key the memcache port can store: it splits a
	// line on spaces only and a line ends at '\n', so any other byte may be
	// in a key. Reads and deletes take these, else a key a memcache client
	// wrote with a control byte would be listed yet neither readable nor
	// deletable over HTTP.
	keyToReach
)

// parseKey percent-decodes a key from the path and checks it by rule.
func parseKey(raw string, rule keyRule) ([]byte, *inputError) {
	key, err := url.PathUnescape(raw)
	if err != nil {
		return nil, badRequest("bad_key", "key: bad percent-encoding")
	}
	if key == "" {
		return nil, badRequest("bad_key", "key: must not be empty")
	}
	if e := checkKeyBytes("key", key, rule); e != nil {
		return nil, e
	}
	return []byte(key), nil
}

// checkKeyBytes applies the key length limit and rule (empty allowed: the
// caller decides whether it may be).
func checkKeyBytes(what, k string, rule keyRule) *inputError {
	if len(k) > command.MaxKeyLen {
		return badRequest("bad_key", "%s: %d bytes exceeds the limit of %d", what, len(k), command.MaxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if rule == keyToReach && c != ' ' && c != '\n' {
			continue
		}
		if c <= ' ' || c == 0x7f {
			return badRequest("bad_key", "%s: control characters and spaces are not allowed (byte %d is 0x%02x)", what, i, c)
		}
	}
	return nil
}

// parseQuery parses the query string strictly: bad encoding, parameters not
// in allowed and repeated parameters are errors.
func parseQuery(r *http.Request, allowed ...string) (url.Values, *inputError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("bad_request", "query string: %v", err)
	}
	for k, v := range q {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			if len(allowed) == 0 {
				return nil, badRequest("bad_request", "unknown query parameter %q: this endpoint takes none", k)
			}
			return nil, badRequest("bad_request", "unknown query parameter %q (known: %s)", k, strings.Join(allowed, ", "))
		}
		if len(v) > 1 {
			return nil, badRequest("bad_request", "query parameter %q given %d times", k, len(v))
		}
	}
	return q, nil
}

// paramOrHeader reads a setting given as a query parameter or a header; both
// are fine if they agree.
func paramOrHeader(q url.Values, h http.Header, param, header string) (string, *inputError) {
	pv := q.Get(param)
	hv := h.Values(header)
	if len(hv) > 1 {
		return "", badRequest("bad_"+param, "header %s given %d times", header, len(hv))
	}
	if (q.Has(param) && pv == "") || (len(hv) == 1 && hv[0] == "") {
		return "", badRequest("bad_"+param, "%s: empty value", param)
	}
	switch {
	case len(hv) == 0:
		return pv, nil
	case pv == "" && !q.Has(param):
		return hv[0], nil
	case pv != hv[0]:
		return "", badRequest("bad_"+param, "%s=%q and header %s: %q disagree", param, pv, header, hv[0])
	}
	return pv, nil
}

// consistencyOf is the read's consistency: the query's, else the node's
// --read-consistency, the default of its memcache port too.
func (a *api) consistencyOf(q url.Values) (kv.Consistency, *inputError) {
	if !q.Has("consistency") {
		return a.svc.Config().ReadConsistency, nil
	}
	s := q.Get("consistency")
	level, err := kv.ParseConsistency(s)
	if err != nil || s == "" {
		return 0, badRequest("bad_consistency", "consistency %q: want linearizable, lease or local", s)
	}
	return level, nil
}

// writeCondition turns PUT's preconditions into the operation to propose.
func writeCondition(h http.Header, c *command.Command) *inputError {
	im, inm := h.Values("If-Match"), h.Values("If-None-Match")
	switch {
	case len(im) > 0 && len(inm) > 0:
		return badRequest("bad_precondition", "If-Match and If-None-Match together are not supported")
	case len(inm) > 0:
		tags, e := parseETags(inm, true)
		if e != nil {
			return e
		}
		if len(tags) != 1 || !tags[0].any {
			return badRequest("bad_precondition", "PUT supports If-None-Match: * only (store only if absent)")
		}
		c.Op = command.OpAdd
	case len(im) > 0:
		tags, e := parseETags(im, false)
		if e != nil {
			return e
		}
		if len(tags) != 1 {
			return badRequest("bad_precondition", "If-Match must carry exactly one CAS token or *")
		}
		if tags[0].none {
			// No item has it: nothing to propose (RFC 9110 13.1.1).
			return &inputError{http.StatusPreconditionFailed, "precondition_failed",
				fmt.Sprintf("no item has the ETag %s (kvd's are CAS tokens, such as \"42\")", tags[0].raw)}
		}
		if tags[0].any {
			c.Op = command.OpReplace
		} else {
			c.Op, c.CAS = command.OpCAS, tags[0].cas
		}
	}
	return nil
}

// etag is one entry of an If-Match / If-None-Match list.
type etag struct {
	any bool // *
	cas uint64
	// none: a well-formed tag no kvd item has (not a CAS token, as a
	// proxy's "42-gzip"; or weak where the strong comparison applies). It
	// matches nothing: a 412 for If-Match, the plain answer for
	// If-None-Match (RFC 9110 13.1.1, 13.1.2), not a 400.
	none bool
	raw  string // as sent, for none
}

// matchETag reports whether any of tags matches the item whose CAS is cas.
func matchETag(tags []etag, cas uint64) bool {
	for _, t := range tags {
		if t.any || (!t.none && t.cas == cas) {
			return true
		}
	}
	return false
}

func formatETag(cas uint64) string { return `"` + strconv.FormatUint(cas, 10) + `"` }

// parseETags reads a comma-separated list of `*`, `"<cas>"` and (as a
// convenience for curl users) a bare `<cas>`. Weak tags (W/"…") match by
// their CAS only where the weak comparison applies (If-None-Match); where
// it does not, and for any other quoted tag, they match nothing. An
// unquoted word other than a number is malformed (400).
func parseETags(values []string, weakOK bool) ([]etag, *inputError) {
	var out []etag
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			s := strings.TrimSpace(part)
			if s == "" {
				continue
			}
			if s == "*" {
				out = append(out, etag{any: true})
				continue
			}
			raw := s
			rest, weak := strings.CutPrefix(s, "W/")
			quoted := len(rest) >= 2 && rest[0] == '"' && rest[len(rest)-1] == '"'
			if quoted {
				rest = rest[1 : len(rest)-1]
			}
			cas, err := strconv.ParseUint(rest, 10, 64)
			switch {
			case !quoted && (weak || err != nil):
				return nil, badRequest("bad_precondition", "ETag %q: want a quoted tag such as \"42\" (a CAS token), or *", raw)
			case err != nil || (weak && !weakOK):
				out = append(out, etag{none: true, raw: raw})
			default:
				out = append(out, etag{cas: cas})
			}
		}
	}
	if len(out) == 0 {
		return nil, badRequest("bad_precondition", "empty precondition header")
	}
	return out, nil
}

func tooLarge(n int64, maxSize int) *inputError {
	msg := fmt.Sprintf("value exceeds the maximum item size of %d bytes", maxSize)
	if n > 0 {
		msg = fmt.Sprintf("value of %d bytes exceeds the maximum item size of %d bytes", n, maxSize)
	}
	return &inputError{http.StatusRequestEntityTooLarge, "too_large", msg}
}

// readBody reads at most maxSize bytes; more is a 413, never an unbounded read.
func readBody(w http.ResponseWriter, r *http.Request, maxSize int) ([]byte, *inputError) {
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength)) // bounded by maxSize above
	}
	// Hand MaxBytesReader net/http's own writer (not our recorder) so that
	// it can mark the connection for closing once the limit is hit.
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, int64(maxSize)))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge(-1, maxSize)
	case err != nil:
		return nil, badRequest("bad_request", "reading the body: %v", err)
	}
	return buf.Bytes(), nil
}
