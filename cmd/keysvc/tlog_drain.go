package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/tlogclient"
)

// newTlogDrainCmd is `keysvc tlog drain`: the hand-off of a stopped
// replica's spool (ADR 0024).
func newTlogDrainCmd() *cobra.Command {
	var dataDir, spoolDir, logKeys, tokenFile string
	var urls []string
	var timeout time.Duration
	var forgetUnlisted bool
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Deliver a stopped replica's transparency-log spool to its logs, then exit",
		Long: `Deliver every leaf waiting in a replica's spool (--tlog-durability spool,
<data-dir>/tlog-spool) to the logs and exit once each has them: for a
replica that will not come back (its disk is moved or mounted elsewhere).
The replica must be stopped: the spool is locked by the process using it.
Give the same --tlog-url list the replica was configured with: each log's
delivered position is kept per URL, and a URL the spool has never seen is
owed nothing. Leaves are delivered at least once; a log folds duplicates.

Segments are deleted once every listed log has them, so a log left off
the list would lose what the spool still owes it: drain refuses to run
while the spool owes leaves to a log it holds a cursor for that is not
listed, and names each one. --forget-unlisted lets those leaves go (for a
log the replica had stopped submitting to on purpose).

Exit status: 0 when every log has every leaf, 1 when --timeout passed
first (what was delivered stays delivered; run it again), 2 on bad
arguments, no spool at the path, an unreadable spool, or leaves owed to
an unlisted log (nothing is delivered then).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Every refusal before delivery starts exits 2, as documented
			// (a plain error would exit 1, which means "run it again").
			fail := func(err error) error {
				fmt.Fprintln(cmd.ErrOrStderr(), "keysvc:", err)
				return exitError{2}
			}
			if (dataDir == "") == (spoolDir == "") {
				return usage(cmd, "give one of --data-dir or --spool")
			}
			if spoolDir == "" {
				spoolDir = filepath.Join(dataDir, spoolDirName)
			}
			if len(urls) == 0 {
				return usage(cmd, "--tlog-url is required (the logs the replica submitted to)")
			}
			listed := make([]string, len(urls))
			for i, u := range urls {
				n, err := tlogclient.NormalizeURL(u)
				if err != nil {
					return usage(cmd, "--tlog-url: %v", err)
				}
				listed[i] = n
			}
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			hls, _, err := httpLogs(urls, logKeys, tokenFile)
			if err != nil {
				return fail(err)
			}
			// Existing: a mistyped or unmounted path (missing, or an
			// empty directory) must not read as an empty spool that
			// "owes nothing".
			sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: spoolDir, Logger: log, Existing: true})
			if errors.Is(err, tlogclient.ErrNotASpool) {
				return fail(fmt.Errorf("%w (is the replica's disk mounted there?)", err))
			}
			if err != nil {
				return fail(err)
			}
			defer sp.Close()
			owed := sp.Unlisted(listed)
			if len(owed) > 0 && !forgetUnlisted {
				return fail(unlistedError(owed, listed))
			}
			var forgotten uint64
			for u, n := range owed {
				log.Warn("transparency log: drain: leaves owed to an unlisted log are let go (--forget-unlisted)", "log", u, "leaves", n)
				forgotten += n
			}
			c, err := tlogclient.New(tlogclient.Config{Spool: sp, Logs: asLogs(hls), Logger: log})
			if err != nil {
				return fail(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			start := time.Now()
			n, err := c.DrainSpool(ctx)
			if err != nil {
				b, _, _ := c.Backlog()
				fmt.Fprintf(cmd.OutOrStdout(), "not drained after %s: %v\n", time.Since(start).Round(time.Millisecond), b)
				return exitError{1}
			}
			if len(owed) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "drained: %d leaves delivered to %d logs in %s; %s owes the listed logs nothing; %d %s owed to %d unlisted %s let go\n",
					n, len(hls), time.Since(start).Round(time.Millisecond), spoolDir, forgotten, plural(forgotten, "leaf", "leaves"), len(owed), plural(uint64(len(owed)), "log", "logs"))
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "drained: %d leaves delivered to %d logs in %s; %s owes nothing\n",
				n, len(hls), time.Since(start).Round(time.Millisecond), spoolDir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "the stopped replica's --data-dir (its spool is <data-dir>/tlog-spool)")
	f.StringVar(&spoolDir, "spool", "", "the spool directory itself, instead of --data-dir")
	f.StringSliceVar(&urls, "tlog-url", nil, "the logs the replica submitted to (repeatable or comma-separated), as it was configured")
	f.StringVar(&logKeys, "tlog-log-keys", "", "JWK Set file of the logs' keys (default: each log's own jwks.json)")
	f.StringVar(&tokenFile, "tlog-token-file", "", "file of submit tokens (as for serve)")
	f.DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long")
	f.BoolVar(&forgetUnlisted, "forget-unlisted", false, "drain even though the spool owes leaves to logs not given with --tlog-url; those leaves are deleted with their segments")
	return cmd
}

// unlistedError names the logs the spool still owes leaves to that drain
// was not given, in URL order. A cursor is a log's by its URL exactly as
// the replica's configuration spelled it (normalized): an owed log that
// differs from a listed one only in its host (localhost against
// 127.0.0.1, a name against its address, letter case) is pointed out.
func unlistedError(owed map[string]uint64, listed []string) error {
	us := slices.Sorted(maps.Keys(owed))
	parts := make([]string, len(us))
	for i, u := range us {
		parts[i] = fmt.Sprintf("%s (%d %s", u, owed[u], plural(owed[u], "leaf", "leaves"))
		for _, l := range listed {
			if otherHostOnly(u, l) {
				parts[i] += "; you listed " + l + ": give the URL as the replica's configuration spelled it"
				break
			}
		}
		parts[i] += ")"
	}
	return fmt.Errorf("the spool owes leaves to logs not given with --tlog-url: %s; give every log the replica was configured with, or --forget-unlisted to let those leaves go",
		strings.Join(parts, ", "))
}

// otherHostOnly reports whether URLs a and b have the same scheme, port
// (the scheme's default when none is given) and path, and different hosts.
func otherHostOnly(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil || ua.Scheme != ub.Scheme || ua.EscapedPath() != ub.EscapedPath() || ua.Hostname() == ub.Hostname() {
		return false
	}
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "https" {
			return "443"
		}
		return "80"
	}
	return port(ua) == port(ub)
}

// plural returns one when n is 1, else many.
func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
