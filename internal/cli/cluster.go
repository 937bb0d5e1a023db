package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/httpapi"
)

// clusterClient talks to the HTTP API of any member; a member that is not
// the leader passes membership changes on to the leader itself.
type clusterClient struct {
	endpoints []string
	timeout   time.Duration
	// sec are the TLS and credential flags; auth what they resolve to.
	sec  clientSecurity
	auth httpAuth
}

func newClusterCmd() *cobra.Command {
	c := &clusterClient{}
	var endpoints string
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Inspect and change cluster membership and leadership (through a member's HTTP API)",
		Long: `Inspect and change a running kvd cluster through any member's HTTP API.
Membership changes go to the leader (a follower forwards them).

Adding a node is two steps: "kvd cluster add" registers it as a learner,
then start it with "kvd serve --join http://MEMBER-HTTP-ADDR" (which can also
register it by itself). The leader promotes a learner to voter once it has
caught up. Removing a voter that would leave too few reachable voters for a
quorum is refused unless --force is given.`,
		Example: `  kvd cluster status --endpoints http://127.0.0.1:11281
  kvd cluster status --endpoints https://10.0.0.1:11280 --cacert ca.crt --user admin
  kvd cluster add n4 10.0.0.4:11290
  kvd cluster add --witness w 10.0.0.9:11290
  kvd serve --name n4 --peer-addr 10.0.0.4:11290 --join http://10.0.0.1:11280
  kvd cluster transfer-leader n2
  kvd cluster remove n3`,
		// cobra prints help and succeeds for an unknown subcommand of a
		// command that does not run itself; the root refuses one, and so
		// does this, so that a typo in a script fails.
		Args:                       unknownSubcommand,
		SuggestionsMinimumDistance: 2, // cobra's default, which SuggestionsFor does not apply itself
		RunE:                       func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentPreRunE = func(run *cobra.Command, _ []string) error {
		if run == cmd {
			return nil // help only: nothing to dial
		}
		var err error
		if c.auth, err = c.sec.http(); err != nil {
			return err
		}
		if !run.Flags().Changed("endpoints") && c.sec.wantsTLS() {
			endpoints = "https://127.0.0.1:11280"
		}
		for _, e := range strings.Split(endpoints, ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			if !strings.Contains(e, "://") {
				e = c.sec.defaultScheme() + "://" + e
			}
			// The API paths are appended to it: a query or fragment would
			// swallow them, and a bad port or scheme would fail only at
			// the dial, as if the member were down.
			u, err := url.Parse(e)
			if err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") ||
				u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || !validPort(u.Port()) {
				return fmt.Errorf("--endpoints: %q is not an HTTP address (http://host:port)", config.RedactURL(e))
			}
			c.endpoints = append(c.endpoints, strings.TrimRight(e, "/"))
		}
		if len(c.endpoints) == 0 {
			return errors.New("--endpoints: give at least one member's HTTP address")
		}
		if c.timeout <= 0 {
			// A zero bound would expire every request before it is sent
			// and read as "no member answered".
			return fmt.Errorf("--timeout %v: must be positive", c.timeout)
		}
		return nil
	}
	cmd.PersistentFlags().StringVar(&endpoints, "endpoints", "http://127.0.0.1:11280", "HTTP addresses of members, comma separated (the first that answers is used)")
	cmd.PersistentFlags().DurationVar(&c.timeout, "timeout", 15*time.Second, "bound on each request")
	c.sec.bind(cmd.PersistentFlags())

	status := &cobra.Command{
		Use:   "status",
		Short: "Members, leader, term, commit and applied index, each member's health",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st httpapi.ClusterStatus
			answered, err := c.send(cmd.Context(), http.MethodGet, "/v1/cluster", nil, &st)
			if err != nil {
				return err
			}
			// A follower knows only its leader's health: ask the leader when
			// we can reach it, for every member's. Members share a scheme.
			if lead := leaderHTTP(st); lead != "" && !selfIsLeader(st) {
				var ls httpapi.ClusterStatus
				scheme, _, _ := strings.Cut(answered, "://")
				lc := &clusterClient{endpoints: []string{scheme + "://" + lead}, timeout: c.timeout, auth: c.auth}
				if err := lc.call(cmd.Context(), http.MethodGet, "/v1/cluster", nil, &ls); err == nil {
					st = ls
				}
			}
			return printStatus(cmd.OutOrStdout(), st)
		},
	}
	var addWitness bool
	add := &cobra.Command{
		Use:   "add NAME PEER-ADDR",
		Short: "Add a member as a learner (promoted to voter once caught up); --witness adds a witness",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := httpapi.MemberInfo{Name: args[0], PeerAddr: args[1], Witness: addWitness}
			var info httpapi.JoinInfo
			// The member that answered is one known to be up: the one to
			// join through (a follower passes the join on to the leader).
			answered, err := c.send(cmd.Context(), http.MethodPost, "/v1/cluster/members", body, &info)
			if err != nil {
				return err
			}
			what, flag := "a learner", ""
			if addWitness {
				what, flag = "a witness (a learner until caught up)", " --witness"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s (id %s) as %s; start it with:\n  kvd serve --name %s --peer-addr %s%s --join %s\n",
				args[0], info.ID, what, args[0], args[1], flag, config.RedactURL(answered))
			return nil
		},
	}
	add.Flags().BoolVar(&addWitness, "witness", false, "add a witness: a voter that holds no data (the data members must still outnumber the witnesses)")
	var force bool
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a member (refused if the voters left could not form a quorum, unless --force)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/v1/cluster/members/" + url.PathEscape(args[0])
			if force {
				path += "?force=true"
			}
			if err := c.call(cmd.Context(), http.MethodDelete, path, nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return nil
		},
	}
	remove.Flags().BoolVar(&force, "force", false, "remove even if the voters left could not form a quorum")
	transfer := &cobra.Command{
		Use:   "transfer-leader [NAME]",
		Short: "Hand leadership to a voter (default: the most caught-up one)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := map[string]string{"to": ""}
			if len(args) == 1 {
				req["to"] = args[0]
			}
			var out map[string]string
			if err := c.call(cmd.Context(), http.MethodPost, "/v1/cluster/transfer-leader", req, &out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "leader is now %s\n", out["leader"])
			return nil
		},
	}
	cmd.AddCommand(status, add, remove, transfer)
	return cmd
}

// validPort accepts an absent port (the scheme's) or 1 to 65535.
func validPort(p string) bool {
	if p == "" {
		return true
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n > 0
}

func leaderHTTP(st httpapi.ClusterStatus) string {
	for _, m := range st.Members {
		if m.ID == st.Leader {
			return m.HTTPAddr
		}
	}
	return ""
}

func selfIsLeader(st httpapi.ClusterStatus) bool { return st.Self != "" && st.Self == st.Leader }

// unknownSubcommand refuses any argument to `kvd cluster` itself: one can
// only be a misspelt subcommand. The message is the root command's.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return errors.New(msg)
}

// call sends one request to the first endpoint that answers (see send).
func (c *clusterClient) call(ctx context.Context, method, path string, body, out any) error {
	_, err := c.send(ctx, method, path, body, out)
	return err
}

// send sends one request to the first endpoint that answers and returns
// that endpoint. A member's error answer is final (the member judged the
// request); a connection failure, an answer that is not kvd's (a proxy, a
// web server on that port) or a member that could not reach the leader
// moves on to the next endpoint: none of those acted on the request.
func (c *clusterClient) send(ctx context.Context, method, path string, body, out any) (string, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return "", fmt.Errorf("encode request: %w", err)
		}
	}
	var errs []error
	for _, ep := range c.endpoints {
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		err := c.once(rctx, method, ep+path, payload, out)
		cancel()
		var answered *apiError
		if err == nil || (errors.As(err, &answered) && !answered.declined()) {
			return ep, err
		}
		if method != http.MethodGet && !neverSent(err) {
			// The member may have made the change before it stopped
			// answering: sent again elsewhere, it would fail as done
			// already (remove) or be made twice (transfer-leader).
			return ep, fmt.Errorf("%s: %w; the change may have been made: see kvd cluster status", config.RedactURL(ep), err)
		}
		// Redacted: an endpoint may carry user:password (net/http sends
		// it as Basic credentials, like --user).
		errs = append(errs, fmt.Errorf("%s: %w", config.RedactURL(ep), err))
	}
	return "", fmt.Errorf("no member answered: %w", errors.Join(errs...))
}

// neverSent reports a failure after which no member can have acted on the
// request: the connection was never made, the answer came from another
// server than kvd (see once), or the member declined it.
func neverSent(err error) bool {
	var answered *apiError
	return errors.Is(err, errNotSent) || errors.Is(err, errNotKvd) ||
		(errors.As(err, &answered) && answered.declined())
}

var (
	// errNotSent marks a failure before the whole request was written: a
	// refused or timed-out connection (a member down), a broken one.
	errNotSent = errors.New("request not sent")
	// errNotKvd marks an error answer from a server that is not kvd.
	errNotKvd = errors.New("not a kvd answer")
)

// apiError is an error answer from a member.
type apiError struct {
	status int
	code   string // httpapi.Error.Code
	msg    string
}

// declined reports an answer in which the member did not act on the
// request, so another member may: a follower that cannot reach the
// leader to pass the request on (one cut off from the quorum, say).
func (e *apiError) declined() bool { return e.code == "not_leader" }

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, http.StatusText(e.status), e.msg)
}

func (c *clusterClient) once(ctx context.Context, method, u string, payload []byte, out any) error {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Whether the member got the whole request decides whether another
	// may be sent it (see send); the transport reports it from its writer.
	var written atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { written.Store(i.Err == nil) },
	}))
	resp, err := c.auth.do(req)
	if err != nil {
		if !written.Load() {
			return fmt.Errorf("%w: %w", errNotSent, err)
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e httpapi.Error
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			// Every kvd error is an httpapi.Error: this is another server
			// (or a path prefix that is not kvd's), which never saw the
			// request. Quote it briefly: an HTML page would fill the screen.
			return fmt.Errorf("%w: %s: %s", errNotKvd, resp.Status, brief(b))
		}
		return &apiError{status: resp.StatusCode, code: e.Code, msg: e.Error}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			// kvd answers success in JSON: another server answered.
			return fmt.Errorf("%w: decode answer: %w", errNotKvd, err)
		}
	}
	return nil
}

// brief is the start of a foreign answer's body, on one line.
func brief(b []byte) string {
	const limit = 200
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b[:min(len(b), 4*limit)]), "?")), " ")
	if r := []rune(s); len(r) > limit || len(b) > 4*limit {
		s = string(r[:min(len(r), limit)]) + "…"
	}
	return s
}

func printStatus(w io.Writer, st httpapi.ClusterStatus) error {
	leader := "none"
	for _, m := range st.Members {
		if m.ID == st.Leader {
			leader = m.Name
			if leader == "" {
				leader = m.ID
			}
		}
	}
	fmt.Fprintf(w, "leader: %s  term: %d  commit: %d  applied: %d (as seen by %s)\n\n", leader, st.Term, st.Commit, st.Applied, st.Self)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tKIND\tROLE\tHEALTH\tPEER\tHTTP\tMEMCACHE")
	for _, m := range st.Members {
		kind := m.Kind
		if m.Witness {
			kind += " (witness)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dash(m.Name), m.ID, kind, m.Role, m.Health, dash(m.PeerAddr), dash(m.HTTPAddr), dash(m.MemcacheAddr))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
