package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/internal/sameorigin"
	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/tlog/tlogaudit"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

func newTlogAuditCmd() *cobra.Command {
	var logKeys, witnessKeys []string
	var required int
	var timeout, deadline, maxAge time.Duration
	var statePath string
	cmd := &cobra.Command{
		Use:   "audit URL",
		Short: "Monitor a log: check every archived STH against the next with consistency proofs",
		Long: `Read the whole STH archive of the log at URL and check it: every STH and
checkpoint verifies under --log-key, names the same tree, tree sizes grow,
timestamps never go back, and each STH is consistent with the next (RFC
9162 consistency proofs, verified here; when the log's consistency endpoint
fails, with any status, a timeout or an answer that is not the proof, the
proof is built from its hash tiles, /tile/..., instead, so a log cannot
hide a fork by failing just the proofs that would show it). A warning on
stderr counts such proofs for trees the log had published (GET sth, read
first); its endpoint's refusals for trees signed but not yet published
are routine and not warned about. The log's current STH must extend the
archive. With --witnesses-required K, the newest checkpoint must carry
K valid cosignatures from --witness-key (the published checkpoint, GET sth),
counted by public key: a cosignature line does not sign the witness's name,
so a key listed twice, under one name or two, is refused (exit 2). A
current STH behind the archive's newest must be an archived one.
With --witnesses-required, the newest tree's K-th newest trusted
cosignature must be no older than --max-tree-age (default 1h): a log has
its witnesses cosign again every 10 minutes even when idle, so an older
one is a log that stopped publishing (frozen), witnesses that stopped
cosigning, or an old answer replayed. Without witnesses the bound applies
only when set, to the STH's time, which an idle keysvc log does not move.

With --state FILE the audit remembers: FILE keeps the newest archived STH
of the last audit that passed, and the next audit reads the archive from
that tree on and requires the log's history to extend it (the archive's
STH of that size must have its root, the next one must be consistent with
it, an archive ending below it is a rollback). Without it each audit
checks only that the history served today is consistent with itself,
which a log that rewrote its whole history under its key passes. FILE is
written (atomically) after exit 0 only, and left as it was otherwise, so
an INCONSISTENT run keeps the tree it contradicts; a missing FILE starts
from the whole archive. Runs with one FILE take turns: each holds
FILE.lock from before it reads FILE until after it writes it, and a run
waits for the lock until --deadline (then exit 2; with --deadline 0,
without end), so overlapping cron runs each check the log against the
tree the one before kept. A symbolic link is followed, as the kernel
does: the file it leads to is replaced, and its lock is beside it. Keep
FILE where only the monitor writes; a FILE changed during a run by
something that does not take the lock is left as it is (exit 2).

The whole audit gives up after --deadline (default 1h): a log that serves
an archive without end, or answers each request just inside --timeout,
cannot hold a monitor forever.

Exit status: 0 when the log checks out, 1 naming the first inconsistent
STH or pair (INCONSISTENT) or a stale newest tree (STALE), and nothing
else, 2 when the audit could not run (the command line is wrong, the log
did not answer, --deadline passed, --witness-key is wrong, the first tree
head read is signed by a key that is none of --log-key while nothing
signed under them has verified yet (another log's key, or a log that
changed its key: with a --state tree that verifies, such a head is
INCONSISTENT), or the --state file cannot be read, does not verify under
--log-key, or cannot be written).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if deadline < 0 {
				return usage(cmd, "--deadline must not be negative (0: no limit)")
			}
			if required < 0 {
				return usage(cmd, "--witnesses-required must not be negative (0: no cosignatures required)")
			}
			if required > len(witnessKeys) {
				return usage(cmd, "--witnesses-required %d needs at least %d --witness-key (it counts trusted witnesses' cosignatures)", required, required)
			}
			if maxAge < 0 {
				return usage(cmd, "--max-tree-age must not be negative (0 turns the check off)")
			}
			maxAge = maxTreeAgeFor(cmd, required > 0, maxAge)
			var keys []tlogfmt.LogKey
			for _, lk := range logKeys {
				v := lk
				if b, err := os.ReadFile(lk); err == nil {
					v = strings.TrimSpace(string(b))
				}
				k, err := tlogfmt.ParseVKey(v)
				if err != nil {
					return usage(cmd, "--log-key %q: %v", lk, err)
				}
				keys = append(keys, k)
			}
			if len(keys) == 0 {
				return usage(cmd, "--log-key is required (the log's verifier key, from keysvc tlog keygen, configured out of band)")
			}
			ctx := cmd.Context()
			if deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, deadline)
				defer cancel()
			}
			var state *auditState
			var from *tlogfmt.ArchivedSTH
			if statePath != "" {
				st, err := openAuditState(ctx, statePath)
				if err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "keysvc: audit could not run:", err)
					return exitError{2}
				}
				defer st.close()
				state, from = st, st.from
			}
			rep, err := tlogaudit.Audit(ctx, tlogaudit.Options{BaseURL: args[0], Keys: keys, WitnessVKeys: witnessKeys, WitnessesRequired: required, MaxAge: maxAge, Client: sameorigin.Client(timeout), From: from})
			var inc *tlogaudit.Inconsistency
			switch {
			case errors.As(err, &inc):
				fmt.Fprintln(cmd.OutOrStdout(), "INCONSISTENT:", inc.Error())
				return exitError{1}
			case errors.Is(err, tlogaudit.ErrStaleTree):
				fmt.Fprintln(cmd.OutOrStdout(), "STALE:", err.Error())
				return exitError{1}
			case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
				fmt.Fprintf(cmd.ErrOrStderr(), "keysvc: audit could not run: gave up after %s (--deadline), %d archived STHs checked: %v\n", deadline, rep.STHs, err)
				return exitError{2}
			case err != nil:
				fmt.Fprintln(cmd.ErrOrStderr(), "keysvc: audit could not run:", err)
				return exitError{2}
			}
			if state != nil {
				if err := state.save(rep.Newest); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "keysvc: audit could not run: --state: the log checked out (newest tree size %d), but %v\n", rep.TreeSize, err)
					return exitError{2}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %d archived STHs, %d consistency proofs verified, newest tree size %d\n", rep.STHs, rep.ConsistencyProofs, rep.TreeSize)
			if rep.TileProofs > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "keysvc: warning: %d of the consistency proofs were built from the log's hash tiles: its consistency endpoint failed for trees it had published (first: %q)\n", rep.TileProofs, rep.EndpointError)
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&logKeys, "log-key", nil, "the log's C2SP verifier key, or a file holding it (repeatable)")
	cmd.Flags().StringArrayVar(&witnessKeys, "witness-key", nil, "a trusted witness's verifier key (repeatable; one public key may be listed once)")
	cmd.Flags().IntVar(&required, "witnesses-required", 0, "cosignatures by distinct --witness-key witnesses the newest checkpoint must carry (0 to the number of --witness-key)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "limit on each HTTP request")
	cmd.Flags().DurationVar(&deadline, "deadline", time.Hour, "limit on the whole audit (exit 2 when it passes); 0: no limit")
	cmd.Flags().StringVar(&statePath, "state", "", "file keeping the newest archived STH of the last audit that passed: the next audit starts there and the log's history must extend it (missing: the whole archive)")
	cmd.Flags().DurationVar(&maxAge, "max-tree-age", time.Hour, "with --witnesses-required K: the newest tree's K-th newest trusted cosignature may be no older than this; without witnesses it applies only when set, to the STH's time (which an idle keysvc log does not move); 0 turns the check off")
	return cmd
}

// readAuditState reads the --state file of tlog audit: the archived STH
// (tlogfmt.ArchivedSTH, JSON) of the last audit that passed, nil when
// path is empty or the file does not exist yet. Its STH is verified by
// the audit (tlogaudit.Options.From), under the --log-key keys.
func readAuditState(path string) (*tlogfmt.ArchivedSTH, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--state: %w", err)
	}
	var from tlogfmt.ArchivedSTH
	if err := strictjson.Decode(b, &from, strictjson.Limits{}); err != nil {
		return nil, fmt.Errorf("--state %s: %w", path, err)
	}
	if from.STH == "" || from.Checkpoint == "" {
		return nil, fmt.Errorf("--state %s: want the tree_size, sth and checkpoint of an archived STH", path)
	}
	return &from, nil
}

// auditState is the --state file of one tlog audit run, held from before
// it is read until after it is replaced: an exclusive flock on FILE.lock
// (lockFileExclusive), so runs that overlap (a cron run still going when
// the next one starts) take turns, and each audits the log from the tree
// the run before it kept. Without the turns two runs could start from
// one tree, be shown two forks of the log, and each keep its own: the
// larger would be saved without ever being checked against the smaller.
type auditState struct {
	path   string               // FILE, symbolic links resolved
	from   *tlogfmt.ArchivedSTH // what FILE held when the run began; nil: no file yet
	unlock func()
}

// openAuditState resolves path's symbolic links (the file they lead to is
// the one replaced, and its lock is beside it), takes the lock, waiting
// while another run holds it until ctx is done (the --deadline), then
// reads the file (readAuditState).
func openAuditState(ctx context.Context, path string) (*auditState, error) {
	resolved, err := resolveSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("--state: %w", err)
	}
	// The kernel's view and ours must name one file (or none): reading
	// another file than the one FILE names would start the audit from the
	// wrong tree, or from none.
	kernel, errK := os.Stat(path)
	ours, errO := os.Stat(resolved)
	switch {
	case errK == nil && errO == nil && os.SameFile(kernel, ours):
	case errors.Is(errK, fs.ErrNotExist) && errors.Is(errO, fs.ErrNotExist):
	default:
		return nil, fmt.Errorf("--state: %s resolves to %s, which is not the file the system opens for it (%v, %v)", path, resolved, errK, errO)
	}
	unlock, err := lockFileExclusive(ctx, resolved+".lock")
	if errors.Is(err, ErrLockHeld) {
		return nil, fmt.Errorf("--state: another tlog audit with this file is still running: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--state: %w", err)
	}
	from, err := readAuditState(resolved)
	if err != nil {
		unlock()
		return nil, err
	}
	return &auditState{path: resolved, from: from, unlock: unlock}, nil
}

// close releases the lock.
func (s *auditState) close() { s.unlock() }

// save replaces the file with newest, the newest archived STH of an
// audit that passed from s.from (so newest extends it, or is it). The
// file is left as it is, with an error, when it no longer holds s.from:
// something that does not take the lock wrote it during the run, and
// which of the two trees the monitor should keep is not this run's to
// decide.
func (s *auditState) save(newest tlogfmt.ArchivedSTH) error {
	cur, err := readAuditState(s.path)
	if err != nil {
		return fmt.Errorf("%v (left as it is)", err)
	}
	if !sameArchivedSTH(cur, s.from) {
		return fmt.Errorf("%s changed during the audit, written by something that does not take %s.lock (left as it is)", s.path, s.path)
	}
	if s.from != nil {
		if newest.TreeSize < s.from.TreeSize {
			return fmt.Errorf("the audit's newest tree (size %d) is smaller than the one it started from (%d) (left as it is)", newest.TreeSize, s.from.TreeSize)
		}
		if sameArchivedSTH(&newest, s.from) {
			return nil
		}
	}
	b, err := json.Marshal(newest)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(s.path, append(b, '\n')); err != nil {
		return fmt.Errorf("%s could not be written: %w", s.path, err)
	}
	return nil
}

func sameArchivedSTH(a, b *tlogfmt.ArchivedSTH) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// resolveSymlinks follows path while it is a symbolic link, also to a
// file that does not exist yet (a link made before the first run), and
// returns where it leads. Each link's directory is resolved first
// (filepath.EvalSymlinks), and a relative target is taken from that real
// directory, as the kernel does: "../f" in a directory reached through a
// symbolic link is beside the real directory, not beside the link's
// spelling of it.
func resolveSymlinks(path string) (string, error) {
	for range 40 {
		dir, base := ".", path
		if i := strings.LastIndexByte(path, filepath.Separator); i >= 0 {
			dir, base = path[:i], path[i+1:]
			if dir == "" {
				dir = string(filepath.Separator)
			}
		}
		realDir, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return "", err
		}
		path = filepath.Join(realDir, base) // realDir has no links: ".." in base is its parent
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Mode()&fs.ModeSymlink == 0) {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		target, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			// Not filepath.Join: cleaning "a/../f" would skip a link at a.
			target = realDir + string(filepath.Separator) + target
		}
		path = target
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", path)
}
