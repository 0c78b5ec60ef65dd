// Package tlog is keysvc's transparency-log operator: a VRP Transparency
// Log v0.1 log (leaf, STH, SEP, endpoints, STH archive) on the Tessera
// engine (github.com/transparency-dev/tessera, POSIX driver), which also
// publishes the same tree as a C2SP tlog-checkpoint and tlog-tiles, and
// asks C2SP tlog-witness witnesses to cosign each checkpoint. Design and
// wire contract: docs/adr/0012-transparency-log.md; formats:
// package tlog/tlogfmt.
//
// An Operator runs in process (keysvc tlog serve, serve --dev, tests):
//
//	op, err := tlog.New(ctx, tlog.Config{Dir: dir, Origin: "log.example.test/vrp", Signer: logKey})
//	defer op.Close(ctx)
//	http.ListenAndServe(addr, op.Handler())  // or httptest.NewServer(op.Handler())
//	sep, err := op.Add(ctx, []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: "sha256:…"}})
//
// Merkle hashing and proofs come from Tessera and
// github.com/transparency-dev/merkle; checkpoints from
// golang.org/x/mod/sumdb/note.
package tlog

import (
	"bytes"
	"context"
	"crypto"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	f_log "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/tessera"
	"github.com/transparency-dev/tessera/client"
	"github.com/transparency-dev/tessera/storage/posix"
	"golang.org/x/mod/sumdb/note"

	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

// Defaults of Config.
const (
	DefaultBatchMaxSize       = 4096
	DefaultBatchMaxAge        = 50 * time.Millisecond
	DefaultCheckpointInterval = time.Second
	DefaultMaxOutstanding     = 1 << 17
	DefaultMMD                = time.Minute
	DefaultWitnessTimeout     = 5 * time.Second
)

// Witness is a C2SP tlog-witness witness the log asks to cosign each
// checkpoint.
type Witness struct {
	// VKey is the witness's signed-note verifier key
	// ("<name>+<hash>+<base64 key>"; cosignature/v1, C2SP tlog-cosignature).
	VKey string
	// URL is the witness's base URL; the log POSTs to URL + "/add-checkpoint".
	URL string
}

// Config configures an Operator.
type Config struct {
	// Dir is the operator's data directory: Tessera's POSIX log in
	// Dir/log (the C2SP tiles and checkpoint, served as static files),
	// the STH archive in Dir/state.db (SQLite) and the artifact-hash
	// index, derived from the log, in Dir/index (Pebble, ADR 0035).
	// Created if missing.
	Dir string
	// Origin is the log_id and the checkpoint origin line, e.g.
	// "log.example.test/vrp".
	Origin string
	// Signer holds the log's Ed25519 key (software, PKCS#11 or KMS); it
	// must never be a signing key of a node.
	Signer crypto.Signer
	// Witnesses are asked to cosign every checkpoint; WitnessesRequired of
	// them (default: all) must cosign before the checkpoint is published
	// (unless WitnessFailOpen).
	Witnesses         []Witness
	WitnessesRequired int
	// WitnessPolicy, instead of Witnesses, is a witness policy in the
	// Sigsum policy format with cosignature/v1 verifier keys (as
	// tessera.NewWitnessGroupFromPolicy reads it).
	WitnessPolicy []byte
	// WitnessTimeout bounds one round of cosigning (default 5 s).
	WitnessTimeout time.Duration
	// WitnessFailOpen publishes a checkpoint without the required
	// cosignatures when witnesses do not answer in time (Tessera's
	// FailOpen). Proofs still only use trees whose checkpoint satisfied the
	// policy.
	WitnessFailOpen bool
	// BatchMaxSize and BatchMaxAge bound Tessera's sequencing batches
	// (defaults 4096 entries, 50 ms).
	BatchMaxSize uint
	BatchMaxAge  time.Duration
	// CheckpointInterval is how often a grown tree gets a new checkpoint
	// and STH (default 1 s; Tessera's POSIX minimum is 100 ms).
	CheckpointInterval time.Duration
	// CheckpointRepublishInterval is how often the checkpoint of a tree
	// that has not grown is signed and, with witnesses, cosigned again
	// (default Tessera's, 10 min; at least CheckpointInterval). The
	// witnesses' fresh cosignatures are what show a scanner or monitor
	// that an idle log's tree is still its newest (tlogaudit MaxAge); the
	// STH of the size keeps its first time.
	CheckpointRepublishInterval time.Duration
	// MaxOutstanding is Tessera's pushback bound: entries sequenced but not
	// yet integrated (default 131072).
	MaxOutstanding uint
	// MMD is the maximum merge delay the log promises in every SEP
	// (default 1 min).
	MMD time.Duration
	// Logger receives operational messages (default slog.Default()).
	Logger *slog.Logger
	// Now is the log's clock (default time.Now); tests set it.
	Now func() time.Time
	// SubmitTokenHashes, when not empty, restricts POST add and add-batch
	// to requests with "Authorization: Bearer <token>" whose SHA-256 is one
	// of these (compared in constant time); reads stay public. Empty: anyone
	// may submit (a public log).
	SubmitTokenHashes [][32]byte
	// SubmitInProcessOnly closes POST add and add-batch (HTTP 403,
	// tlogfmt.CodeForbidden): entries come only through Add, AddUnsigned
	// and AddDigest in this process (keysvc serve's embedded log), and the
	// listener serves reads. Without it anyone who reaches the listener
	// could log a hash before the node does, under another artifact type.
	SubmitInProcessOnly bool
	// Registerer, when set, receives the operator's Prometheus metrics
	// (keysvc_tlog_operator_*).
	Registerer prometheus.Registerer
}

// Operator is a running log. It is safe for concurrent use.
type Operator struct {
	cfg      Config
	key      tlogfmt.LogKey
	jws      *signer.JWSSigner
	noteV    note.Verifier
	policy   *tessera.WitnessGroup
	st       *state     // STH archive
	idx      *hashIndex // artifact-hash index
	appender *tessera.Appender
	reader   tessera.LogReader
	shutdown func(context.Context) error
	logDir   string
	log      *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending map[[32]byte]*pendingEntry
	// seen holds every artifact hash in the index (and a few more); nil
	// until loadFilter is done, when every look-up reads the index.
	// loading: hashes the follower indexed while loadFilter scans.
	// Both under mu.
	seen    *hashFilter
	loading [][]byte

	followKick chan struct{}
	followMu   sync.Mutex // one followOnce at a time
	followed   uint64     // entries [0, followed) are in the index; under mu

	watchMu   sync.Mutex // one watchOnce at a time
	pubMu     sync.RWMutex
	published archived // the newest published checkpoint and its STH

	metrics *metrics // nil without Config.Registerer
	lock    *os.File // holds the flock on <Dir>/operator.lock

	closeOnce sync.Once
	closeErr  error
}

// pendingEntry is an entry submitted but not yet in the index.
type pendingEntry struct {
	done     chan struct{}
	index    uint64
	loggedAt string
	typ      string
	err      error
}

// New opens (or creates) the log in cfg.Dir and starts it: Tessera's
// sequencer, checkpoint publisher and witness rounds, the index follower
// and the checkpoint watcher. Before it returns, the index has caught up
// with every entry already in the log, so deduplication holds across
// restarts. ctx bounds only the start; background work runs until Close.
// One operator at a time may use a data directory: New takes an exclusive
// lock on <Dir>/operator.lock (flock; released by Close or the process's
// death) and fails if another process holds it.
func New(ctx context.Context, cfg Config) (*Operator, error) {
	if cfg.Dir == "" || cfg.Signer == nil {
		return nil, errors.New("tlog: Config.Dir and Config.Signer are required")
	}
	if cfg.BatchMaxSize == 0 {
		cfg.BatchMaxSize = DefaultBatchMaxSize
	}
	if cfg.BatchMaxAge == 0 {
		cfg.BatchMaxAge = DefaultBatchMaxAge
	}
	if cfg.CheckpointInterval == 0 {
		cfg.CheckpointInterval = DefaultCheckpointInterval
	}
	if cfg.MaxOutstanding == 0 {
		cfg.MaxOutstanding = DefaultMaxOutstanding
	}
	if cfg.MMD == 0 {
		cfg.MMD = DefaultMMD
	}
	if cfg.WitnessTimeout == 0 {
		cfg.WitnessTimeout = DefaultWitnessTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	key, err := tlogfmt.NewLogKey(cfg.Origin, cfg.Signer.Public())
	if err != nil {
		return nil, err
	}
	jws, err := signer.NewJWSSigner(key.KID, signer.AlgEdDSA, cfg.Signer)
	if err != nil {
		return nil, err
	}
	ns, err := tlogfmt.NewNoteSigner(key, cfg.Signer)
	if err != nil {
		return nil, err
	}
	noteV, err := key.NoteVerifier()
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(cfg.Dir, "log")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, fmt.Errorf("tlog: %w", err)
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	st, err := openState(cfg.Dir)
	if err != nil {
		lock.Close()
		return nil, err
	}
	idx, err := openIndex(cfg.Dir, cfg.Logger)
	if err != nil {
		st.close()
		lock.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o := &Operator{
		cfg: cfg, key: key, jws: jws, noteV: noteV, st: st, idx: idx, logDir: logDir, log: cfg.Logger,
		cancel: cancel, pending: map[[32]byte]*pendingEntry{}, followKick: make(chan struct{}, 1), lock: lock,
	}
	fail := func(err error) (*Operator, error) {
		cancel()
		idx.close()
		st.close()
		lock.Close()
		return nil, err
	}

	opts := tessera.NewAppendOptions().
		WithCheckpointSigner(&archivingSigner{NoteSigner: ns, o: o}).
		WithBatching(cfg.BatchMaxSize, cfg.BatchMaxAge).
		WithCheckpointInterval(cfg.CheckpointInterval).
		WithPushback(cfg.MaxOutstanding)
	if cfg.CheckpointRepublishInterval > 0 {
		opts = opts.WithCheckpointRepublishInterval(cfg.CheckpointRepublishInterval)
	}
	if len(cfg.Witnesses) > 0 || len(cfg.WitnessPolicy) > 0 {
		var group tessera.WitnessGroup
		if len(cfg.WitnessPolicy) > 0 {
			if len(cfg.Witnesses) > 0 {
				return fail(errors.New("tlog: Config.Witnesses and Config.WitnessPolicy are exclusive"))
			}
			group, err = tessera.NewWitnessGroupFromPolicy(cfg.WitnessPolicy)
		} else {
			group, err = witnessGroup(cfg.Witnesses, cfg.WitnessesRequired)
		}
		if err != nil {
			return fail(fmt.Errorf("tlog: witness policy: %w", err))
		}
		o.policy = &group
		opts = opts.WithWitnesses(group, &tessera.WitnessOptions{Timeout: cfg.WitnessTimeout, FailOpen: cfg.WitnessFailOpen})
	}
	driver, err := posix.New(runCtx, posix.Config{Path: logDir})
	if err != nil {
		return fail(fmt.Errorf("tlog: POSIX driver: %w", err))
	}
	o.appender, o.shutdown, o.reader, err = tessera.NewAppender(runCtx, driver, opts)
	if err != nil {
		return fail(fmt.Errorf("tlog: Tessera appender: %w", err))
	}
	catchUp := time.Now()
	from, err := idx.nextIndex()
	if err != nil {
		return fail(err)
	}
	if err := o.followOnce(runCtx); err != nil {
		return fail(fmt.Errorf("tlog: index catch-up: %w", err))
	}
	if to := o.followed; to > from {
		o.log.Info("tlog: artifact-hash index caught up with the log", "from", from, "to", to, "elapsed", time.Since(catchUp).Round(time.Millisecond))
	}
	if cfg.Registerer != nil {
		if err := o.initMetrics(cfg.Registerer); err != nil {
			return fail(fmt.Errorf("tlog: metrics: %w", err))
		}
	}
	if err := o.watchOnce(runCtx); err != nil {
		o.log.Warn("tlog: no published checkpoint yet", "err", err)
	}
	o.loading = [][]byte{}
	o.wg.Add(3)
	go o.followLoop(runCtx)
	go o.watchLoop(runCtx)
	go func() {
		defer o.wg.Done()
		if err := o.loadFilter(runCtx); err != nil && runCtx.Err() == nil {
			o.log.Error("tlog: artifact-hash filter not loaded: every submission reads the index", "err", err)
		}
	}()
	return o, nil
}

// lockDir takes the data directory's exclusive lock (flock(2), LOCK_NB).
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "operator.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tlog: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("tlog: another operator holds %s (%v): one operator per data directory", dir, err)
	}
	return f, nil
}

func witnessGroup(ws []Witness, required int) (tessera.WitnessGroup, error) {
	if required <= 0 {
		required = len(ws)
	}
	if required > len(ws) {
		return tessera.WitnessGroup{}, fmt.Errorf("tlog: %d witnesses required, %d configured", required, len(ws))
	}
	var policy bytes.Buffer
	var names []string
	for i, w := range ws {
		u, err := url.Parse(w.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return tessera.WitnessGroup{}, fmt.Errorf("tlog: witness %d: URL %q is not http(s)", i, w.URL)
		}
		tw, err := tessera.NewWitness(w.VKey, u)
		if err != nil {
			return tessera.WitnessGroup{}, fmt.Errorf("tlog: witness %d: %w", i, err)
		}
		_ = tw // validated here for a clear error; the policy below builds it again
		fmt.Fprintf(&policy, "witness w%d %s %s\n", i, w.VKey, u)
		names = append(names, fmt.Sprintf("w%d", i))
	}
	fmt.Fprintf(&policy, "group g %d %s\nquorum g\n", required, strings.Join(names, " "))
	// Sigsum policy format, as Tessera reads it (tessera.NewWitnessGroupFromPolicy).
	return tessera.NewWitnessGroupFromPolicy(policy.Bytes())
}

// Key returns the log key's names: kid, public key and origin.
func (o *Operator) Key() tlogfmt.LogKey { return o.key }

// VKey returns the log's C2SP signed-note verifier key.
func (o *Operator) VKey() string {
	vk, _ := o.key.VKey() // validated in New
	return vk
}

// Close stops accepting entries, waits (up to ctx) until every sequenced
// entry is committed to by a published checkpoint, then stops the
// background work and closes the state. Safe to call more than once.
func (o *Operator) Close(ctx context.Context) error {
	o.closeOnce.Do(func() {
		err := o.shutdown(ctx)
		o.cancel()
		o.wg.Wait()
		if err == nil {
			err = o.followOnce(ctx)
		}
		if cerr := o.idx.close(); err == nil {
			err = cerr
		}
		if cerr := o.st.close(); err == nil {
			err = cerr
		}
		o.lock.Close()
		o.closeErr = err
	})
	return o.closeErr
}

// Add logs subs (1..tlogfmt.MaxBatchEntries artifacts) and returns the
// Signed Entry Promise over all of them, in order, as a compact JWS with
// its payload. It returns only after every entry is sequenced and
// integrated by Tessera (POSIX: entry bundle and tiles written, tree state
// renamed into place), so the SEP carries leaf_index and the log owns the
// entry from then on. An artifact hash already in the log (or in flight)
// is not added again: its entry carries the first submission's logged_at
// and leaf_index. Errors: ErrInvalid (a malformed submission; nothing is
// added), ErrUnavailable (Tessera pushed back or failed: retry; entries
// that did get sequenced are deduplicated on retry).
func (o *Operator) Add(ctx context.Context, subs []tlogfmt.Submission) (string, tlogfmt.SEP, error) {
	start := time.Now()
	done, added, err := o.sequence(ctx, subs)
	var jws string
	var sep tlogfmt.SEP
	if err == nil {
		sep = o.echo(subs, done)
		if jws, err = tlogfmt.SignSEP(o.jws, sep); err != nil {
			err = fmt.Errorf("tlog: SEP: %w", err)
		}
	}
	o.observeResult(start, added, err)
	if err != nil {
		return "", tlogfmt.SEP{}, err
	}
	return jws, sep, nil
}

// AddUnsigned is Add for a caller in this process (serve's embedded log):
// the same sequencing, deduplication, waiting and errors, and the same
// echoing SEP, returned unsigned. A promise is signed so that it can
// cross a network and be checked by a submitter that does not trust the
// path; in process, Add's return is the promise, and signing it cost
// ~1.2 µs per entry (two SHA-512 passes over every entry's line, and the
// payload built for them) that no one read (docs/performance.md, session 36).
func (o *Operator) AddUnsigned(ctx context.Context, subs []tlogfmt.Submission) (tlogfmt.SEP, error) {
	start := time.Now()
	done, added, err := o.sequence(ctx, subs)
	o.observeResult(start, added, err)
	if err != nil {
		return tlogfmt.SEP{}, err
	}
	return o.echo(subs, done), nil
}

// echo is the echoing SEP of sequenced entries: each with the type, leaf
// index and logged_at the log holds for its hash.
func (o *Operator) echo(subs []tlogfmt.Submission, done []*pendingEntry) tlogfmt.SEP {
	sep := tlogfmt.SEP{LogID: o.key.Origin, MMDSeconds: uint64(o.cfg.MMD / time.Second), Entries: make([]tlogfmt.SEPEntry, len(subs)), Timestamp: o.cfg.Now()}
	for i, p := range done {
		idx := p.index
		sep.Entries[i] = tlogfmt.SEPEntry{ArtifactHash: subs[i].ArtifactHash, ArtifactType: p.typ, LeafIndex: &idx, LoggedAt: p.loggedAt}
	}
	return sep
}

// echoSEP signs echo(subs, done).
func (o *Operator) echoSEP(subs []tlogfmt.Submission, done []*pendingEntry) (string, error) {
	jws, err := tlogfmt.SignSEP(o.jws, o.echo(subs, done))
	if err != nil {
		return "", fmt.Errorf("tlog: SEP: %w", err)
	}
	return jws, nil
}

// AddDigest is Add answered with a digest Signed Entry Promise (ADR 0038,
// POST add-batch?promise=digest): one promise of constant size for every
// entry of the request body whose SHA-256 is bodySHA256, instead of one
// echoed entry per submission. Same sequencing, deduplication and errors
// as Add; the caller hashes the body it decoded subs from.
//
// The digest promises each submission as submitted, so it is given only
// when every entry in the log has the type submitted: a hash already in
// the log (or earlier in the body) under another artifact type is one
// entry of that other type, and the answer is then the echoing SEP (ok
// false), whose entries show the type the log holds — which the submitter
// checks and refuses, as it would without ADR 0038.
func (o *Operator) AddDigest(ctx context.Context, subs []tlogfmt.Submission, bodySHA256 [32]byte) (jws string, d tlogfmt.SEPDigest, ok bool, err error) {
	start := time.Now()
	done, added, err := o.sequence(ctx, subs)
	if err == nil {
		for i, p := range done {
			if p.typ != subs[i].ArtifactType {
				jws, err = o.echoSEP(subs, done)
				o.observeResult(start, added, err)
				return jws, tlogfmt.SEPDigest{}, false, err
			}
		}
	}
	if err == nil {
		d = tlogfmt.SEPDigest{LogID: o.key.Origin, MMDSeconds: uint64(o.cfg.MMD / time.Second), Count: uint64(len(subs)), BodySHA256: bodySHA256, Timestamp: o.cfg.Now()}
		if jws, err = tlogfmt.SignSEPDigest(o.jws, d); err != nil {
			err = fmt.Errorf("tlog: SEP: %w", err)
		}
	}
	o.observeResult(start, added, err)
	if err != nil {
		return "", tlogfmt.SEPDigest{}, false, err
	}
	return jws, d, true, nil
}

func (o *Operator) observeResult(start time.Time, added int, err error) {
	switch {
	case err == nil:
		o.observeAdd(start, "ok", added)
	case errors.Is(err, ErrInvalid):
		o.observeAdd(start, "invalid", 0)
	default:
		o.observeAdd(start, "unavailable", 0)
	}
}

// sequence validates subs, hands the new ones to Tessera and waits until
// every entry (new, in flight from another request, or already indexed)
// is sequenced and integrated. It returns each submission's entry, in
// order, and how many were new.
func (o *Operator) sequence(ctx context.Context, subs []tlogfmt.Submission) ([]*pendingEntry, int, error) {
	if len(subs) == 0 || len(subs) > tlogfmt.MaxBatchEntries {
		return nil, 0, fmt.Errorf("%w: 1 to %d entries", ErrInvalid, tlogfmt.MaxBatchEntries)
	}
	hashes := make([][32]byte, len(subs))
	for i, s := range subs {
		if !tlogfmt.ValidArtifactType(s.ArtifactType) {
			return nil, 0, fmt.Errorf("%w: entry %d: artifact_type is not a v0.1 artifact type", ErrInvalid, i)
		}
		if !tlogfmt.ValidArtifactHash(s.ArtifactHash) {
			return nil, 0, fmt.Errorf("%w: entry %d: artifact_hash is not sha256:<64 lower-case hex>", ErrInvalid, i)
		}
		hex.Decode(hashes[i][:], []byte(s.ArtifactHash[len("sha256:"):])) //nolint:errcheck // validated above
	}
	addCtx := context.WithoutCancel(ctx)
	now := o.cfg.Now()
	loggedAt := tlogfmt.FormatInstant(now)

	type slot struct {
		p      *pendingEntry
		mine   bool
		future tessera.IndexFuture
	}
	slots := make([]slot, len(subs))
	o.mu.Lock()
	// Phase 1: resolve every hash against the in-flight set, this request
	// and the index; nothing is registered until all look-ups succeeded.
	local := make(map[[32]byte]int, len(subs))
	var ask [][]byte
	for i := range subs {
		if p, ok := o.pending[hashes[i]]; ok {
			slots[i] = slot{p: p}
			continue
		}
		if j, ok := local[hashes[i]]; ok {
			slots[i] = slot{p: slots[j].p}
			continue
		}
		local[hashes[i]] = i
		if o.seen == nil || o.seen.mayHold(hashes[i][:]) { // else certainly not in the index
			ask = append(ask, hashes[i][:])
		}
		slots[i] = slot{mine: true}
	}
	found, err := o.idx.lookupMany(ask)
	if err != nil {
		o.mu.Unlock()
		return nil, 0, fmt.Errorf("%w: index: %v", ErrUnavailable, err)
	}
	for i := range slots {
		sl := &slots[i]
		if !sl.mine {
			if sl.p == nil { // a repeat within this request of a new hash
				sl.p = slots[local[hashes[i]]].p
			}
			continue
		}
		if r, ok := found[string(hashes[i][:])]; ok {
			*sl = slot{p: &pendingEntry{done: closedChan, index: r.leafIndex, loggedAt: r.loggedAt, typ: r.artifactType}}
			continue
		}
		sl.p = &pendingEntry{done: make(chan struct{}), loggedAt: loggedAt, typ: subs[i].ArtifactType}
	}
	// Phase 2: register the new entries and hand them to Tessera.
	leafBuf := make([]byte, 0, len(local)*160)
	for i := range slots {
		sl := &slots[i]
		if !sl.mine {
			continue
		}
		o.pending[hashes[i]] = sl.p
		leaf := tlogfmt.Leaf{ArtifactHash: subs[i].ArtifactHash, ArtifactType: subs[i].ArtifactType, LeafVersion: tlogfmt.LeafVersion, LoggedAt: loggedAt}
		start := len(leafBuf)
		leafBuf = leaf.AppendBytes(leafBuf)
		sl.future = o.appender.Add(addCtx, tessera.NewEntry(leafBuf[start:len(leafBuf):len(leafBuf)]))
	}
	o.mu.Unlock()

	var firstErr error
	for i := range slots {
		sl := &slots[i]
		if !sl.mine {
			continue
		}
		idx, err := sl.future()
		if err != nil {
			sl.p.err = err
			if firstErr == nil {
				firstErr = err
			}
			o.mu.Lock()
			delete(o.pending, hashes[i])
			o.mu.Unlock()
			close(sl.p.done)
			continue
		}
		sl.p.index = idx.Index
		close(sl.p.done)
		// The follower may have indexed the entry before its future
		// resolved; then it left the entry here and it is ours to drop.
		o.mu.Lock()
		if o.followed > idx.Index {
			delete(o.pending, hashes[i])
		}
		o.mu.Unlock()
	}
	o.kickFollower()
	if firstErr != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrUnavailable, firstErr)
	}
	done := make([]*pendingEntry, len(slots))
	added := 0
	for i, sl := range slots {
		select {
		case <-sl.p.done:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		if sl.p.err != nil {
			return nil, 0, fmt.Errorf("%w: %v", ErrUnavailable, sl.p.err)
		}
		done[i] = sl.p
		if sl.mine {
			added++
		}
	}
	return done, added, nil
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Errors of Add; test with errors.Is.
var (
	// ErrInvalid: a submission is malformed (HTTP 400).
	ErrInvalid = errors.New("tlog: invalid submission")
	// ErrUnavailable: the engine pushed back or failed (HTTP 503).
	ErrUnavailable = errors.New("tlog: log unavailable")
)

// lookup finds an artifact hash in the log: its leaf and index, or false
// when the log has no such entry (yet).
func (o *Operator) lookup(ctx context.Context, h [32]byte) (tlogfmt.Leaf, uint64, bool, error) {
	ah := "sha256:" + hex.EncodeToString(h[:])
	o.mu.Lock()
	p, ok := o.pending[h]
	maybe := ok || o.seen == nil || o.seen.mayHold(h[:])
	o.mu.Unlock()
	if !maybe { // neither in flight nor (by the filter) in the index
		return tlogfmt.Leaf{}, 0, false, nil
	}
	if ok {
		select {
		case <-p.done:
			if p.err == nil {
				return tlogfmt.Leaf{ArtifactHash: ah, ArtifactType: p.typ, LeafVersion: tlogfmt.LeafVersion, LoggedAt: p.loggedAt}, p.index, true, nil
			}
		default:
		}
		return tlogfmt.Leaf{}, 0, false, nil
	}
	r, found, err := o.idx.lookup(h[:])
	if err != nil || !found {
		return tlogfmt.Leaf{}, 0, false, err
	}
	return tlogfmt.Leaf{ArtifactHash: ah, ArtifactType: r.artifactType, LeafVersion: tlogfmt.LeafVersion, LoggedAt: r.loggedAt}, r.leafIndex, true, nil
}

func (o *Operator) kickFollower() {
	select {
	case o.followKick <- struct{}{}:
	default:
	}
}

// loadFilter fills the artifact-hash filter from the index, in the
// background (~0.3 µs per indexed hash here: 0.44 s for 1.59 M). Until it
// is done every look-up reads the index. The scan is one iterator, so one
// snapshot of the index (Pebble): rows committed after New set
// o.loading are in the scan or, from the follower, in o.loading, or both;
// rows committed before are in the scan. So the filter it installs holds
// every hash the index holds.
func (o *Operator) loadFilter(ctx context.Context) error {
	start := time.Now()
	next, err := o.idx.nextIndex()
	if err != nil {
		return err
	}
	f := newHashFilter(uint(next), filterMinCapacity)
	n := 0
	if err := o.idx.eachHash(func(h []byte) { f.add(h); n++ }); err != nil {
		o.mu.Lock()
		o.loading = nil
		o.mu.Unlock()
		return err
	}
	o.mu.Lock()
	for _, h := range o.loading {
		f.add(h)
	}
	o.seen, o.loading = f, nil
	o.mu.Unlock()
	o.log.Info("tlog: artifact-hash filter loaded", "hashes", n, "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// followLoop keeps the artifact-hash index level with the log.
func (o *Operator) followLoop(ctx context.Context) {
	defer o.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	cp := time.NewTicker(walCheckpointEvery)
	defer cp.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.followKick:
		case <-t.C:
		case <-cp.C:
			if err := o.st.checkpoint(ctx); err != nil && ctx.Err() == nil {
				o.log.Warn("tlog: state WAL checkpoint", "err", err)
			}
			continue
		}
		if err := o.followOnce(ctx); err != nil && ctx.Err() == nil {
			o.log.Error("tlog: index follower", "err", err)
		}
	}
}

// walCheckpointEvery is how often the follower checkpoints and truncates
// the state database's WAL (state.checkpoint).
const walCheckpointEvery = 10 * time.Second

// followMaxBundles bounds the entry bundles one follower transaction reads.
const followMaxBundles = 256

// followOnce indexes every integrated entry the index has not seen, reading
// Tessera's entry bundles (C2SP tlog-tiles), then drops them from the
// in-flight set.
func (o *Operator) followOnce(ctx context.Context) error {
	o.followMu.Lock()
	defer o.followMu.Unlock()
	for {
		next, err := o.idx.nextIndex()
		if err != nil {
			return err
		}
		size, err := o.reader.IntegratedSize(ctx)
		if err != nil {
			return err
		}
		if next >= size {
			return nil
		}
		const width = 256 // C2SP tlog-tiles entry bundle width
		to := min(size, (next/width+followMaxBundles)*width)
		var rows []indexRow
		for b := next / width; b*width < to; b++ {
			bundle, err := client.GetEntryBundle(ctx, o.reader.ReadEntryBundle, b, size)
			if err != nil {
				return err
			}
			for j, data := range bundle.Entries {
				i := b*width + uint64(j)
				if i < next || i >= to {
					continue
				}
				leaf, err := tlogfmt.ParseLeaf(data)
				if err != nil {
					return fmt.Errorf("entry %d is not a v0.1 leaf: %w", i, err)
				}
				h, _ := hex.DecodeString(leaf.ArtifactHash[len("sha256:"):])
				rows = append(rows, indexRow{hash: h, indexed: indexed{leafIndex: i, artifactType: leaf.ArtifactType, loggedAt: leaf.LoggedAt}})
			}
		}
		maybe := make([]bool, len(rows))
		o.mu.Lock()
		for i, r := range rows {
			maybe[i] = o.seen == nil || o.seen.mayHold(r.hash)
		}
		o.mu.Unlock()
		if err := o.idx.follow(next, to, rows, maybe); err != nil {
			return err
		}
		o.mu.Lock()
		o.followed = to
		for _, r := range rows {
			switch {
			case o.seen != nil:
				o.seen.add(r.hash)
			case o.loading != nil: // loadFilter's scan may have begun before this commit
				o.loading = append(o.loading, r.hash)
			}
			var h [32]byte
			copy(h[:], r.hash)
			if p, ok := o.pending[h]; ok {
				select {
				case <-p.done:
					delete(o.pending, h)
				default:
				}
			}
		}
		o.mu.Unlock()
	}
}

// archivingSigner is the checkpoint signer handed to Tessera: before a
// checkpoint is signed (and so before it can be published), the STH of the
// same tree is signed and archived. A checkpoint whose STH cannot be
// archived is never signed.
type archivingSigner struct {
	*tlogfmt.NoteSigner
	o *Operator
}

func (a *archivingSigner) Sign(msg []byte) ([]byte, error) {
	var cp f_log.Checkpoint
	if _, err := cp.Unmarshal(msg); err != nil {
		return nil, fmt.Errorf("tlog: checkpoint body: %w", err)
	}
	if cp.Origin != a.Name() {
		return nil, fmt.Errorf("tlog: checkpoint origin %q, log origin %q", cp.Origin, a.Name())
	}
	sig, err := a.NoteSigner.Sign(msg)
	if err != nil {
		return nil, err
	}
	sth, err := tlogfmt.SignSTH(a.o.jws, tlogfmt.STH{LogID: cp.Origin, TreeSize: cp.Size, RootHash: cp.Hash, Timestamp: a.o.cfg.Now()})
	if err != nil {
		return nil, err
	}
	signed, err := note.Sign(&note.Note{Text: string(msg)}, fixedSigner{a.NoteSigner, sig})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.o.st.archive(ctx, archived{treeSize: cp.Size, rootHash: cp.Hash, sth: sth, checkpoint: string(signed)}); err != nil {
		a.o.log.Error("tlog: STH archive", "tree_size", cp.Size, "err", err)
		return nil, err
	}
	return sig, nil
}

// fixedSigner returns a signature already made (to format a signed note
// with note.Sign without signing twice).
type fixedSigner struct {
	*tlogfmt.NoteSigner
	sig []byte
}

func (f fixedSigner) Sign([]byte) ([]byte, error) { return f.sig, nil }

// watchLoop follows the published checkpoint file: each new checkpoint is
// recorded in the archive (with its cosignatures) once the witness policy
// is satisfied, and becomes the newest tree served by GET sth.
func (o *Operator) watchLoop(ctx context.Context) {
	defer o.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := o.watchOnce(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, os.ErrNotExist) {
			o.log.Error("tlog: checkpoint watcher", "err", err)
		}
	}
}

func (o *Operator) watchOnce(ctx context.Context) error {
	// One at a time (the watcher and proof requests that catch up): a
	// slower call must not replace a newer published tree with an older.
	o.watchMu.Lock()
	defer o.watchMu.Unlock()
	raw, err := o.reader.ReadCheckpoint(ctx)
	if err != nil {
		return err
	}
	o.pubMu.RLock()
	same := o.published.checkpoint == string(raw)
	o.pubMu.RUnlock()
	if same {
		return nil
	}
	cp, _, _, err := f_log.ParseCheckpoint(raw, o.key.Origin, o.noteV)
	if err != nil {
		return fmt.Errorf("published checkpoint does not verify: %w", err)
	}
	if o.policy == nil || o.policy.Satisfied(raw) {
		if _, err := o.st.markPublished(ctx, cp.Size, cp.Hash, string(raw)); err != nil {
			return err
		}
	}
	a, ok, err := o.st.get(ctx, cp.Size)
	if err != nil {
		return err
	}
	if !ok || !bytes.Equal(a.rootHash, cp.Hash) {
		return fmt.Errorf("published checkpoint of size %d has no archived STH", cp.Size)
	}
	a.checkpoint = string(raw)
	o.pubMu.Lock()
	o.published = a
	if o.metrics != nil {
		o.metrics.published = time.Now()
	}
	o.pubMu.Unlock()
	return nil
}

// catchUpPublished records the checkpoint Tessera wrote last now, not at
// the watcher's next tick (serveCheckpoint). With no checkpoint published
// yet it does nothing.
func (o *Operator) catchUpPublished(ctx context.Context) error {
	if err := o.watchOnce(ctx); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// latest returns the newest published checkpoint with its STH.
func (o *Operator) latest() (archived, bool) {
	o.pubMu.RLock()
	defer o.pubMu.RUnlock()
	return o.published, o.published.sth != ""
}

// proofBuilder returns a Tessera proof builder for a tree size (tiles read
// from the POSIX directory).
func (o *Operator) proofBuilder(ctx context.Context, size uint64) (*client.ProofBuilder, error) {
	return client.NewProofBuilder(ctx, size, o.reader.ReadTile)
}
