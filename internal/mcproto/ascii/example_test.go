package ascii_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/mcproto/ascii"
)

// A connection loop in miniature: parse, answer, write protocol errors as
// told, and flush once per pipelined batch.
func Example() {
	in := strings.NewReader("set greeting 0 0 5\r\nhello\r\nget greeting nothing\r\nbogus\r\nincr greeting x\r\nquit\r\n")
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	flush := func(b []byte) { // the example shows "\r\n" as "\n"
		_, _ = w.WriteString(strings.ReplaceAll(string(b), "\r\n", "\n"))
	}

	store := map[string][]byte{}
	r := ascii.NewReader(in, mcproto.Limits{})
	var req mcproto.Request
	var out []byte
	for {
		err := r.Next(&req)
		var perr *mcproto.Error
		switch {
		case errors.As(err, &perr):
			if perr.Reply != nil {
				out = append(out, perr.Reply...)
			}
			if perr.Close {
				return
			}
		case err == io.EOF:
			return
		case err != nil:
			fmt.Fprintln(w, "read error:", err)
			return
		case req.Op == mcproto.OpQuit:
			flush(out)
			return
		case req.Op == mcproto.OpSet:
			store[string(req.Keys[0])] = append([]byte(nil), req.Data...) // Data is only valid until Next
			if !req.Echo.Noreply {
				out = append(out, ascii.ReplyStored...)
			}
		case req.Op == mcproto.OpGet:
			for _, k := range req.Keys {
				if v, ok := store[string(k)]; ok {
					out = ascii.AppendValue(out, k, 0, v, 0, false)
				}
			}
			out = ascii.AppendEnd(out)
		default:
			out = append(out, ascii.ReplyError...)
		}
		if r.Buffered() == 0 {
			flush(out)
			out = out[:0]
		}
	}
	// Output:
	// STORED
	// VALUE greeting 0 5
	// hello
	// END
	// ERROR
	// CLIENT_ERROR invalid numeric delta argument
}
