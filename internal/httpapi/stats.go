package httpapi

import (
	"net/http"
	"time"

	"github.com/kvd-project/kvd/internal/metrics"
)

// Stats is the body of GET /v1/stats: a small poll-friendly summary of this
// node for the console (Prometheus should scrape /metrics instead).
type Stats struct {
	// TimeMs is this node's clock (Unix ms) when the stats were taken; the
	// console divides counter deltas by its deltas.
	TimeMs  int64         `json:"time_ms"`
	Name    string        `json:"name,omitempty"`
	Cluster ClusterStatus `json:"cluster"`
	Storage StorageStats  `json:"storage"`
	// Totals is absent when the node runs without metrics.
	Totals *metrics.Totals `json:"totals,omitempty"`
}

// StorageStats is the state store's size.
type StorageStats struct {
	Items      int64  `json:"items"`
	ValueBytes int64  `json:"value_bytes"`
	DiskBytes  uint64 `json:"disk_bytes"`
}

func (a *api) stats(w http.ResponseWriter, _ *http.Request) {
	fs := a.svc.StoreStats()
	s := Stats{
		TimeMs:  time.Now().UnixMilli(),
		Name:    a.opts.Self.Name,
		Cluster: a.clusterStatus(),
		Storage: StorageStats{Items: max(fs.Items, 0), ValueBytes: max(fs.Bytes, 0), DiskBytes: fs.DiskBytes},
	}
	if a.opts.Metrics != nil {
		t := a.opts.Metrics.Totals()
		s.Totals = &t
	}
	writeJSON(w, http.StatusOK, s)
}
