package httpapi

import (
	"context"
	"io"
	"net/http"
	"time"
)

// Snapshots serves GET /v1/snapshot, the stream `kvd snapshot save`
// writes to a file (docs/backup.md). The node implements it.
type Snapshots interface {
	// WriteSnapshot takes a linearizable read barrier, so that every
	// write acknowledged before the call is in the snapshot, then writes
	// the snapshot to w. It calls begin once, before its first byte: an
	// error before begin is answered as a status; one after it can only
	// cut the stream short, which the reader of the file detects.
	WriteSnapshot(ctx context.Context, begin func(), w io.Writer) error
}

// snapshotRoutes adds GET /v1/snapshot when the node serves snapshots.
func (a *api) snapshotRoutes() {
	if a.opts.Snapshots == nil {
		return
	}
	a.routes["/v1/snapshot"] = route{name: "snapshot", methods: "GET", serve: a.snapshot, noQuery: true}
}

func (a *api) snapshot(w http.ResponseWriter, r *http.Request) {
	if a.opts.Witness != nil {
		writeError(w, http.StatusMisdirectedRequest, "witness", a.opts.Witness())
		return
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "application/octet-stream")
		return
	}
	// The node's write deadline counts from the first byte and would cut
	// a long stream: each write extends it instead, so only a client that
	// stops reading for that long is cut off.
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), d: 2*a.svc.Config().RequestTimeout + 10*time.Second}
	started := false
	err := a.opts.Snapshots.WriteSnapshot(r.Context(), func() {
		started = true
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
	}, sw)
	switch {
	case err == nil:
		return
	case !started:
		a.failErr(w, r, err)
	default:
		// The status is sent: end the stream without its trailer, and
		// without the chunked encoding's terminator, so the client cannot
		// take what it got for a whole snapshot.
		a.logger.Warn("snapshot stream failed", "err", err, "remote", r.RemoteAddr)
		panic(http.ErrAbortHandler)
	}
}

// streamWriter extends the connection's write deadline before each write.
type streamWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (s *streamWriter) Write(b []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.d))
	return s.w.Write(b)
}
