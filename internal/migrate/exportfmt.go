package migrate

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// The export format (docs/backup.md, "Export format") is JSON Lines: one
// JSON object per line, "\n"-terminated. The first line is a header, the
// last a trailer with the item count, so that a cut file is an error
// rather than a silently smaller import; every line between is an item.
// Plain JSON keeps the file readable by jq and any language's standard
// library; base64 keeps values byte-exact.

// ExportFormat and ExportVersion name the format in its header line.
const (
	ExportFormat  = "kvd-export"
	ExportVersion = 1
)

// ExportHeader is the first line.
type ExportHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Where the items come from: kvd's version, the member, its cluster
	// and the applied index of the snapshot they were read from.
	KVDVersion string `json:"kvd_version,omitempty"`
	Member     string `json:"member,omitempty"`
	ClusterID  string `json:"cluster_id,omitempty"`
	Applied    uint64 `json:"applied_index,omitempty"`
	Created    string `json:"created,omitempty"`
}

// exportLine is an item line or the trailer. An item's key is "key" when
// it is valid UTF-8 without control characters, else "key_b64".
type exportLine struct {
	Key      *string `json:"key,omitempty"`
	KeyB64   *string `json:"key_b64,omitempty"`
	Flags    *uint32 `json:"flags,omitempty"`
	Exptime  *int64  `json:"exptime,omitempty"`
	ValueB64 *string `json:"value_b64,omitempty"`
	End      bool    `json:"end,omitempty"`
	Items    *uint64 `json:"items,omitempty"`
}

// itemLine is how an item is written: every field, always.
type itemLine struct {
	Key      string `json:"key,omitempty"`
	KeyB64   string `json:"key_b64,omitempty"`
	Flags    uint32 `json:"flags"`
	Exptime  int64  `json:"exptime"`
	ValueB64 string `json:"value_b64"`
}

type trailerLine struct {
	End   bool   `json:"end"`
	Items uint64 `json:"items"`
}

// ExportRecord is one item of an export file.
type ExportRecord struct {
	Key   []byte
	Flags uint32
	// Exptime is the absolute expiry in Unix seconds; 0: never.
	Exptime int64
	Value   []byte
}

// ExportWriter writes the format. It buffers; Close writes the trailer
// and flushes (it does not close the underlying writer).
type ExportWriter struct {
	w     *bufio.Writer
	enc   *json.Encoder
	items uint64
}

// NewExportWriter writes the header line.
func NewExportWriter(w io.Writer, h ExportHeader) (*ExportWriter, error) {
	h.Format, h.Version = ExportFormat, ExportVersion
	bw := bufio.NewWriterSize(w, 256<<10)
	ew := &ExportWriter{w: bw, enc: json.NewEncoder(bw)}
	ew.enc.SetEscapeHTML(false)
	if err := ew.enc.Encode(h); err != nil {
		return nil, fmt.Errorf("export header: %w", err)
	}
	return ew, nil
}

// Add writes one item line.
func (w *ExportWriter) Add(r ExportRecord) error {
	if len(r.Key) == 0 || len(r.Key) > maxKeyLen {
		return fmt.Errorf("export: a key of %d bytes (1..%d)", len(r.Key), maxKeyLen)
	}
	if r.Exptime < 0 {
		return fmt.Errorf("export: key %q: negative exptime %d", truncate(r.Key), r.Exptime)
	}
	l := itemLine{Flags: r.Flags, Exptime: r.Exptime, ValueB64: base64.StdEncoding.EncodeToString(r.Value)}
	if plainKey(r.Key) {
		l.Key = string(r.Key)
	} else {
		l.KeyB64 = base64.StdEncoding.EncodeToString(r.Key)
	}
	if err := w.enc.Encode(l); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	w.items++
	return nil
}

// Close writes the trailer and flushes; it returns the items written.
func (w *ExportWriter) Close() (uint64, error) {
	if err := w.enc.Encode(trailerLine{End: true, Items: w.items}); err != nil {
		return w.items, fmt.Errorf("export trailer: %w", err)
	}
	if err := w.w.Flush(); err != nil {
		return w.items, fmt.Errorf("export: %w", err)
	}
	return w.items, nil
}

// plainKey reports whether key survives as a JSON string both ways and
// reads plainly: valid UTF-8 without control characters.
func plainKey(key []byte) bool {
	if !utf8.Valid(key) {
		return false
	}
	for _, c := range key {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// ErrExportFormat is a file that is not a well-formed export (wrapped
// with the line where it was found).
var ErrExportFormat = errors.New("malformed kvd export file")

// maxExportLine bounds one line: the largest value, base64-encoded, and
// room for the rest.
const maxExportLine = MaxValueLen/3*4 + 4 + 4096

// ExportReader reads the format. It bounds every line before it
// decodes it, and checks the trailer's count against the items read.
type ExportReader struct {
	br     *bufio.Reader
	hdr    ExportHeader
	line   int
	items  uint64
	done   bool
	buf    []byte
	maxLen int
}

// NewExportReader reads and checks the header line.
func NewExportReader(r io.Reader) (*ExportReader, error) {
	er := &ExportReader{br: bufio.NewReaderSize(r, 256<<10), maxLen: maxExportLine}
	b, err := er.readLine()
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &er.hdr); err != nil || er.hdr.Format != ExportFormat {
		return nil, fmt.Errorf("%w: line 1 is not a %s header", ErrExportFormat, ExportFormat)
	}
	if er.hdr.Version < 1 || er.hdr.Version > ExportVersion {
		return nil, fmt.Errorf("%w: version %d (this kvd reads up to %d)", ErrExportFormat, er.hdr.Version, ExportVersion)
	}
	return er, nil
}

// Header is the file's header line.
func (r *ExportReader) Header() ExportHeader { return r.hdr }

// Items is how many items have been read.
func (r *ExportReader) Items() uint64 { return r.items }

// readLine reads one line without its "\n"; it grows the buffer only as
// bytes arrive and refuses a line over the bound.
func (r *ExportReader) readLine() ([]byte, error) {
	r.line++
	r.buf = r.buf[:0]
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(r.buf)+len(frag) > r.maxLen {
			return nil, fmt.Errorf("%w: line %d is longer than %d bytes", ErrExportFormat, r.line, r.maxLen)
		}
		r.buf = append(r.buf, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: cut short at line %d (no trailer line)", ErrExportFormat, r.line)
		}
		if err != nil {
			return nil, fmt.Errorf("read export file: %w", err)
		}
		return r.buf[:len(r.buf)-1], nil
	}
}

// Next returns the next item, or io.EOF once the trailer was read and its
// count matches; the record's slices are its own.
func (r *ExportReader) Next() (ExportRecord, error) {
	if r.done {
		return ExportRecord{}, io.EOF
	}
	b, err := r.readLine()
	if err != nil {
		return ExportRecord{}, err
	}
	bad := func(what string, args ...any) error {
		return fmt.Errorf("%w: line %d: %s", ErrExportFormat, r.line, fmt.Sprintf(what, args...))
	}
	var l exportLine
	if err := json.Unmarshal(b, &l); err != nil {
		return ExportRecord{}, bad("%v", err)
	}
	if l.End {
		if l.Items == nil || *l.Items != r.items {
			return ExportRecord{}, bad("the trailer counts %v items, the file has %d", countOf(l.Items), r.items)
		}
		// Nothing may follow the trailer: a concatenation or a damaged
		// file is not read as this one.
		if _, err := r.br.ReadByte(); !errors.Is(err, io.EOF) {
			return ExportRecord{}, bad("data after the trailer")
		}
		r.done = true
		return ExportRecord{}, io.EOF
	}
	var rec ExportRecord
	switch {
	case l.Key != nil && l.KeyB64 == nil:
		rec.Key = []byte(*l.Key)
	case l.KeyB64 != nil && l.Key == nil:
		if rec.Key, err = base64.StdEncoding.DecodeString(*l.KeyB64); err != nil {
			return ExportRecord{}, bad("key_b64: %v", err)
		}
	default:
		return ExportRecord{}, bad("an item has exactly one of key and key_b64")
	}
	if len(rec.Key) == 0 || len(rec.Key) > maxKeyLen {
		return ExportRecord{}, bad("a key of %d bytes (1..%d)", len(rec.Key), maxKeyLen)
	}
	if l.ValueB64 == nil {
		return ExportRecord{}, bad("an item without value_b64")
	}
	if rec.Value, err = base64.StdEncoding.DecodeString(*l.ValueB64); err != nil {
		return ExportRecord{}, bad("value_b64: %v", err)
	}
	if l.Flags != nil {
		rec.Flags = *l.Flags
	}
	if l.Exptime != nil {
		if *l.Exptime < 0 {
			return ExportRecord{}, bad("negative exptime %d", *l.Exptime)
		}
		rec.Exptime = *l.Exptime
	}
	r.items++
	return rec, nil
}

func countOf(p *uint64) any {
	if p == nil {
		return "no"
	}
	return *p
}
