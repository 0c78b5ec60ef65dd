package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlog"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
	"github.com/keysvc/keysvc/tlogclient"
	"github.com/keysvc/keysvc/verifier"
)

// tlogFlags configure serve's transparency-log client (issue 12, ADR 0015).
type tlogFlags struct {
	urls           []string
	logKeys        string
	tokenFile      string
	maxBacklog     int64
	maxBacklogAge  time.Duration
	lease          time.Duration
	committers     int
	outboxSync     string
	durability     string // "spool" or "outbox"
	spoolSync      string
	embedded       string // "auto", "true" or "false"
	embeddedListen string
}

func (f *tlogFlags) register(fs *pflag.FlagSet) {
	fs.StringSliceVar(&f.urls, "tlog-url", nil, "transparency log every issued JWS is submitted to: the operator's base URL (repeatable or comma-separated; env KEYSVC_TLOG_URL). Every replica must list the same URLs")
	fs.StringVar(&f.tokenFile, "tlog-token-file", "", "file of bearer tokens for logs that authenticate submitters: a line TOKEN (every log) or URL TOKEN (that log); mode 0600 (env KEYSVC_TLOG_TOKEN_FILE)")
	fs.StringVar(&f.logKeys, "tlog-log-keys", "", "JWK Set file of the logs' keys: Signed Entry Promises must verify with one of them (default: each log's own jwks.json)")
	fs.Int64Var(&f.maxBacklog, "tlog-max-backlog", 1_000_000, "/readyz turns unready when a log has more leaves waiting in the outbox")
	fs.DurationVar(&f.maxBacklogAge, "tlog-max-backlog-age", 10*time.Minute, "/readyz turns unready when a leaf has waited longer for a log")
	fs.DurationVar(&f.lease, "tlog-lease", 30*time.Second, "how long an outbox row belongs to the replica that wrote it before another replica may submit it (the delay before a killed replica's leaves are taken over)")
	fs.StringVar(&f.outboxSync, "tlog-outbox-sync", "normal", "SQLite only: how an outbox group commit reaches the disk before the signature is answered: normal (written to the WAL: survives kill -9 of keysvc, not a power loss) or full (fsynced: survives a power loss; about 4× the wait). PostgreSQL commits follow its synchronous_commit")
	fs.StringVar(&f.durability, "tlog-durability", "spool", "where a leaf is made durable before its JWS is answered: spool (an append-only file of this replica, <data-dir>/tlog-spool: no database write on the signing path; a replica that never comes back is handed over with `keysvc tlog drain`) or outbox (a key-history table shared by the replicas: for replicas without a durable local disk; ADR 0024)")
	fs.StringVar(&f.spoolSync, "tlog-spool-sync", tlogclient.SpoolSyncWrite, "with --tlog-durability spool: write (records copied into a shared memory mapping of the spool segment, in the page cache when the request is answered: survives kill -9 of keysvc, not a power loss) or fdatasync (write(2) and fdatasync(2) per group of concurrent requests: survives a power loss)")
	fs.IntVar(&f.committers, "tlog-committers", 0, "group commits of the outbox in flight at once (default 1 on SQLite, 4 on PostgreSQL)")
	fs.StringVar(&f.embedded, "tlog-embedded", "auto", "run a transparency log in this process (Tessera, POSIX, <data-dir>/tlog): true, false, or auto (with --dev when no --tlog-url is given)")
	fs.StringVar(&f.embeddedListen, "tlog-embedded-listen", "127.0.0.1:0", "listener of the embedded log's endpoints (the log's own surface: verifiers fetch its keys, tree heads and proofs there; it takes no submissions over HTTP, add and add-batch answer 403: serve logs in process)")
}

// validate checks the flags alone.
func (f *tlogFlags) validate() error {
	switch f.embedded {
	case "auto", "true", "false":
	default:
		return fmt.Errorf("--tlog-embedded %q: want true, false or auto", f.embedded)
	}
	if f.durability != "spool" && f.durability != "outbox" {
		return fmt.Errorf("--tlog-durability %q: want spool or outbox", f.durability)
	}
	if f.spoolSync != tlogclient.SpoolSyncWrite && f.spoolSync != tlogclient.SpoolSyncFdatasync {
		return fmt.Errorf("--tlog-spool-sync %q: want write or fdatasync", f.spoolSync)
	}
	if f.outboxSync != "normal" && f.outboxSync != "full" {
		return fmt.Errorf("--tlog-outbox-sync %q: want normal or full", f.outboxSync)
	}
	for _, u := range f.urls {
		if _, err := tlogclient.NormalizeURL(u); err != nil {
			return fmt.Errorf("--tlog-url: %w", err)
		}
	}
	if f.maxBacklog <= 0 || f.maxBacklogAge <= 0 || f.lease < time.Second || f.committers < 0 {
		return errors.New("--tlog-max-backlog and --tlog-max-backlog-age must be positive, --tlog-lease at least 1s, --tlog-committers not negative")
	}
	return nil
}

// tlogRuntime is the running client and, when embedded, the log.
type tlogRuntime struct {
	client *tlogclient.Client
	logs   []tlogclient.Log // the configured logs (key-history anchoring reads them)
	// logKeys are the pinned log keys (--tlog-log-keys); nil: each log's own.
	logKeys *verifier.JWKS
	spool   *tlogclient.Spool
	cancel  context.CancelFunc
	done    chan struct{}

	op          *tlog.Operator
	opBackend   backends.Backend
	opServer    *http.Server
	EmbeddedURL string // the embedded log's base URL, "" when none
	log         *slog.Logger
}

// start starts the client (nil runtime when no log is configured): the
// embedded log first when asked for, then the client over every log.
func (f *tlogFlags) start(ctx context.Context, st store.Store, log *slog.Logger, dataDir, kekFile string, dev bool) (*tlogRuntime, error) {
	embedded := f.embedded == "true" || f.embedded == "auto" && dev && len(f.urls) == 0
	if !embedded && len(f.urls) == 0 {
		return nil, nil
	}
	// With the spool, the outbox is only read for rows left in it (moved
	// into the spool); with the outbox, it is the durable record.
	ob, ok := st.(store.Outbox)
	if !ok && f.durability == "outbox" {
		return nil, errors.New("transparency log: this key-history store has no outbox")
	}
	if ok {
		if err := ob.ConfigureOutbox(store.OutboxOptions{SQLiteSynchronous: f.outboxSync}); err != nil {
			return nil, err
		}
	}
	rt := &tlogRuntime{log: log}
	urls := append([]string(nil), f.urls...)
	if embedded {
		u, err := rt.startEmbedded(ctx, log, filepath.Join(dataDir, "tlog"), kekFile, dev, f.embeddedListen)
		if err != nil {
			return nil, fmt.Errorf("embedded transparency log: %w", err)
		}
		urls = append(urls, u)
	}
	hls, logKeys, err := httpLogs(urls, f.logKeys, f.tokenFile)
	rt.logKeys = logKeys
	if err != nil {
		rt.stop()
		return nil, err
	}
	if f.logKeys == "" {
		for _, u := range plainHTTPRemote(f.urls) {
			log.Warn("transparency log: the log's keys are not pinned and it is reached over plain HTTP, so whoever is on the path can sign its promises; pin them with --tlog-log-keys", "log", u)
		}
	}
	var logs []tlogclient.Log
	for _, l := range hls {
		if rt.op != nil && l.URL() == rt.EmbeddedURL {
			logs = append(logs, embeddedLog{HTTPLog: l, op: rt.op})
			continue
		}
		logs = append(logs, l)
	}
	committers := f.committers
	if committers == 0 {
		committers = 1
		if st.Kind() == "postgres" {
			committers = 4
		}
	}
	if f.durability == "spool" {
		sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: filepath.Join(dataDir, spoolDirName), Sync: f.spoolSync, Logger: log})
		if err != nil {
			rt.stop()
			return nil, err
		}
		rt.spool = sp
	}
	if embedded {
		var remote []string // the other logs, as the spool and outbox name them
		for _, l := range hls {
			if l.URL() != rt.EmbeddedURL {
				remote = append(remote, l.URL())
			}
		}
		if err := moveEmbeddedOwed(ctx, log, rt.spool, filepath.Join(dataDir, spoolDirName), ob, filepath.Join(dataDir, "tlog"), rt.EmbeddedURL, remote); err != nil {
			rt.stop()
			return nil, err
		}
	}
	c, err := tlogclient.New(tlogclient.Config{
		Outbox: ob, Spool: rt.spool, Logs: logs, Logger: log, Committers: committers, Lease: f.lease,
		ClaimAllAtStart: st.Kind() == "sqlite", MaxBacklogRows: f.maxBacklog, MaxBacklogAge: f.maxBacklogAge,
	})
	if err != nil {
		rt.stop()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rt.client, rt.cancel, rt.done, rt.logs = c, cancel, make(chan struct{}), logs
	go func() { defer close(rt.done); c.Run(runCtx) }()
	if rt.spool != nil {
		log.Info("transparency log client running", "logs", c.LogURLs(), "durability", "spool", "spool", rt.spool.Dir(), "spool_sync", f.spoolSync)
		return rt, nil
	}
	warnLeftSpool(log, filepath.Join(dataDir, spoolDirName), logs, rt.EmbeddedURL)
	sync := f.outboxSync
	if st.Kind() == "postgres" {
		sync = "postgresql synchronous_commit"
	}
	log.Info("transparency log client running", "logs", c.LogURLs(), "durability", "outbox", "committers", committers, "lease", f.lease.String(), "outbox_sync", sync)
	return rt, nil
}

// startEmbedded runs a log operator in process with its own listener; in
// dev mode it creates its software log key (sealed under the node's KEK)
// when missing.
func (rt *tlogRuntime) startEmbedded(ctx context.Context, log *slog.Logger, dir, kekFile string, dev bool, listen string) (string, error) {
	kf := &tlogKeyFlags{dataDir: dir, kekFile: kekFile}
	if err := ensureDir(dir); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, logKeyFile)); errors.Is(err, os.ErrNotExist) {
		if !dev {
			return "", fmt.Errorf("no log key in %s: create it with `keysvc tlog keygen --data-dir %s --origin ORIGIN`", dir, dir)
		}
		kf.origin = "localhost/vrp-log"
		if _, err := kf.createLogKey(ctx, software.Kind, "tlog-dev", log); err != nil {
			return "", err
		}
		log.Warn("dev mode: created a software log key for the embedded transparency log", "dir", dir)
	}
	rec, s, b, err := kf.loadLogKey(ctx, log)
	if err != nil {
		return "", err
	}
	op, err := tlog.New(ctx, tlog.Config{Dir: dir, Origin: rec.Origin, Signer: s, Logger: log, SubmitInProcessOnly: true})
	if err != nil {
		b.Close()
		return "", err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		op.Close(context.Background()) //nolint:errcheck // failing anyway
		b.Close()
		return "", err
	}
	srv := newHTTPServer(op.Handler())
	srv.WriteTimeout = 60 * time.Second
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("embedded transparency log listener failed", "err", err)
		}
	}()
	rt.op, rt.opBackend, rt.opServer = op, b, srv
	rt.EmbeddedURL = "http://" + ln.Addr().String()
	// "url", not "addr": tools read the first "addr" as serve's own listener.
	log.Info("embedded transparency log listening", "url", rt.EmbeddedURL, "log_id", rec.Origin, "vkey", op.VKey())
	return rt.EmbeddedURL, nil
}

// embeddedURLFile, in the embedded log's directory, holds the URLs the
// embedded log had in earlier runs whose owed records are not yet handed
// on, one per line, and last the current run's.
const embeddedURLFile = "embedded-url"

// moveEmbeddedOwed keeps what is owed to the embedded log across a
// restart. The spool and the outbox keep each log's records under the
// log's URL, and the embedded log's URL is its listener's address, which
// changes at each start with the default --tlog-embedded-listen (port 0):
// without this, records signed but not yet delivered when a run stopped
// would stay owed to a URL no longer configured and never reach the log.
//
// The earlier URLs are read from dir, and url is added to the file before
// anything moves, so that a start that fails part way (or a crash) leaves
// every earlier URL listed for the next start. For each earlier URL, its
// spool cursor is handed to url (Spool.MoveCursor; an earlier URL without
// a cursor rewinds url's to the spool's first record, Spool.RewindCursor,
// as what it was owed is unknown) and its outbox rows are
// enqueued again for url and then deleted (ob may be nil; a crash in
// between leaves a row for both, and the log folds the duplicate). An
// earlier URL that is now a configured log of its own (remote,
// --tlog-url) is left alone: its records are that log's. Once every
// earlier URL is handed on, the file holds url alone.
//
// sp is the run's spool; nil with --tlog-durability outbox, and then the
// spool an earlier spool-mode run left in spoolDir, if any, is opened for
// the moves: its cursors would otherwise stay under URLs this file no
// longer lists, and a later return to the spool mode would not deliver
// them. When that spool cannot be opened (`keysvc tlog drain` holds it),
// the earlier URLs stay listed for the next start.
func moveEmbeddedOwed(ctx context.Context, log *slog.Logger, sp *tlogclient.Spool, spoolDir string, ob store.Outbox, dir, url string, remote []string) error {
	p := filepath.Join(dir, embeddedURLFile)
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("embedded transparency log: %w", err)
	}
	var earlier []string
	for _, u := range strings.Split(string(b), "\n") {
		if u = strings.TrimSpace(u); u != "" && u != url && !slices.Contains(earlier, u) {
			earlier = append(earlier, u)
		}
	}
	if err := writeEmbeddedURLs(p, append(slices.Clone(earlier), url)); err != nil {
		return err
	}
	if len(earlier) == 0 {
		return nil
	}
	keep := false // an earlier URL's spool cursor could not be handed on
	if sp == nil {
		if _, err := os.Stat(spoolDir); err == nil {
			left, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: spoolDir, Logger: log})
			if err != nil {
				log.Warn("transparency log: the spool of an earlier run could not be opened to hand what it owes the embedded log to its new URL; the next start tries again", "spool", spoolDir, "err", err)
				keep = true
			} else {
				defer left.Close()
				sp = left
			}
		}
	}
	for _, prev := range earlier {
		if slices.Contains(remote, prev) {
			log.Warn("transparency log: the embedded log had the URL of a log now configured with --tlog-url; what is owed to that URL stays that log's", "url", prev)
			continue
		}
		if sp != nil {
			moved, err := sp.MoveCursor(prev, url)
			if err != nil {
				return err
			}
			if moved {
				log.Info("transparency log: spool: the embedded log listens at a new URL; what was owed to the previous one is delivered to it", "previous", prev, "url", url)
			} else {
				// Listed but without a cursor: it was lost (a power loss
				// after the file was written), or never written (a run that
				// stopped first, an outbox run that could not open the
				// spool). What it was owed is unknown: deliver all.
				if err := sp.RewindCursor(url); err != nil {
					return err
				}
				log.Warn("transparency log: spool: no delivered position for an earlier URL of the embedded log; every leaf still in the spool is delivered to it again", "previous", prev, "url", url)
			}
		}
		if ob != nil {
			n, err := moveOutboxRows(ctx, ob, prev, url)
			if err != nil {
				return fmt.Errorf("embedded transparency log: moving outbox rows from %s to %s: %w", prev, url, err)
			}
			if n > 0 {
				log.Info("transparency log: outbox: the embedded log listens at a new URL; its rows are delivered to it", "previous", prev, "url", url, "rows", n)
			}
		}
	}
	if keep {
		return nil
	}
	return writeEmbeddedURLs(p, []string{url})
}

// writeEmbeddedURLs replaces the file at p with urls, one per line, and
// makes the replacement durable (fsync of the file and of its directory):
// a file lost or emptied by a power loss would strand what the spool or
// the outbox owes the earlier URLs.
func writeEmbeddedURLs(p string, urls []string) error {
	if err := writeFileAtomic(p, []byte(strings.Join(urls, "\n")+"\n")); err != nil {
		return fmt.Errorf("embedded transparency log: %w", err)
	}
	return nil
}

// moveOutboxRows enqueues every outbox row of log URL from again for log
// URL to (claimable at once), then deletes the originals, 1,000 at a time;
// it returns how many it moved.
func moveOutboxRows(ctx context.Context, ob store.Outbox, from, to string) (int, error) {
	moved := 0
	for {
		now := time.Now()
		all := now.Add(100 * 365 * 24 * time.Hour) // every row, whatever its lease: the previous run has stopped
		// Claimed until now: if the enqueue below fails, the rows are
		// claimable again at once (by a later start, or by a client
		// delivering to from), not leased away.
		rows, err := ob.ClaimOutbox(ctx, from, all, now, 1000)
		if err != nil || len(rows) == 0 {
			return moved, err
		}
		again := make([]store.OutboxRow, len(rows))
		ids := make([]int64, len(rows))
		for i, r := range rows {
			again[i] = store.OutboxRow{LogURL: to, ArtifactType: r.ArtifactType, ArtifactHash: r.ArtifactHash, EnqueuedAt: r.EnqueuedAt, LeaseUntil: now}
			ids[i] = r.ID
		}
		if _, err := ob.EnqueueOutbox(ctx, again); err != nil {
			return moved, err
		}
		if err := ob.DeleteOutbox(ctx, ids); err != nil {
			return moved, err
		}
		moved += len(rows)
	}
}

// api returns the client for api.Config (nil: no transparency log).
func (rt *tlogRuntime) api() api.TransparencyLog {
	if rt == nil || rt.client == nil {
		return nil
	}
	return rt.client
}

// stopFlushTimeout bounds how long a graceful stop waits for the logs to
// take what the spool owes them.
const stopFlushTimeout = 5 * time.Second

// stop stops the client, then the embedded log (which publishes a
// checkpoint over what it sequenced). With the spool, the client first
// delivers what the spool holds (at most stopFlushTimeout: the leaves of
// the last signatures would otherwise wait for the next start); what a
// log did not take by then stays in the spool, and the warning says how
// much. With the outbox, undelivered rows stay there for any replica.
func (rt *tlogRuntime) stop() {
	if rt == nil {
		return
	}
	if rt.spool != nil && rt.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), stopFlushTimeout)
		if err := rt.client.Flush(ctx); err != nil {
			b, _, _ := rt.client.Backlog()
			owed := map[string]int64{}
			for u, s := range b {
				owed[u] = s.Rows
			}
			rt.log.Warn("transparency log: stopping with leaves the logs have not taken; the next start delivers them (keysvc tlog drain too, for a log other than the embedded one)",
				"waited", stopFlushTimeout.String(), "owed", owed)
		}
		cancel()
	}
	if rt.cancel != nil {
		rt.cancel()
		<-rt.done
	}
	if rt.spool != nil {
		if err := rt.spool.Close(); err != nil {
			rt.log.Error("transparency log spool close", "err", err)
		}
	}
	if rt.op != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		rt.opServer.Shutdown(ctx) //nolint:errcheck // closing anyway
		if err := rt.op.Close(ctx); err != nil {
			rt.log.Error("embedded transparency log shutdown", "err", err)
		}
		rt.opBackend.Close()
	}
}

// embeddedLog is the in-process log as the client sees it: submissions go
// through the operator's Go API (tlog.Operator.Add: no HTTP, no JSON, no
// promise to verify), reads (proof, archive) through its own listener,
// which verifiers use too.
type embeddedLog struct {
	*tlogclient.HTTPLog
	op *tlog.Operator
}

// AddBatch implements tlogclient.Log with Operator.AddUnsigned, which
// returns once every entry is sequenced and integrated. The promise is
// the operator's unsigned echo (Promise.JWS is empty: nothing crossed a
// boundary), checked for every entry, in order, with the hash and the
// artifact type submitted (ErrBadPromise otherwise; a
// *tlogclient.TypeConflictError for hashes the log holds under another
// type).
func (l embeddedLog) AddBatch(ctx context.Context, entries []tlogclient.Entry) (*tlogclient.Promise, error) {
	subs := make([]tlogfmt.Submission, len(entries))
	for i, e := range entries {
		subs[i] = tlogfmt.Submission{ArtifactType: e.ArtifactType, ArtifactHash: tlogclient.FormatHash(e.ArtifactHash)}
	}
	sep, err := l.op.AddUnsigned(ctx, subs)
	if err != nil {
		return nil, err
	}
	if len(sep.Entries) != len(entries) {
		return nil, fmt.Errorf("%w: %d entries promised for %d submitted", tlogclient.ErrBadPromise, len(sep.Entries), len(entries))
	}
	p := &tlogclient.Promise{KID: l.op.Key().KID, LogID: sep.LogID, Timestamp: sep.Timestamp,
		MMD: time.Duration(sep.MMDSeconds) * time.Second, Entries: make([]tlogclient.PromisedEntry, len(entries))}
	var loggedAt string // the entries of one promise share logged_at: parsed once
	var at time.Time
	var conflicts []tlogclient.TypeConflict
	for i, e := range sep.Entries {
		if e.ArtifactHash != subs[i].ArtifactHash {
			return nil, fmt.Errorf("%w: entry %d is not the one submitted", tlogclient.ErrBadPromise, i)
		}
		// The log keeps one entry per hash: a hash it already holds under
		// another artifact type is echoed with that type, and that leaf
		// does not log this artifact. Reported as the HTTP client reports
		// it (tlogclient.HTTPLog): a TypeConflictError, with which the
		// client leaves that entry out for this log and delivers the rest.
		if e.ArtifactType != subs[i].ArtifactType {
			conflicts = append(conflicts, tlogclient.TypeConflict{Index: i, Entry: entries[i], LoggedType: e.ArtifactType})
			continue
		}
		idx := int64(-1)
		if e.LeafIndex != nil {
			idx = int64(*e.LeafIndex)
		}
		if i == 0 || e.LoggedAt != loggedAt {
			if at, err = tlogfmt.ParseInstant(e.LoggedAt); err != nil {
				return nil, fmt.Errorf("%w: entry %d: logged_at: %v", tlogclient.ErrBadPromise, i, err)
			}
			loggedAt = e.LoggedAt
		}
		p.Entries[i] = tlogclient.PromisedEntry{Entry: entries[i], LoggedAt: at, LeafIndex: idx}
	}
	if conflicts != nil {
		return nil, &tlogclient.TypeConflictError{Conflicts: conflicts}
	}
	return p, nil
}

// plainHTTPRemote returns the log URLs of urls reached with no
// protection on the path: plain http:// to a host that is not loopback.
// Without --tlog-log-keys a node trusts such a log on its own word (its
// Signed Entry Promises are checked against the jwks.json the same URL
// serves); with them, its unsigned "not found" answers still decide
// what key-history anchoring takes as absent. Over https the log is as
// trustworthy as its TLS certificate, and on loopback there is no path
// to sit on.
func plainHTTPRemote(urls []string) []string {
	var out []string
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err == nil && u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
			out = append(out, raw)
		}
	}
	return out
}

// asLogs is hls as the Log interface tlogclient and anchor take.
func asLogs(hls []*tlogclient.HTTPLog) []tlogclient.Log {
	logs := make([]tlogclient.Log, len(hls))
	for i, l := range hls {
		logs[i] = l
	}
	return logs
}

// httpLogs makes the client's view of each log URL: Signed Entry Promises
// checked against the keys of logKeysFile (a JWK Set; default each log's
// own jwks.json), submit tokens from tokenFile (--tlog-token-file).
func httpLogs(urls []string, logKeysFile, tokenFile string) ([]*tlogclient.HTTPLog, *verifier.JWKS, error) {
	var opts []tlogclient.HTTPLogOption
	var keys *verifier.JWKS
	if logKeysFile != "" {
		b, err := os.ReadFile(logKeysFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--tlog-log-keys: %w", err)
		}
		if keys, err = parseLogKeys(b); err != nil {
			return nil, nil, fmt.Errorf("--tlog-log-keys %s: %w", logKeysFile, err)
		}
		opts = append(opts, tlogclient.WithLogKeys(keys))
	}
	tokens, err := readTlogTokens(tokenFile)
	if err != nil {
		return nil, nil, err
	}
	var out []*tlogclient.HTTPLog
	for _, u := range urls {
		o := opts
		if tok := tokens.forURL(u); tok != "" {
			o = append(append([]tlogclient.HTTPLogOption(nil), opts...), tlogclient.WithSubmitToken(tok))
		}
		l, err := tlogclient.NewHTTPLog(u, o...)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, l)
	}
	return out, keys, nil
}

// parseLogKeys parses a --tlog-log-keys file, a JWK Set (RFC 7517 §5) of
// the logs' public keys. It refuses a set with no key the verifier can
// use (a pin that nothing could match would fail every check with a
// misleading "no matching key") and any key with private material ("d",
// RFC 8037 §2): a pin is public, and a log's signing key has no business
// in a node's configuration.
func parseLogKeys(b []byte) (*verifier.JWKS, error) {
	keys, err := verifier.ParseJWKS(b)
	if err != nil {
		return nil, err
	}
	// A key with "d" is skipped by the verifier (ErrPrivateKeyMaterial);
	// here it refuses the whole set, whatever else the set holds.
	for _, e := range keys.Skipped {
		var ke *verifier.KeyError
		if errors.As(e, &ke) && errors.Is(e, verifier.ErrPrivateKeyMaterial) {
			return nil, fmt.Errorf("key %d holds private key material (\"d\"): give the logs' public keys only", ke.Index)
		}
	}
	if len(keys.Keys) == 0 {
		if len(keys.Skipped) == 0 {
			return nil, errors.New("no usable key (the set is empty)")
		}
		return nil, fmt.Errorf("no usable key (%d in the set: %w)", len(keys.Skipped), errors.Join(keys.Skipped...))
	}
	return keys, nil
}

// warnLeftSpool warns when a replica on the outbox has a spool that still
// owes leaves (it ran with --tlog-durability spool before): the outbox
// mode does not read it; `keysvc tlog drain` delivers what it owes remote
// logs, also while serve runs. What it owes the embedded log (at
// embeddedURL, "" when none) only a spool-mode run of serve delivers: the
// embedded log takes no submissions from another process.
func warnLeftSpool(log *slog.Logger, dir string, logs []tlogclient.Log, embeddedURL string) {
	if _, err := os.Stat(dir); err != nil {
		return
	}
	sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: dir, Logger: log})
	if err != nil {
		log.Warn("transparency log: a spool from an earlier run is here and could not be checked", "spool", dir, "err", err)
		return
	}
	defer sp.Close()
	c, err := tlogclient.New(tlogclient.Config{Spool: sp, Logs: logs, Logger: log})
	if err != nil {
		return
	}
	b, _, _ := c.Backlog()
	if e, ok := b[embeddedURL]; ok && embeddedURL != "" {
		delete(b, embeddedURL)
		log.Warn("transparency log: the spool of an earlier run (--tlog-durability spool) still owes the embedded log leaves, and the outbox mode does not read it: start serve once with --tlog-durability spool to deliver them (`keysvc tlog drain` cannot reach the embedded log)",
			"spool", dir, "leaves", e.Rows)
	}
	if len(b) > 0 {
		log.Warn("transparency log: the spool of an earlier run (--tlog-durability spool) still owes leaves, and the outbox mode does not read it: run `keysvc tlog drain --spool DIR --tlog-url …`",
			"spool", dir, "backlog", fmt.Sprint(b))
	}
}

// spoolDirName is the spool's directory under --data-dir.
const spoolDirName = "tlog-spool"

// tlogTokens are the submit tokens of --tlog-token-file.
type tlogTokens struct {
	all   string
	byURL map[string]string
}

func (t tlogTokens) forURL(u string) string {
	if tok, ok := t.byURL[u]; ok {
		return tok
	}
	return t.all
}

// readTlogTokens reads --tlog-token-file: lines "TOKEN" (for every log) or
// "URL TOKEN"; blank lines and # comments are skipped. The file must not be
// readable by others (like the KEK file).
func readTlogTokens(path string) (tlogTokens, error) {
	t := tlogTokens{byURL: map[string]string{}}
	if path == "" {
		return t, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return t, fmt.Errorf("--tlog-token-file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return t, fmt.Errorf("--tlog-token-file %s: mode %v, want 0600 or stricter", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return t, fmt.Errorf("--tlog-token-file: %w", err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch len(f) {
		case 1:
			t.all = f[0]
		case 2:
			u, err := tlogclient.NormalizeURL(f[0])
			if err != nil {
				return t, fmt.Errorf("--tlog-token-file %s line %d: %w", path, i+1, err)
			}
			t.byURL[u] = f[1]
		default:
			return t, fmt.Errorf("--tlog-token-file %s line %d: want TOKEN or URL TOKEN", path, i+1)
		}
	}
	return t, nil
}
