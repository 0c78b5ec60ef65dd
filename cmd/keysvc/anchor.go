package main

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keysvc/keysvc/anchor"
	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlog/tlogaudit"
	"github.com/keysvc/keysvc/tlogclient"
	"github.com/keysvc/keysvc/verifier"
)

// anchorFlags configure key-history anchoring on serve (issue 12 item 5,
// ADR 0016).
type anchorFlags struct {
	keyFile    string
	checkEvery time.Duration
}

func (f *anchorFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.keyFile, "anchor-key-file", "", "event key (keysvc anchor keygen): anchor every key-history change in the transparency log (--tlog-url, or the embedded log) and check key history against it on every reload; a version the log does not back is not published and never signs. With --dev, created when missing")
	fs.DurationVar(&f.checkEvery, "anchor-check-interval", 30*time.Second, "how often the transparency log is asked again for the key-history markers that must stay absent (rolled-back state, deleted versions)")
}

func (f *anchorFlags) validate() error {
	if f.checkEvery < 100*time.Millisecond {
		return errors.New("--anchor-check-interval must be at least 100ms")
	}
	return nil
}

// start loads (in dev mode: creates) the event key and makes the Anchor;
// nil without --anchor-key-file.
func (f *anchorFlags) start(ctx context.Context, st store.Store, tl *tlogRuntime, log *slog.Logger, dev bool) (*anchor.Anchor, error) {
	if f.keyFile == "" {
		return nil, nil
	}
	if tl == nil || tl.client == nil {
		return nil, errors.New("--anchor-key-file needs a transparency log (--tlog-url, or --dev for the embedded one)")
	}
	key, err := anchor.LoadKeyFile(f.keyFile)
	if errors.Is(err, os.ErrNotExist) && dev {
		if key, err = anchor.GenerateKeyFile(f.keyFile); err == nil {
			log.Warn("dev mode: created an event key for key-history anchoring", "file", f.keyFile, "event_key", key.KID())
		}
	}
	if err != nil {
		return nil, err
	}
	a, err := anchor.New(anchor.Config{Key: key, Logs: tl.logs, LogKeys: tl.logKeys, Recorder: tl.client, Store: st, Logger: log})
	if err != nil {
		return nil, err
	}
	for _, u := range plainHTTPRemote(tl.client.LogURLs()) {
		log.Warn("key-history anchoring: "+absenceOverPlainHTTP, "log", u)
	}
	if err := a.Start(ctx); err != nil {
		return nil, err
	}
	log.Info("key history anchored in the transparency log", "event_key", key.KID(), "logs", tl.client.LogURLs())
	return a, nil
}

// anchorOwedUnready is the least time key-history events made here may
// wait for a log before /readyz turns unready (ADR 0052); the
// --tlog-max-backlog-age of leaves when that is longer.
const anchorOwedUnready = 15 * time.Minute

// owedEventsTlog adds key-history events owed to the log to a log
// client's readiness (ADR 0052).
type owedEventsTlog struct {
	api.TransparencyLog
	anc    *anchor.Anchor
	maxAge time.Duration
}

// withOwedEvents returns tl whose Ready also fails while an event this
// process made (a revocation, a binding) has waited longer than maxAge to
// be proved in a log: the database rows that owe it can be deleted, and
// only this process still records it; tl when anchoring is off.
func withOwedEvents(tl api.TransparencyLog, anc *anchor.Anchor, maxAge time.Duration) api.TransparencyLog {
	if tl == nil || anc == nil {
		return tl
	}
	return owedEventsTlog{TransparencyLog: tl, anc: anc, maxAge: maxAge}
}

func (t owedEventsTlog) Ready() error {
	if err := t.TransparencyLog.Ready(); err != nil {
		return err
	}
	if n, oldest := t.anc.Owed(); n > 0 {
		if age := time.Since(oldest); age > t.maxAge {
			return fmt.Errorf("key history: %d event(s) made here not in the transparency log after %s (recorded again until a log proves them)", n, age.Round(time.Second))
		}
	}
	return nil
}

// absenceOverPlainHTTP is the warning for a log that key-history
// anchoring reaches over plain HTTP: that a later state of a version
// (revoked, a next version, a next settings revision) is not in the log
// rests on the log's "not found", which nothing signs (a Merkle log
// proves inclusion, not absence; ADR 0016).
const absenceOverPlainHTTP = `the log is reached over plain HTTP, and that a marker of a later state (revoked, a next version, a next settings revision) is not in the log rests on its "not found" answers, which nothing signs: whoever is on the path could hide one, so a rollback in the database (an un-revoke) would go unseen by a replica that starts; reach the log over https`

func init() { extraCommands = append(extraCommands, newAnchorCmd) }

func newAnchorCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "anchor", Short: "Key-history anchoring in the transparency log (ADR 0016)"}
	var out string
	keygen := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Create an event key (Ed25519, a private JWK, mode 0600) and print its public JWK",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out is required")
			}
			k, err := anchor.GenerateKeyFile(out)
			if err != nil {
				return err
			}
			pub, err := k.PublicJWK()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(pub))
			return nil
		},
	}
	keygen.Flags().StringVar(&out, "out", "", "file to create (refuses to overwrite)")

	checkStore := &storeFlags{}
	checkAnchor := &auditAnchorFlags{}
	check := &cobra.Command{
		Use:   "check --anchor-key-file FILE --tlog-url URL [--tlog-log-keys FILE [--scan]]",
		Short: "Check key history (keys, versions, API tokens) against the transparency log as a fresh replica would; exit 1 naming what the log does not back",
		Long: `Check key history (keys, versions and API tokens) against the transparency
log as a fresh replica would (ADR 0016, ADR 0053), and exit 1 listing
every key, version and API token the log does not back.

Each fact must be in anchor_events or the log; no marker of a later state
(revoked, a next version, a next settings revision) may be in the log. By
default each look-up asks the log (GET proof?hash=) and an absent marker
is the log's "not found", which nothing signs. With --scan (and
--tlog-log-keys), each log is first read in full against its newest
Signed Tree Head (every C2SP tlog-tiles entry bundle, hashed to the
signed root) and every look-up answered from it: a marker's absence is
then proved for that tree, whose log, size and time are printed. With
--witness-keys, only a tree that --witnesses-required of those witnesses
cosigned is read (a tree the log signed alone, such as a branch that
leaves a marker out, is refused), and a tree whose K-th newest trusted
cosignature is older than --max-tree-age (default 1h) is refused: a log
has its witnesses cosign again every 10 minutes even when idle, and an
older tree would not hold markers written since. Two URLs serving one
log fail the check. Every anchor_events row signed more than
--max-log-delay (15m) before the scanned trees were last known current
must be in one of them: one that is not is named (NOT LOGGED) and fails
the check, for the log does not back it (never logged, or dropped).`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if checkAnchor.keyFile == "" || len(checkAnchor.urls) == 0 {
				return usage(cmd, "--anchor-key-file and --tlog-url are required")
			}
			return checkAnchor.checkScan(cmd)
		},
		RunE: checkStore.withStore(func(cmd *cobra.Command, _ []string, st store.Store) error {
			a, err := checkAnchor.anchor(cmd.Context(), st, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			h, err := st.ReadHistory(cmd.Context())
			if err != nil {
				return err
			}
			v := a.CheckAll(cmd.Context(), h)
			w := cmd.OutOrStdout()
			var reasons []string
			for _, r := range v.Keys {
				reasons = append(reasons, r)
			}
			for _, r := range v.Versions {
				reasons = append(reasons, r)
			}
			// API tokens (ADR 0053), as serve's token refresh checks them.
			tokens, err := st.ListTokens(cmd.Context())
			if err != nil {
				return err
			}
			_, refused := a.CheckTokens(cmd.Context(), tokens)
			for _, err := range refused {
				reasons = append(reasons, err.Error())
			}
			sort.Strings(reasons)
			for _, r := range reasons {
				fmt.Fprintln(w, "NOT BACKED: "+r)
			}
			unlogged, err := checkAnchor.printNotLogged(cmd.Context(), w, st)
			if err != nil {
				return err
			}
			if len(reasons)+unlogged > 0 {
				return exitError{code: 1}
			}
			n := 0
			for _, vs := range h.Versions {
				n += len(vs)
			}
			fmt.Fprintf(w, "key history backed by the transparency log: %d keys, %d versions, %d API tokens\n", len(h.Keys), n, len(tokens))
			return nil
		}),
	}
	checkStore.register(check)
	checkAnchor.register(check)
	cmd.AddCommand(keygen, check)
	return cmd
}

// auditAnchorFlags are the flags of audit verify and anchor check for
// checking key history against the transparency log.
type auditAnchorFlags struct {
	keyFile string
	urls    []string
	logKeys string
	scan    bool
	// witnessKeys and witnessesRequired: the cosignatures a scanned tree
	// must carry (--scan only).
	witnessKeys       string
	witnessesRequired int
	// maxTreeAge bounds how old a scanned tree may be (--scan only; 0:
	// not checked).
	maxTreeAge time.Duration
	// maxLogDelay is how long after it was signed an anchoring event may
	// be missing from the scanned trees (--scan only).
	maxLogDelay time.Duration
	// scanned and scannedAt are what anchor read with --scan: whether a
	// status event is in a scanned tree, and the latest time a scanned
	// tree is known to have been its log's newest (Scanned.CurrentAt).
	scanned   func([32]byte) bool
	scannedAt time.Time
}

func (f *auditAnchorFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.keyFile, "anchor-key-file", "", "the node's event key: also check every row against the heads anchored in the transparency log (--tlog-url)")
	cmd.Flags().StringSliceVar(&f.urls, "tlog-url", nil, "transparency log(s) the node anchors key history in (repeatable)")
	cmd.Flags().StringVar(&f.logKeys, "tlog-log-keys", os.Getenv("KEYSVC_TLOG_LOG_KEYS"), "JWK Set file of the logs' keys (env KEYSVC_TLOG_LOG_KEYS): the logs' tree heads must verify with one of them; default: each log's own jwks.json, which then vouches for itself")
	cmd.Flags().StringVar(&f.witnessKeys, "witness-keys", "", "with --scan: witness verifier keys you trust (C2SP signed-note vkeys, one per line; # comments), a file path or an http(s) URL as for keysvc verify; each scanned tree's checkpoint must carry --witnesses-required of their cosignatures, so that a tree the log signed alone (a branch that leaves a marker out) is refused")
	cmd.Flags().IntVar(&f.witnessesRequired, "witnesses-required", 1, "with --witness-keys: how many distinct trusted witnesses must have cosigned each scanned tree")
	cmd.Flags().DurationVar(&f.maxTreeAge, "max-tree-age", time.Hour, "with --scan and --witness-keys: refuse a tree whose --witnesses-required-th newest trusted cosignature is older than this (a log has its witnesses cosign again every 10 minutes even when idle, so an older tree is one from before markers written since); 0 turns the check off (an archived copy of a log). Without --witness-keys it applies only when set, to the tree head's own time, which an idle keysvc log does not move")
	cmd.Flags().DurationVar(&f.maxLogDelay, "max-log-delay", 15*time.Minute, "with --scan: an anchor_events row signed longer than this before the scanned trees were last known current must be in one of them (default: the node's default --tlog-max-backlog-age, 10m, plus 5m of clock skew)")
	cmd.Flags().BoolVar(&f.scan, "scan", false, "read every entry of each log against its newest signed tree head (C2SP tlog-tiles; needs --tlog-log-keys) and answer every look-up from it: that a marker of a later state is absent is then proved as of that tree, not taken from the log's unsigned \"not found\". Costs every entry's bytes: a monitor's check")
}

// checkScan refuses --scan without pinned log keys (a usage error, exit
// 2): a tree the log signs with a key it serves itself proves nothing
// about what it leaves out.
func (f *auditAnchorFlags) checkScan(cmd *cobra.Command) error {
	if f.scan && f.logKeys == "" {
		return usage(cmd, "--scan needs --tlog-log-keys (or KEYSVC_TLOG_LOG_KEYS): a log read in full proves what it does not hold only under keys it does not serve itself")
	}
	if !f.scan && (f.witnessKeys != "" || cmd.Flags().Changed("witnesses-required") || cmd.Flags().Changed("max-tree-age") || cmd.Flags().Changed("max-log-delay")) {
		return usage(cmd, "--witness-keys, --witnesses-required, --max-tree-age and --max-log-delay apply to the trees --scan reads: add --scan")
	}
	if f.witnessKeys != "" && f.witnessesRequired < 1 {
		return usage(cmd, "--witnesses-required must be at least 1")
	}
	if f.maxTreeAge < 0 {
		return usage(cmd, "--max-tree-age must not be negative (0 turns the check off)")
	}
	if f.maxLogDelay < 0 {
		return usage(cmd, "--max-log-delay must not be negative")
	}
	f.maxTreeAge = maxTreeAgeFor(cmd, f.witnessKeys != "", f.maxTreeAge)
	if f.keyFile != "" && len(f.urls) == 0 {
		return usage(cmd, "--anchor-key-file needs --tlog-url: the transparency log(s) the node anchors key history in")
	}
	return nil
}

// anchor makes a check-only Anchor over st and the logs, whose tree heads
// must verify with the --tlog-log-keys keys when given. Without them each
// log's own jwks.json is trusted. A warning on stderr names every log
// reached over plain HTTP to a host that is not loopback: whoever is on
// that path could answer for the log, keys and all, or with pinned keys
// still answer "not found" (absenceOverPlainHTTP).
//
// With --scan, each log is first read in full (tlogaudit.Scan) and every
// look-up answered from what was read; a line on w names each scanned
// tree.
func (f *auditAnchorFlags) anchor(ctx context.Context, st store.Store, w, stderr io.Writer) (*anchor.Anchor, error) {
	if f.keyFile == "" || len(f.urls) == 0 {
		return nil, errors.New("--anchor-key-file and --tlog-url are required")
	}
	key, err := anchor.LoadKeyFile(f.keyFile)
	if err != nil {
		return nil, err
	}
	hl, keys, err := httpLogs(f.urls, f.logKeys, "")
	if err != nil {
		return nil, err
	}
	for _, u := range plainHTTPRemote(f.urls) {
		switch {
		case keys == nil:
			fmt.Fprintf(stderr, "keysvc: warning: %s: the log's keys are not pinned and it is reached over plain HTTP, so whoever is on the path can answer for it; pin them with --tlog-log-keys\n", u)
		case f.scan:
			fmt.Fprintf(stderr, "keysvc: warning: %s: %s\n", u, staleTreeOverPlainHTTP)
		default:
			fmt.Fprintf(stderr, "keysvc: warning: %s: %s\n", u, absenceOverPlainHTTP)
		}
	}
	cfg := anchor.Config{Key: key, Logs: asLogs(hl), LogKeys: keys, Store: st}
	if f.scan {
		var witnesses []string
		if f.witnessKeys != "" {
			for _, u := range plainHTTPRemote([]string{f.witnessKeys}) {
				fmt.Fprintf(stderr, "keysvc: warning: --witness-keys %s: the witnesses you trust are fetched over plain HTTP, so whoever is on the path could name witnesses of their own; fetch them over https or from a file\n", displayURL(u))
			}
			b, err := loadDocument(ctx, "--witness-keys", f.witnessKeys)
			if err != nil {
				return nil, err
			}
			ws, err := verifier.ParseWitnessKeys(b)
			if err != nil {
				return nil, fmt.Errorf("--witness-keys %s: %w", f.witnessKeys, err)
			}
			if f.witnessesRequired > len(ws) {
				return nil, fmt.Errorf("--witnesses-required %d: --witness-keys %s holds %d keys", f.witnessesRequired, f.witnessKeys, len(ws))
			}
			for _, k := range ws {
				witnesses = append(witnesses, k.VKey)
			}
		}
		if f.scanned, f.scannedAt, err = scanLogs(ctx, f.urls, keys, witnesses, f.witnessesRequired, f.maxTreeAge, w); err != nil {
			return nil, err
		}
		cfg.Scanned = f.scanned
	}
	return anchor.New(cfg)
}

// staleTreeOverPlainHTTP is the --scan warning for a log reached over
// plain HTTP: the scan proves absence in the tree it read, and whoever is
// on the path could serve another tree a pinned key signed.
const staleTreeOverPlainHTTP = `the log is reached over plain HTTP: whoever is on the path could serve another tree a pinned key signed (an older one of this log, or another log's), and the scan proves absence only in the tree it read (its log, size and time are printed); reach the log over https`

// scanLogs reads every log in full (tlogaudit.Scan) under the pinned keys
// (and, with witnesses, only trees that many of them cosigned) and returns
// whether a status event's hash is a leaf of any of them. It prints one
// line per log: the tree read and how many status events it holds. A log
// whose entries do not hash to its signed root fails the check, and so do
// two URLs serving one log (log_id): the answers of all logs are joined,
// so a tree served in place of another log's would hide that log's
// markers. maxAge > 0 refuses a tree older than that
// (tlogaudit.ScanOptions.MaxAge).
func scanLogs(ctx context.Context, urls []string, pinned *verifier.JWKS, witnesses []string, witnessesRequired int, maxAge time.Duration, w io.Writer) (has func([32]byte) bool, newest time.Time, err error) {
	var pubs []ed25519.PublicKey
	for _, k := range pinned.Keys {
		if pub, ok := k.Public.(ed25519.PublicKey); ok {
			pubs = append(pubs, pub)
		}
	}
	if len(pubs) == 0 {
		return nil, newest, errors.New("--scan: --tlog-log-keys holds no Ed25519 key (a log key is Ed25519)")
	}
	var scans []*tlogaudit.Scanned
	byLog := map[string]string{}
	for _, u := range urls {
		opts := tlogaudit.ScanOptions{BaseURL: u, Keys: pubs, ArtifactTypes: []string{tlogclient.ArtifactStatusEvent}, MaxAge: maxAge}
		if len(witnesses) > 0 {
			opts.WitnessVKeys, opts.WitnessesRequired = witnesses, witnessesRequired
		}
		s, err := tlogaudit.Scan(ctx, opts)
		if err != nil {
			return nil, newest, fmt.Errorf("--scan %s: %w", displayURL(u), err)
		}
		if other, ok := byLog[s.LogID]; ok {
			return nil, newest, fmt.Errorf("--scan: %s and %s both serve log %s: each --tlog-url must be a log of its own", displayURL(other), displayURL(u), s.LogID)
		}
		byLog[s.LogID] = u
		cosigned := ""
		if len(s.Cosignatures) > 0 {
			newest := s.Cosignatures[0].Timestamp
			for _, c := range s.Cosignatures[1:] {
				if c.Timestamp.After(newest) {
					newest = c.Timestamp
				}
			}
			cosigned = fmt.Sprintf(", cosigned by %d trusted witnesses (newest %s)", len(s.Cosignatures), newest.Format(time.RFC3339))
		}
		fmt.Fprintf(w, "scanned %s: log %s, tree size %d (STH of %s%s), %d status events, every entry hashed to the signed root\n",
			displayURL(u), s.LogID, s.TreeSize, s.Timestamp.Format(time.RFC3339), cosigned, s.Kept)
		scans = append(scans, s)
		if s.CurrentAt.After(newest) {
			newest = s.CurrentAt
		}
	}
	return func(h [32]byte) bool {
		for _, s := range scans {
			if s.Has(tlogclient.ArtifactStatusEvent, h) {
				return true
			}
		}
		return false
	}, newest, nil
}

// maxTreeAgeFor is the --max-tree-age a scan or audit applies: the flag's
// value, except its default when no witnesses are required. Without
// witnesses a tree's only time is its STH's, which an idle keysvc log
// keeps from when the size was first signed, so bounding it by default
// would fail a healthy, quiet log; set explicitly, it applies.
func maxTreeAgeFor(cmd *cobra.Command, witnessed bool, flag time.Duration) time.Duration {
	if !witnessed && !cmd.Flags().Changed("max-tree-age") {
		return 0
	}
	return flag
}

// printNotLogged writes to w, after a --scan, a NOT LOGGED line for every
// anchor_events row that none of the scanned trees holds although it was
// signed more than --max-log-delay before a scanned tree was last known
// current (Scanned.CurrentAt: its witnesses' cosignatures, or its STH's
// time): the node's own record that it signed the event, without the log's. Either the node never got it logged (its
// backlog) or a log dropped it after accepting it; either way the log does
// not back it, and a database writer who removed it would leave no trace
// there. It returns how many it named.
func (f *auditAnchorFlags) printNotLogged(ctx context.Context, w io.Writer, st store.Store) (int, error) {
	if f.scanned == nil {
		return 0, nil
	}
	as, ok := st.(store.AnchorStore)
	if !ok {
		return 0, errors.New("--scan: this store keeps no anchor_events")
	}
	evs, err := as.ListAnchorEvents(ctx)
	if err != nil {
		return 0, err
	}
	cutoff := f.scannedAt.Add(-f.maxLogDelay)
	n := 0
	for _, ev := range evs {
		if ev.CreatedAt.Before(cutoff) && !f.scanned(ev.Hash) {
			n++
			fmt.Fprintf(w, "NOT LOGGED: %s %s (%s), signed %s: in anchor_events, but in none of the scanned trees (current at %s): the node never got it logged, or a log dropped it\n",
				ev.Kind, ev.Subject, tlogclient.FormatHash(ev.Hash), ev.CreatedAt.UTC().Format(time.RFC3339), f.scannedAt.UTC().Format(time.RFC3339))
		}
	}
	return n, nil
}

// verifyAnchored checks rows (an intact chain) against the log: every row
// whose seq the log anchors must have the anchored hash, and the log must
// anchor no row after the last. It prints the first divergence and returns
// exitError{1}, or a summary.
func (f *auditAnchorFlags) verifyAnchored(ctx context.Context, w, stderr io.Writer, st store.Store, rows []store.AuditEvent) error {
	if f.keyFile == "" {
		return nil
	}
	a, err := f.anchor(ctx, st, w, stderr)
	if err != nil {
		return err
	}
	res, err := a.VerifyAudit(ctx, rows)
	if err != nil {
		return err
	}
	if res.Divergence != "" {
		fmt.Fprintf(w, "audit chain DIVERGES from the transparency log at row %d: %s\n", res.FirstSeq, res.Divergence)
		return exitError{code: 1}
	}
	fmt.Fprintf(w, "audit chain anchored: %d of %d rows anchored in the transparency log", res.Anchored, len(rows))
	if res.Unanchored > 0 {
		fmt.Fprintf(w, " (%d written without the event key, e.g. by an offline CLI command: not anchored)", res.Unanchored)
	}
	fmt.Fprintln(w)
	if unlogged, err := f.printNotLogged(ctx, w, st); err != nil {
		return err
	} else if unlogged > 0 {
		return exitError{code: 1}
	}
	return nil
}

// cliAnchorFlags anchor the audit rows that tokens create and tokens
// revoke write directly into key history (ADR 0016, "Offline commands"),
// as serve anchors its own: the row's audit_head and audit_seq markers are
// signed with the event key, kept in anchor_events in the same
// transaction and submitted to every log before the command returns (what
// a log did not take, serve submits again within --anchor-check-interval).
type cliAnchorFlags struct {
	keyFile, logKeys, tokenFile string
	urls                        []string
	unanchored                  bool
	rec                         *logsRecorder
	anchor                      *anchor.Anchor // set by wrap
}

func (f *cliAnchorFlags) register(cmd *cobra.Command, create bool) {
	var urls []string
	if v := os.Getenv("KEYSVC_TLOG_URL"); v != "" {
		urls = strings.Split(v, ",")
	}
	fl := cmd.Flags()
	fl.StringVar(&f.keyFile, "anchor-key-file", os.Getenv("KEYSVC_ANCHOR_KEY_FILE"), "the node's event key (env KEYSVC_ANCHOR_KEY_FILE): anchor this command's audit row in the transparency log (--tlog-url), as serve anchors its own")
	fl.StringSliceVar(&f.urls, "tlog-url", urls, "transparency log(s) the node anchors key history in (repeatable or comma-separated; env KEYSVC_TLOG_URL): the same list as serve's")
	fl.StringVar(&f.logKeys, "tlog-log-keys", os.Getenv("KEYSVC_TLOG_LOG_KEYS"), "JWK Set file of the logs' keys: Signed Entry Promises must verify with one of them (env KEYSVC_TLOG_LOG_KEYS; default: each log's own jwks.json)")
	fl.StringVar(&f.tokenFile, "tlog-token-file", os.Getenv("KEYSVC_TLOG_TOKEN_FILE"), "file of bearer tokens for logs that authenticate submitters, as serve's (env KEYSVC_TLOG_TOKEN_FILE)")
	if create {
		fl.BoolVar(&f.unanchored, "unanchored", false, "when key history is anchored but API tokens are not yet (serve of a release before ADR 0053): write the audit row without the event key (keysvc audit verify then counts it as not anchored); refused once tokens are anchored")
	}
}

// wrap returns st anchored with the event key, which must be the one this
// key history was anchored with (its bootstrap marker in anchor_events):
// another node's key would write facts that node's own audit trail then
// counts as rows it lacks. Without an event key, on key history that is
// anchored already (anchor_events not empty): create refuses unless
// --unanchored (granting access leaves an anchored trace or an explicit,
// counted exception); revoke warns and goes on (taking access away is
// never held up for want of the event key).
func (f *cliAnchorFlags) wrap(ctx context.Context, st store.Store, create bool, stderr io.Writer) (store.Store, error) {
	as, ok := st.(store.AnchorStore)
	if f.keyFile == "" {
		if !ok {
			return st, nil
		}
		evs, err := as.ListAnchorEvents(ctx)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			return st, nil
		}
		if create && slices.ContainsFunc(evs, func(ev store.AnchorEvent) bool { return ev.Kind == anchor.MarkerTokens }) {
			// A token is accepted only with its fact (ADR 0053): one
			// written without the event key would never be usable.
			return nil, errors.New("API tokens are anchored in a transparency log (ADR 0053): serve accepts a token only with its fact, signed with the event key; give --anchor-key-file and --tlog-url (or KEYSVC_ANCHOR_KEY_FILE and KEYSVC_TLOG_URL), the ones serve runs with")
		}
		if create && !f.unanchored {
			return nil, errors.New("key history is anchored in a transparency log (ADR 0016): give --anchor-key-file and --tlog-url (or KEYSVC_ANCHOR_KEY_FILE and KEYSVC_TLOG_URL) so that this token's audit row is anchored too, or --unanchored to write it without (keysvc audit verify then counts the row as not anchored)")
		}
		fmt.Fprintln(stderr, "keysvc: warning: key history is anchored in a transparency log, but no --anchor-key-file was given: this audit row is not anchored (keysvc audit verify counts it)")
		return st, nil
	}
	if !ok {
		return nil, errors.New("this key-history store cannot keep anchoring events")
	}
	if len(f.urls) == 0 {
		return nil, errors.New("--anchor-key-file needs --tlog-url (env KEYSVC_TLOG_URL): the logs serve anchors key history in")
	}
	key, err := anchor.LoadKeyFile(f.keyFile)
	if err != nil {
		return nil, err
	}
	boot, err := key.BootstrapMarker()
	if err != nil {
		return nil, err
	}
	found, err := as.AnchorEventsByHash(ctx, [][32]byte{boot.Hash})
	if err != nil {
		return nil, err
	}
	_, inStore := found[boot.Hash]
	urls := make([]string, len(f.urls))
	for i, u := range f.urls {
		urls[i] = strings.TrimSpace(u)
	}
	hl, keys, err := httpLogs(urls, f.logKeys, f.tokenFile)
	if err != nil {
		return nil, err
	}
	logs := asLogs(hl)
	f.rec = &logsRecorder{logs: logs}
	a, err := anchor.New(anchor.Config{Key: key, Logs: logs, LogKeys: keys, Store: st, Recorder: f.rec,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	if !inStore {
		// Not in anchor_events: a key history never anchored with this
		// key, or one whose anchor_events a database writer emptied; the
		// logs tell them apart.
		if err := a.LogsHoldHistory(ctx); err != nil {
			return nil, fmt.Errorf("key history was not anchored with the event key in %s (event key %s: its bootstrap marker is neither in anchor_events nor in the logs given: %v): give the key file and logs serve runs with, or start serve with them once first", f.keyFile, key.KID(), err)
		}
	}
	f.anchor = a
	return a.Wrap(st), nil
}

// checkedVersion returns version kid and its key as checked: from one read of key
// history st that the logs back for it and its key (anchor.CheckAll: the
// public key, state and instants, the backend reference, the key's
// policy). What an offline command then does outside keysvc (schedule a
// KMS key's deletion, disable it) must act on that copy, not on another
// read a database writer may have pointed at another key in between, nor
// on a row the log does not back (attack reviews, session 47; ADR 0050).
// Only after wrap with an event key.
func (f *cliAnchorFlags) checkedVersion(ctx context.Context, st store.Store, kid string) (store.Key, store.KeyVersion, error) {
	if err := f.anchor.LogsHoldHistory(ctx); err != nil {
		return store.Key{}, store.KeyVersion{}, err
	}
	h, err := st.ReadHistory(ctx)
	if err != nil {
		return store.Key{}, store.KeyVersion{}, err
	}
	for _, k := range h.Keys {
		for _, v := range h.Versions[k.Name] {
			if v.KID != kid {
				continue
			}
			// Its own key only: the rest of history is not acted on, and
			// a fresh process would look each marker of it up (a review,
			// session 47: 1,060 look-ups for 20 keys of 25 versions).
			verdict := f.anchor.CheckAll(ctx, store.History{Keys: []store.Key{k}, Versions: map[string][]store.KeyVersion{k.Name: h.Versions[k.Name]}})
			if reason := cmp.Or(verdict.Keys[k.Name], verdict.Versions[kid]); reason != "" {
				return store.Key{}, store.KeyVersion{}, fmt.Errorf("refusing to act on %s: key history as stored is not what the transparency log backs: %s", kid, reason)
			}
			return k, v, nil
		}
	}
	return store.Key{}, store.KeyVersion{}, fmt.Errorf("no key version %q: %w", kid, store.ErrNotFound)
}

// anchoredHistory reports whether key history st is anchored in a
// transparency log (anchor_events is not empty).
func anchoredHistory(ctx context.Context, st store.Store) (bool, error) {
	as, ok := st.(store.AnchorStore)
	if !ok {
		return false, nil
	}
	hashes, err := as.AnchorEventHashes(ctx)
	return len(hashes) > 0, err
}

// warnUnrecorded tells the operator when a committed row's events did not
// reach every log (they are in anchor_events: serve submits them again).
func (f *cliAnchorFlags) warnUnrecorded(stderr io.Writer) {
	if f.rec == nil {
		return
	}
	if err := f.rec.failed(); err != nil {
		fmt.Fprintf(stderr, "keysvc: warning: the change is committed and its audit row anchored in anchor_events, but not every transparency log took it yet (%v); a running serve records it from anchor_events within --anchor-check-interval and owes it from memory until a log has it (nothing to redo; until a serve has seen it, it rests on its anchor_events row alone: keep a serve running)\n", err)
	}
}

// logsRecorder submits artifacts to every log at once (add-batch, its
// promise checked; each log with its own 10 s budget), for a command that
// does not run a log client. What it records is kept in anchor_events
// too, so a log that is down now loses nothing.
type logsRecorder struct {
	logs []tlogclient.Log
	mu   sync.Mutex
	err  error
}

// Record implements anchor.Recorder.
func (r *logsRecorder) Record(ctx context.Context, artifactType string, artifacts ...string) error {
	entries := make([]tlogclient.Entry, len(artifacts))
	for i, a := range artifacts {
		entries[i] = tlogclient.Entry{ArtifactType: artifactType, ArtifactHash: tlogclient.HashArtifact(a)}
	}
	errs := make([]error, len(r.logs))
	var wg sync.WaitGroup
	for i, l := range r.logs {
		wg.Go(func() {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := l.AddBatch(lctx, entries); err != nil {
				errs[i] = fmt.Errorf("log %s: %w", l.URL(), err)
			}
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil {
		r.mu.Lock()
		r.err = errors.Join(r.err, err)
		r.mu.Unlock()
	}
	return err
}

func (r *logsRecorder) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
