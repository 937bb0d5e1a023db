// Command results turns the JSON reports written by bench/compare.sh into
// bench/RESULTS.md: per workload and concurrency, throughput and p99 latency
// of every system, and the ratios kvd/memcached and kvd/etcd.
//
// Input: -dir holds SYSTEM__WORKLOAD.json files (kvd bench --json) and, for a
// system that could not run, SYSTEM.skipped holding the reason.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvd-project/kvd/internal/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(1)
	}
}

type options struct {
	dir, out, command, machine string
	kvdVersion                 string
	systems, workloads         []string
}

func run() error {
	var o options
	var systems, workloads string
	flag.StringVar(&o.dir, "dir", "", "directory of SYSTEM__WORKLOAD.json reports")
	flag.StringVar(&o.out, "out", "bench/RESULTS.md", "markdown file to write")
	flag.StringVar(&o.command, "command", "", "the exact command that produced the reports")
	flag.StringVar(&o.machine, "machine", "", "one line describing the machine")
	flag.StringVar(&o.kvdVersion, "kvd-version", "", "output of `kvd version`, shown for the kvd systems")
	flag.StringVar(&systems, "systems", "memcached,etcd,kvd-1,kvd-3", "systems in column order")
	flag.StringVar(&workloads, "workloads", "keyspace-write,keyspace-read,keyspace-bulk,membrain,import", "workloads in order")
	flag.Parse()
	if o.dir == "" {
		return errors.New("-dir is required")
	}
	o.systems, o.workloads = strings.Split(systems, ","), strings.Split(workloads, ",")
	md, err := render(&o)
	if err != nil {
		return err
	}
	return os.WriteFile(o.out, []byte(md), 0o644)
}

// row is one (phase, concurrency) line of a workload's table.
type row struct {
	phase string
	conc  int
}

func render(o *options) (string, error) {
	reports := map[string]map[string]*bench.Report{} // workload → system → report
	skipped := map[string]string{}
	for _, s := range o.systems {
		if b, err := os.ReadFile(filepath.Join(o.dir, s+".skipped")); err == nil {
			skipped[s] = strings.TrimSpace(string(b))
		}
		for _, w := range o.workloads {
			b, err := os.ReadFile(filepath.Join(o.dir, s+"__"+w+".json"))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return "", err
			}
			var rep bench.Report
			if err := json.Unmarshal(b, &rep); err != nil {
				return "", fmt.Errorf("%s/%s: %w", s, w, err)
			}
			if reports[w] == nil {
				reports[w] = map[string]*bench.Report{}
			}
			reports[w][s] = &rep
		}
	}

	var b strings.Builder
	b.WriteString("# kvd bench: kvd, memcached and etcd side by side\n\n")
	b.WriteString("Every number below was measured in one run of\n\n")
	fmt.Fprintf(&b, "```\n%s\n```\n\n", o.command)
	if o.machine != "" {
		fmt.Fprintf(&b, "on %s. ", o.machine)
	}
	b.WriteString("All servers and the load generator share the same machine, so absolute numbers\n" +
		"say little; the **ratios** (kvd ÷ memcached, kvd ÷ etcd; above 1 means kvd is faster for ops/s,\n" +
		"below 1 means kvd is faster for latency) are the result. See bench/METHOD.md.\n\n")

	b.WriteString("| system | version | setup |\n|---|---|---|\n")
	for _, s := range o.systems {
		version, setup := "", describeSystem(s)
		if strings.HasPrefix(s, "kvd") && o.kvdVersion != "" {
			version = o.kvdVersion
		}
		for _, w := range o.workloads {
			if version != "" {
				break
			}
			if rep := reports[w][s]; rep != nil && len(rep.Probe) > 0 && rep.Probe[0].Info["version"] != "" {
				version = rep.Probe[0].Info["version"]
				break
			}
		}
		if why, ok := skipped[s]; ok {
			setup += " — **skipped**: " + why
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", s, version, setup)
	}
	b.WriteString("\n")

	kvds, bases := []string{}, []string{}
	for _, s := range o.systems {
		if strings.HasPrefix(s, "kvd") {
			kvds = append(kvds, s)
		} else {
			bases = append(bases, s)
		}
	}
	for _, w := range o.workloads {
		reps := reports[w]
		if len(reps) == 0 {
			continue
		}
		var any *bench.Report
		for _, s := range o.systems {
			if reps[s] != nil {
				any = reps[s]
				break
			}
		}
		limit := fmt.Sprintf("%g s per case", any.Settings.DurationS)
		if any.Workload.Mode == bench.ModeImport {
			limit = fmt.Sprintf("each phase runs until every record is done (at most %g s)", any.Settings.DurationS)
		}
		fmt.Fprintf(&b, "## %s\n\n%s; %s, %d repetition(s).\n\n", w, any.Workload.Describe(), limit, any.Settings.Repeat)
		rows := rowsOf(o.systems, reps)
		// throughput
		b.WriteString("Throughput (ops/s, mean over repetitions)")
		b.WriteString(" and ratios:\n\n")
		header(&b, "phase", "clients", o.systems, kvds, bases)
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %d |", r.phase, r.conc)
			vals := map[string]float64{}
			for _, s := range o.systems {
				if c := caseOf(reps[s], r); c != nil {
					vals[s] = c.Summary.OpsPerSec.Mean
					sd := ""
					if c.Summary.OpsPerSec.N > 1 {
						sd = fmt.Sprintf(" ±%.0f%%", 100*c.Summary.OpsPerSec.CV())
					}
					fmt.Fprintf(&b, " %s%s |", count(vals[s]), sd)
				} else {
					b.WriteString(" – |")
				}
			}
			ratios(&b, vals, kvds, bases)
			b.WriteString("\n")
		}
		b.WriteString("\np99 latency and ratios:\n\n")
		header(&b, "phase", "clients", o.systems, kvds, bases)
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %d |", r.phase, r.conc)
			vals := map[string]float64{}
			for _, s := range o.systems {
				if c := caseOf(reps[s], r); c != nil && c.Summary.Latency.Count > 0 {
					vals[s] = c.Summary.Latency.P99Us
					fmt.Fprintf(&b, " %s |", latency(vals[s]))
				} else {
					b.WriteString(" – |")
				}
			}
			ratios(&b, vals, kvds, bases)
			b.WriteString("\n")
		}
		// errors and verification, per system
		var notes []string
		for _, s := range o.systems {
			rep := reps[s]
			if rep == nil {
				continue
			}
			t := rep.Totals
			if t.Errors > 0 || t.Wrong > 0 || t.UnexpectedMisses > 0 || rep.ProbeErrors > 0 {
				var kinds []string
				for k, n := range t.ErrorsByKind {
					kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
				}
				notes = append(notes, fmt.Sprintf("%s: %d errors (%s), %d wrong values, %d missing values",
					s, t.Errors, strings.Join(kinds, ", "), t.Wrong, t.UnexpectedMisses))
			}
			for _, n := range rep.Notes {
				notes = append(notes, s+": "+n)
			}
		}
		if len(notes) == 0 {
			b.WriteString("\nNo errors, no wrong or missing values.\n\n")
		} else {
			b.WriteString("\n")
			for _, n := range notes {
				fmt.Fprintf(&b, "- %s\n", n)
			}
			b.WriteString("\n")
		}
	}
	return b.String(), nil
}

func describeSystem(s string) string {
	switch s {
	case "memcached":
		return "1 process, memcached protocol, RAM only (no persistence, no replication)"
	case "etcd":
		return "3 members on loopback, gRPC (go.etcd.io/etcd/client/v3), fsync per commit"
	case "kvd-1":
		return "1 node (Raft group of one), memcached protocol, fsync per commit"
	case "kvd-3":
		return "3 nodes on loopback, memcached protocol, quorum fsync per commit; clients spread over all nodes"
	}
	return ""
}

func header(b *strings.Builder, c1, c2 string, systems, kvds, bases []string) {
	fmt.Fprintf(b, "| %s | %s |", c1, c2)
	n := 2
	for _, s := range systems {
		fmt.Fprintf(b, " %s |", s)
		n++
	}
	for _, k := range kvds {
		for _, base := range bases {
			fmt.Fprintf(b, " %s ÷ %s |", k, base)
			n++
		}
	}
	b.WriteString("\n|")
	for range n {
		b.WriteString("---|")
	}
	b.WriteString("\n")
}

func ratios(b *strings.Builder, vals map[string]float64, kvds, bases []string) {
	for _, k := range kvds {
		for _, base := range bases {
			kv, okK := vals[k]
			bv, okB := vals[base]
			if okK && okB && bv > 0 {
				fmt.Fprintf(b, " %.2f |", kv/bv)
			} else {
				b.WriteString(" – |")
			}
		}
	}
}

func rowsOf(systems []string, reps map[string]*bench.Report) []row {
	var rows []row
	seen := map[row]bool{}
	for _, s := range systems {
		if reps[s] == nil {
			continue
		}
		for _, c := range reps[s].Cases {
			r := row{c.Phase, c.Concurrency}
			if !seen[r] {
				seen[r] = true
				rows = append(rows, r)
			}
		}
	}
	return rows
}

func caseOf(rep *bench.Report, r row) *bench.CaseResult {
	if rep == nil {
		return nil
	}
	for i := range rep.Cases {
		if rep.Cases[i].Phase == r.phase && rep.Cases[i].Concurrency == r.conc {
			return &rep.Cases[i]
		}
	}
	return nil
}

func count(x float64) string { return fmt.Sprintf("%.0f", x) }

func latency(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2f s", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.2f ms", us/1e3)
	}
	return fmt.Sprintf("%.0f µs", us)
}
