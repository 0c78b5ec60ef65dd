package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
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

Exit status: 0 when every log has every leaf, 1 when --timeout passed
first (what was delivered stays delivered; run it again), 2 on bad
arguments or an unreadable spool.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (dataDir == "") == (spoolDir == "") {
				return errors.New("give one of --data-dir or --spool")
			}
			if spoolDir == "" {
				spoolDir = filepath.Join(dataDir, spoolDirName)
			}
			if len(urls) == 0 {
				return errors.New("--tlog-url is required (the logs the replica submitted to)")
			}
			for _, u := range urls {
				if _, err := tlogclient.NormalizeURL(u); err != nil {
					return fmt.Errorf("--tlog-url: %w", err)
				}
			}
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			hls, _, err := httpLogs(urls, logKeys, tokenFile)
			if err != nil {
				return err
			}
			sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: spoolDir, Logger: log})
			if err != nil {
				return err
			}
			defer sp.Close()
			c, err := tlogclient.New(tlogclient.Config{Spool: sp, Logs: asLogs(hls), Logger: log})
			if err != nil {
				return err
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
	return cmd
}
