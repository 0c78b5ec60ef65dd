package tlogclient

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keysvc/keysvc/store"
)

// Config configures a Client. Zero values take the defaults named.
type Config struct {
	// Outbox is key history's outbox (store.Open's store implements it).
	// Unused (may be nil) when Spool is set.
	Outbox store.Outbox
	// Spool, when set, replaces the outbox: leaves are appended to this
	// per-replica spool file and delivered from it (ADR 0024). Outbox, if
	// also set, is only read for rows left there (by this replica before it
	// used the spool, or by a killed replica of the fleet still on the
	// outbox): expired rows are claimed (Lease, ClaimAllAtStart), moved into
	// the spool and deleted, every 5 s. Committers, MaxGroupRows,
	// MaxLinger, SweepEvery, QueueLimit and StatsEvery do not apply.
	Spool *Spool
	// Logs are the logs every leaf must reach (at least one).
	Logs   []Log
	Logger *slog.Logger
	// Committers is how many group commits may be in flight at once
	// (default 1). On SQLite keep 1: it has one writer, and a second one
	// would wait in SQLite's busy handler (millisecond sleeps). On
	// PostgreSQL 2–4 overlap one commit's WAL flush with the next.
	Committers int
	// MaxGroupRows bounds the rows of one group commit (default 5000); a
	// single request with more rows is committed alone.
	MaxGroupRows int
	// MaxLinger bounds how long a committer waits for more requests to
	// join a group it is about to commit (default 1 ms; negative: never).
	// It waits only while requests arrive concurrently (the previous group
	// had several), for at most twice the last commit's duration, and stops
	// as soon as the group has twice as many requests as the previous one:
	// a lone request is never delayed, and under concurrency fewer, larger
	// commits leave more CPU to signing (each commit costs the same whatever
	// its size; docs/performance.md).
	MaxLinger time.Duration
	// MaxBatch bounds the entries of one add-batch request (default and
	// at most MaxPromisedBatch: the Signed Entry Promise of a larger batch
	// would exceed the JWS size the client verifies).
	MaxBatch int
	// FlushDelay is how long a submitter lets entries gather before it
	// sends a batch smaller than MaxBatch (default 100 ms: the log's cost
	// per leaf falls with the batch size — about 55 µs at 100 entries, 35 µs
	// at 1,000 on this project's bench machine — and its checkpoint interval,
	// 1 s, dominates the time to inclusion anyway).
	FlushDelay time.Duration
	// InFlight bounds the add-batch requests in flight per log (default 16:
	// enough batches of MaxBatch to fill one sequencing batch of the log —
	// Tessera's 4,096 entries by default — so that it need not wait out its
	// batch age; docs/performance.md).
	InFlight int
	// Lease is how long a row belongs to the process that wrote or claimed
	// it before any replica may claim it (default 30 s): the delay before
	// rows of a killed replica are submitted by another.
	Lease time.Duration
	// SweepEvery is how often each log's sweeper claims expired rows
	// (default 2 s).
	SweepEvery time.Duration
	// ClaimAllAtStart claims every row at the first sweep whatever its
	// lease: right for a store only this process writes (SQLite), where
	// rows left by a previous, killed process need not wait out their
	// lease.
	ClaimAllAtStart bool
	// QueueLimit bounds the rows held in memory per log (default 200,000);
	// rows beyond it stay in the outbox and are claimed once their lease
	// ends.
	QueueLimit int
	// MaxBacklogRows and MaxBacklogAge are the readiness thresholds: Ready
	// fails when a log has more rows waiting (default 1,000,000) or an
	// older one (default 10 min).
	MaxBacklogRows int64
	MaxBacklogAge  time.Duration
	// StatsEvery is how often the outbox backlog is counted for metrics
	// and readiness (default 5 s).
	StatsEvery time.Duration
	Now        func() time.Time
}

func (c *Config) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Committers, 1)
	def(&c.MaxGroupRows, 5000)
	def(&c.MaxBatch, MaxPromisedBatch)
	c.MaxBatch = min(c.MaxBatch, MaxPromisedBatch)
	def(&c.InFlight, 16)
	def(&c.QueueLimit, 200_000)
	defD(&c.FlushDelay, 100*time.Millisecond)
	if c.MaxLinger == 0 {
		c.MaxLinger = time.Millisecond
	}
	defD(&c.Lease, 30*time.Second)
	defD(&c.SweepEvery, 2*time.Second)
	defD(&c.MaxBacklogAge, 10*time.Minute)
	defD(&c.StatsEvery, 5*time.Second)
	if c.MaxBacklogRows <= 0 {
		c.MaxBacklogRows = 1_000_000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Client records leaves durably and delivers them to the logs. Create it
// with New, start it with Run; Record may be called from any goroutine.
type Client struct {
	cfg   Config
	logs  []*logState
	byURL map[string]*logState

	reqs chan *recordReq
	jobs chan func(ctx context.Context)

	delMu      sync.Mutex
	delPending []pendingDelete
	lastDelete time.Time

	statsMu  sync.Mutex
	stats    map[string]store.OutboxStat
	statsErr error
	statsAt  time.Time

	spoolOnce sync.Once
	// flushing is closed by the first Flush: the spool's send loops stop
	// gathering partial batches for FlushDelay.
	flushing     chan struct{}
	flushingOnce sync.Once

	m clientMetrics
}

// recordReq is one Record call waiting for its group commit.
type recordReq struct {
	rows []store.OutboxRow
	done chan error
}

// pendingDelete is a delivered batch whose rows the writer deletes.
type pendingDelete struct {
	ls  *logState
	ids []int64
}

// New checks cfg and returns a Client; nothing runs before Run.
func New(cfg Config) (*Client, error) {
	cfg.defaults()
	if cfg.Outbox == nil && cfg.Spool == nil {
		return nil, errors.New("tlogclient: no outbox and no spool")
	}
	if len(cfg.Logs) == 0 {
		return nil, errors.New("tlogclient: no transparency log configured")
	}
	c := &Client{cfg: cfg, byURL: map[string]*logState{},
		reqs: make(chan *recordReq, 4096), jobs: make(chan func(context.Context), 64), m: newClientMetrics(),
		flushing: make(chan struct{})}
	for _, l := range cfg.Logs {
		u := l.URL()
		if _, dup := c.byURL[u]; dup {
			return nil, fmt.Errorf("tlogclient: log %s configured twice", u)
		}
		ls := &logState{c: c, log: l, url: u, held: map[int64]struct{}{}, wake: make(chan struct{}, 1),
			sem: make(chan struct{}, cfg.InFlight)}
		ls.healthy.Store(true)
		// Every per-log series exists from the start (at 0), so alerts on
		// their rates see them before the first failure and a scrape right
		// after start finds every family (the spool gathers a partial batch
		// for 100 ms before its first add-batch).
		c.m.submitted.WithLabelValues(u)
		c.m.submitErrors.WithLabelValues(u)
		c.m.claimed.WithLabelValues(u)
		c.m.conflicts.WithLabelValues(u)
		c.m.submitSeconds.WithLabelValues(u)
		c.m.promiseLatency.WithLabelValues(u)
		c.logs = append(c.logs, ls)
		c.byURL[u] = ls
	}
	if cfg.Spool != nil {
		cfg.Spool.groupHook = func(rows int) { c.m.groupRows.Observe(float64(rows)) }
		c.spoolOnce.Do(c.startSpool)
	}
	return c, nil
}

// LogURLs returns the configured logs' URLs, in configuration order.
func (c *Client) LogURLs() []string {
	out := make([]string, len(c.logs))
	for i, ls := range c.logs {
		out[i] = ls.url
	}
	return out
}

// ErrStopped: the client is not running (Run returned), so nothing can be
// recorded.
var ErrStopped = errors.New("tlogclient: client stopped")

// RecordJWS is Record for JWS the signing API issued (artifact type
// vrp_attestation).
func (c *Client) RecordJWS(ctx context.Context, jws []string) error {
	return c.Record(ctx, ArtifactAttestation, jws...)
}

// Record makes one leaf per artifact (of type artifactType, hashed over its
// exact bytes) durable for every configured log — in the spool when one is
// configured, else in the outbox — and returns nil once they are written.
// It waits for the group commit its records join (see the package
// documentation), never for a log. An error means the records may or may
// not be durable: the caller must not hand the artifacts out (a durable
// record is still delivered, which is harmless).
func (c *Client) Record(ctx context.Context, artifactType string, artifacts ...string) error {
	if len(artifacts) == 0 {
		return nil
	}
	if !validArtifactType(artifactType) {
		return fmt.Errorf("tlogclient: unknown artifact_type %q", artifactType)
	}
	if sp := c.cfg.Spool; sp != nil {
		// A mapped spool (ADR 0033) answers from a memory copy: there is
		// no commit to wait for and time, and the wait histogram's shared
		// counters cost more than the copy does (docs/performance.md,
		// session 37). The other modes wait for a group's write.
		var start time.Time
		if !sp.mapped {
			start = time.Now()
		}
		now := c.cfg.Now()
		hashes := make([][32]byte, len(artifacts))
		for i, a := range artifacts {
			hashes[i] = HashArtifact(a)
		}
		err := sp.append(ctx, artifactCode(artifactType), now, hashes)
		if !sp.mapped {
			c.m.recordSeconds.Observe(time.Since(start).Seconds())
		}
		if err != nil {
			c.m.recordErrors.Inc()
			return fmt.Errorf("tlogclient: recording %d leaves: %w", len(artifacts), err)
		}
		return nil
	}
	start := time.Now()
	now := c.cfg.Now()
	lease := now.Add(c.cfg.Lease)
	r := &recordReq{rows: make([]store.OutboxRow, 0, len(artifacts)*len(c.logs)), done: make(chan error, 1)}
	for _, a := range artifacts {
		h := HashArtifact(a)
		for _, ls := range c.logs {
			r.rows = append(r.rows, store.OutboxRow{LogURL: ls.url, ArtifactType: artifactType, ArtifactHash: h, EnqueuedAt: now, LeaseUntil: lease})
		}
	}
	err := c.wait(ctx, r)
	c.m.recordSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		c.m.recordErrors.Inc()
		return fmt.Errorf("tlogclient: recording %d leaves: %w", len(artifacts), err)
	}
	return nil
}

func (c *Client) wait(ctx context.Context, r *recordReq) error {
	select {
	case c.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run runs the group committers, one submitter and one sweeper per log and
// the backlog counter until ctx ends. Rows not yet delivered stay in the
// outbox for the next start (or another replica).
func (c *Client) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if c.cfg.Spool != nil {
		c.spoolOnce.Do(c.startSpool)
		for _, ls := range c.logs {
			wg.Go(func() { ls.spoolSendLoop(ctx) })
		}
		wg.Go(func() { c.spoolCursorLoop(ctx) })
		if c.cfg.Outbox != nil {
			wg.Go(func() { c.adoptOutboxLoop(ctx) })
		}
		wg.Wait()
		return
	}
	for i := 0; i < c.cfg.Committers; i++ {
		wg.Go(func() { c.commitLoop(ctx) })
	}
	for _, ls := range c.logs {
		wg.Go(func() { ls.submitLoop(ctx) })
		wg.Go(func() { ls.sweepLoop(ctx) })
	}
	wg.Go(func() { c.statsLoop(ctx) })
	wg.Wait()
	// Fail whatever still waits: its rows were not committed by us.
	for {
		select {
		case r := <-c.reqs:
			r.done <- ErrStopped
		default:
			return
		}
	}
}

// commitLoop is one group committer: it takes every Record request waiting
// (up to MaxGroupRows rows), commits them in one statement, answers them,
// and hands the rows to the submitters. Between commits it runs the other
// outbox writes (deletes, claims), so that on SQLite one goroutine does all
// the writing.
func (c *Client) commitLoop(ctx context.Context) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var group []*recordReq
	var rows []store.OutboxRow
	lastGroup, lastCommit := 1, time.Duration(0)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		var first *recordReq
		select {
		case <-ctx.Done():
			return
		case job := <-c.jobs:
			job(ctx)
			continue
		case <-tick.C:
			c.maybeFlushDeletes(ctx)
			continue
		case first = <-c.reqs:
		}
		group, rows = append(group[:0], first), append(rows[:0], first.rows...)
	gather:
		for len(rows) < c.cfg.MaxGroupRows {
			select {
			case r := <-c.reqs:
				group = append(group, r)
				rows = append(rows, r.rows...)
			default:
				break gather
			}
		}
		if wait := min(c.cfg.MaxLinger, 2*lastCommit); lastGroup > 1 && wait > 0 && len(group) < 2*lastGroup {
			linger.Reset(wait)
		lingering:
			for len(group) < 2*lastGroup && len(rows) < c.cfg.MaxGroupRows {
				select {
				case r := <-c.reqs:
					group = append(group, r)
					rows = append(rows, r.rows...)
				case <-linger.C:
					break lingering
				}
			}
			linger.Stop()
		}
		lastGroup = min(len(group), 64)
		// The commit is not cut short by shutdown: its requesters wait for
		// its outcome.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		start := time.Now()
		got, err := c.cfg.Outbox.EnqueueOutbox(wctx, rows)
		lastCommit = time.Since(start)
		cancel()
		c.m.groupRows.Observe(float64(len(rows)))
		for _, r := range group {
			r.done <- err
		}
		clear(group)
		if err != nil {
			c.cfg.Logger.Warn("transparency log: outbox commit failed; the signing requests waiting for it fail", "rows", len(rows), "err", err)
			continue
		}
		c.dispatch(got)
		c.maybeFlushDeletes(ctx)
	}
}

// dispatch hands committed rows to their logs' submitters.
func (c *Client) dispatch(rows []store.OutboxRow) {
	if len(c.logs) == 1 {
		c.logs[0].enqueue(rows)
		return
	}
	by := map[*logState][]store.OutboxRow{}
	for _, r := range rows {
		if ls := c.byURL[r.LogURL]; ls != nil {
			by[ls] = append(by[ls], r)
		}
	}
	for ls, rs := range by {
		ls.enqueue(rs)
	}
}

// deleteLater queues the rows of a delivered batch for deletion by a
// committer.
func (c *Client) deleteLater(ls *logState, ids []int64) {
	c.delMu.Lock()
	c.delPending = append(c.delPending, pendingDelete{ls, ids})
	c.delMu.Unlock()
}

// Deletes of delivered rows are batched: each is a write transaction (on
// SQLite with the commit's fsync, and the one writer is busy meanwhile),
// so they run at most every deleteEvery unless deleteBatch rows wait.
const (
	deleteEvery = 250 * time.Millisecond
	deleteBatch = 2000
)

// maybeFlushDeletes flushes pending deletes when enough rows or time
// gathered.
func (c *Client) maybeFlushDeletes(ctx context.Context) {
	c.delMu.Lock()
	n := 0
	for _, d := range c.delPending {
		n += len(d.ids)
	}
	due := n > 0 && (n >= deleteBatch || time.Since(c.lastDelete) >= deleteEvery)
	c.delMu.Unlock()
	if due {
		c.flushDeletes(ctx)
	}
}

// flushDeletes deletes delivered rows; on failure they are queued again
// (they also stay claimable, so a failed delete costs a resubmission at
// worst).
func (c *Client) flushDeletes(ctx context.Context) {
	c.delMu.Lock()
	batch := c.delPending
	c.delPending = nil
	c.lastDelete = time.Now()
	c.delMu.Unlock()
	if len(batch) == 0 {
		return
	}
	var ids []int64
	for _, d := range batch {
		ids = append(ids, d.ids...)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err := c.cfg.Outbox.DeleteOutbox(wctx, ids)
	cancel()
	if err != nil {
		c.cfg.Logger.Warn("transparency log: deleting delivered outbox rows failed; retrying", "rows", len(ids), "err", err)
		c.delMu.Lock()
		c.delPending = append(batch, c.delPending...)
		c.delMu.Unlock()
		return
	}
	for _, d := range batch {
		d.ls.release(d.ids)
	}
}

// write runs fn on a committer (the outbox's one writer on SQLite) and
// returns its error.
func (c *Client) write(ctx context.Context, fn func(ctx context.Context) error) error {
	done := make(chan error, 1)
	select {
	case c.jobs <- func(ctx context.Context) { done <- fn(ctx) }:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// statsLoop counts the outbox backlog every StatsEvery.
func (c *Client) statsLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.StatsEvery)
	defer t.Stop()
	for {
		c.refreshStats(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Client) refreshStats(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := c.cfg.Outbox.OutboxBacklog(qctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	c.statsErr = err
	if err == nil {
		c.stats, c.statsAt = st, c.cfg.Now()
	}
}

// Backlog returns the last count of outbox rows per log URL (every log
// that has rows, configured or not) and when it was taken.
func (c *Client) Backlog() (map[string]store.OutboxStat, time.Time, error) {
	if c.cfg.Spool != nil {
		return c.spoolBacklog(), c.cfg.Now(), nil
	}
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	out := make(map[string]store.OutboxStat, len(c.stats))
	for k, v := range c.stats {
		out[k] = v
	}
	return out, c.statsAt, c.statsErr
}

// Ready reports whether every log's backlog is within the thresholds
// (MaxBacklogRows, MaxBacklogAge) at the last count; the error names the
// log and the backlog otherwise. A spool whose write failed is never
// ready (every Record fails until a restart).
func (c *Client) Ready() error {
	if c.cfg.Spool != nil {
		if err := c.cfg.Spool.Err(); err != nil {
			return err
		}
	}
	st, _, err := c.Backlog()
	if err != nil {
		return fmt.Errorf("transparency-log outbox unreadable: %w", err)
	}
	now := c.cfg.Now()
	var bad []string
	for _, ls := range c.logs {
		s, ok := st[ls.url]
		if !ok {
			continue
		}
		if age := now.Sub(s.Oldest); s.Rows > c.cfg.MaxBacklogRows || age > c.cfg.MaxBacklogAge {
			bad = append(bad, fmt.Sprintf("transparency log %s: %d leaves waiting, oldest %s", ls.url, s.Rows, age.Round(time.Second)))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// logState is one log's submitter state.
type logState struct {
	c   *Client
	log Log
	url string

	mu    sync.Mutex
	queue []store.OutboxRow  // committed or claimed, not yet sent
	held  map[int64]struct{} // ids queued, in flight or awaiting deletion

	wake     chan struct{}
	sem      chan struct{} // in-flight add-batch requests
	spool    spoolCursor   // spool mode: this log's position (under mu)
	lastWarn atomic.Int64  // unix nanoseconds of the last add-batch warning
	healthy  atomic.Bool   // the last add-batch succeeded
	inFlight atomic.Int64
	started  atomic.Bool // the first sweep ran
}

// enqueue adds rows to the send queue, or leaves them to the sweeper when
// the queue is full.
func (ls *logState) enqueue(rows []store.OutboxRow) {
	ls.mu.Lock()
	n := 0
	for _, r := range rows {
		if _, dup := ls.held[r.ID]; dup {
			continue
		}
		if len(ls.held) >= ls.c.cfg.QueueLimit {
			continue // stays in the outbox; a sweep claims it once its lease ends
		}
		ls.held[r.ID] = struct{}{}
		ls.queue = append(ls.queue, r)
		n++
	}
	ls.mu.Unlock()
	if n > 0 {
		select {
		case ls.wake <- struct{}{}:
		default:
		}
	}
}

// release forgets deleted rows.
func (ls *logState) release(ids []int64) {
	ls.mu.Lock()
	for _, id := range ids {
		delete(ls.held, id)
	}
	ls.mu.Unlock()
}

// take removes up to n rows from the head of the queue.
func (ls *logState) take(n int) []store.OutboxRow {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n = min(n, len(ls.queue))
	if n == 0 {
		return nil
	}
	out := make([]store.OutboxRow, n)
	copy(out, ls.queue)
	ls.queue = ls.queue[n:]
	if len(ls.queue) == 0 {
		ls.queue = nil // let the backing array go
	}
	return out
}

func (ls *logState) queued() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return len(ls.queue)
}

// submitLoop sends the queue in batches, at most InFlight at once.
func (ls *logState) submitLoop(ctx context.Context) {
	cfg := &ls.c.cfg
	for {
		select {
		case <-ctx.Done():
			return
		case <-ls.wake:
		}
		if ls.queued() < cfg.MaxBatch {
			select {
			case <-ctx.Done():
				return
			case <-time.After(cfg.FlushDelay):
			}
		}
		// As spoolSendLoop: more at once only while full batches wait; a
		// partial rest goes back to the FlushDelay above (woken again).
		for sent := 0; ; sent++ {
			if sent > 0 {
				if q := ls.queued(); q < cfg.MaxBatch {
					if q > 0 {
						select {
						case ls.wake <- struct{}{}:
						default:
						}
					}
					break
				}
			}
			select {
			case ls.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			batch := ls.take(cfg.MaxBatch)
			if len(batch) == 0 {
				<-ls.sem
				break
			}
			ls.inFlight.Add(1)
			go func() {
				defer func() { ls.inFlight.Add(-1); <-ls.sem }()
				ls.send(ctx, batch)
			}()
		}
	}
}

// send delivers one batch of outbox rows (deliver), then deletes them; when
// ctx ends first the rows stay in the outbox, their lease ends and they are
// claimed again.
func (ls *logState) send(ctx context.Context, batch []store.OutboxRow) {
	entries := make([]Entry, len(batch))
	for i, r := range batch {
		entries[i] = Entry{ArtifactType: r.ArtifactType, ArtifactHash: r.ArtifactHash}
	}
	if !ls.deliver(ctx, entries, func(i int) time.Time { return batch[i].EnqueuedAt }, "outbox") {
		return
	}
	ids := make([]int64, len(batch))
	for i, r := range batch {
		ids[i] = r.ID
	}
	ls.c.deleteLater(ls, ids)
}

// deliver submits entries as one add-batch, retrying with capped
// exponential backoff (100 ms doubling to 10 s, half jittered) until the
// log promises them (true) or ctx ends (false). enqueuedAt(i) is when
// entry i became durable, for the promise-latency histogram; durableIn
// names where the entries wait meanwhile ("outbox", "spool"), for the
// warning logged at most every 10 s while the log fails.
//
// Entries the log answers with a TypeConflictError (their hash is logged
// there under another artifact type, ADR 0043) are left out for this log
// and the rest is submitted again at once: retrying them could never
// succeed, and would hold back every later leaf (the spool delivers in
// order), so that whoever may submit to a public log could stop this
// node's leaves from reaching it by logging one hash first.
func (ls *logState) deliver(ctx context.Context, entries []Entry, enqueuedAt func(i int) time.Time, durableIn string) bool {
	m := &ls.c.m
	backoff := 100 * time.Millisecond
	var orig []int // after conflicts: entries[i] is the caller's orig[i]
	for attempt := 1; ; attempt++ {
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		p, err := ls.log.AddBatch(actx, entries)
		cancel()
		m.submitSeconds.WithLabelValues(ls.url).Observe(time.Since(start).Seconds())
		var tc *TypeConflictError
		if errors.As(err, &tc) {
			ls.healthy.Store(true) // it answered, with a promise that verified
			var dropped int
			if entries, orig, dropped = ls.dropConflicts(entries, orig, tc); len(entries) == 0 {
				return true
			}
			if dropped > 0 {
				continue
			}
		}
		if err == nil {
			ls.healthy.Store(true)
			m.submitted.WithLabelValues(ls.url).Add(float64(len(entries)))
			now := ls.c.cfg.Now()
			lat := m.promiseLatency.WithLabelValues(ls.url)
			for i := range entries {
				j := i
				if orig != nil {
					j = orig[i]
				}
				lat.Observe(now.Sub(enqueuedAt(j)).Seconds())
			}
			if attempt > 1 {
				ls.c.cfg.Logger.Info("transparency log: batch delivered after retries", "log", ls.url, "entries", len(entries), "attempts", attempt, "log_id", p.LogID)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		ls.healthy.Store(false)
		m.submitErrors.WithLabelValues(ls.url).Inc()
		if last := ls.lastWarn.Load(); time.Since(time.Unix(0, last)) > 10*time.Second && ls.lastWarn.CompareAndSwap(last, time.Now().UnixNano()) {
			ls.c.cfg.Logger.Warn("transparency log: add-batch failed; retrying (the leaves are safe in the "+durableIn+")", "log", ls.url,
				"entries", len(entries), "attempt", attempt, "err", err)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// dropConflicts removes from entries those tc names (logging each, and
// once the log's signed promise as evidence, and counting them in
// keysvc_tlog_type_conflicts_total) and returns the rest with their
// indices in the caller's batch (orig nil: entries is the caller's), and
// how many it removed. A conflict whose index is out of range, repeated or
// not at the entry it names is ignored.
func (ls *logState) dropConflicts(entries []Entry, orig []int, tc *TypeConflictError) (_ []Entry, _ []int, dropped int) {
	if orig == nil {
		orig = make([]int, len(entries))
		for i := range orig {
			orig[i] = i
		}
	}
	drop := make([]bool, len(entries))
	sepHash := sha256.Sum256([]byte(tc.SEP))
	for _, c := range tc.Conflicts {
		if c.Index < 0 || c.Index >= len(entries) || drop[c.Index] || entries[c.Index] != c.Entry {
			continue
		}
		drop[c.Index] = true
		dropped++
		ls.c.m.conflicts.WithLabelValues(ls.url).Inc()
		ls.c.cfg.Logger.Error("transparency log: the log holds this leaf's artifact hash under another artifact type, so it cannot log it under its own; it is left out for this log (anyone who may submit to the log can do this: give the log submit tokens). Receipts for this artifact cannot use this log",
			"log", ls.url, "artifact_hash", FormatHash(c.Entry.ArtifactHash), "artifact_type", c.Entry.ArtifactType, "logged_type", c.LoggedType, "sep_sha256", FormatHash(sepHash))
	}
	if dropped > 0 && tc.SEP != "" {
		// The evidence once per promise (up to ~200 KiB for 1,000 entries),
		// not once per entry.
		ls.c.cfg.Logger.Error("transparency log: the log's signed entry promise showing artifact hashes under another artifact type",
			"log", ls.url, "conflicts", dropped, "sep_sha256", FormatHash(sepHash), "sep", tc.SEP)
	}
	keep, keepOrig := entries[:0:0], orig[:0:0]
	for i, e := range entries {
		if !drop[i] {
			keep, keepOrig = append(keep, e), append(keepOrig, orig[i])
		}
	}
	return keep, keepOrig, dropped
}

// sweepLoop claims rows whose lease ended (a killed replica's, rows left
// out of memory, rows whose delivery outlasted the lease) when the log is
// reachable and the queue has room.
func (ls *logState) sweepLoop(ctx context.Context) {
	cfg := &ls.c.cfg
	t := time.NewTicker(cfg.SweepEvery)
	defer t.Stop()
	for {
		for ls.sweepOnce(ctx) {
			// A full claim: more may wait. Go on once the queue drains.
			for ls.queued() >= cfg.MaxBatch {
				select {
				case <-ctx.Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweepOnce claims up to MaxBatch expired rows and queues those not held
// already; it reports whether the claim was full.
func (ls *logState) sweepOnce(ctx context.Context) bool {
	cfg := &ls.c.cfg
	if !ls.healthy.Load() && ls.inFlight.Load() > 0 {
		return false // a batch is retrying: the log is down, claiming would not help
	}
	if ls.queued() >= cfg.MaxBatch {
		return false
	}
	ls.mu.Lock()
	room := cfg.QueueLimit - len(ls.held)
	ls.mu.Unlock()
	if room <= 0 {
		return false
	}
	now := cfg.Now()
	before := now
	if cfg.ClaimAllAtStart && !ls.started.Load() {
		before = now.Add(cfg.Lease + time.Hour) // every row, whatever its lease
	}
	limit := min(cfg.MaxBatch, room)
	var rows []store.OutboxRow
	err := ls.c.write(ctx, func(wctx context.Context) error {
		wctx, cancel := context.WithTimeout(wctx, 30*time.Second)
		defer cancel()
		var err error
		rows, err = cfg.Outbox.ClaimOutbox(wctx, ls.url, before, now.Add(cfg.Lease), limit)
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn("transparency log: claiming outbox rows failed", "log", ls.url, "err", err)
		}
		return false
	}
	if len(rows) < limit {
		ls.started.Store(true)
	}
	if len(rows) > 0 {
		ls.c.m.claimed.WithLabelValues(ls.url).Add(float64(len(rows)))
		ls.enqueue(rows)
	}
	return len(rows) == limit
}

// --- metrics ---------------------------------------------------------------

type clientMetrics struct {
	recordSeconds  prometheus.Histogram
	recordErrors   prometheus.Counter
	groupRows      prometheus.Histogram
	submitted      *prometheus.CounterVec
	submitErrors   *prometheus.CounterVec
	submitSeconds  *prometheus.HistogramVec
	promiseLatency *prometheus.HistogramVec
	claimed        *prometheus.CounterVec
	conflicts      *prometheus.CounterVec
}

func newClientMetrics() clientMetrics {
	return clientMetrics{
		recordSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "keysvc_tlog_record_duration_seconds",
			Help:    "Time a signing request waits for its transparency-log outbox rows or spool records to commit (the group commit), in seconds. Not observed with the mapped spool (spool sync write where fallocate works, ADR 0033), which has no commit to wait for.",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1}}),
		recordErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "keysvc_tlog_record_errors_total",
			Help: "Signing requests refused because their outbox rows could not be committed."}),
		groupRows: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "keysvc_tlog_group_commit_rows",
			Help: "Outbox rows or spool records per group commit. Not observed with the mapped spool (ADR 0033), which has no group commit.", Buckets: prometheus.ExponentialBuckets(1, 4, 8)}),
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keysvc_tlog_submitted_entries_total",
			Help: "Leaves the log promised to include (checked Signed Entry Promise), by log."}, []string{"log"}),
		submitErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keysvc_tlog_submit_errors_total",
			Help: "Failed add-batch requests (retried), by log."}, []string{"log"}),
		submitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "keysvc_tlog_submit_duration_seconds",
			Help: "Duration of one add-batch request, by log, in seconds.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)}, []string{"log"}),
		promiseLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "keysvc_tlog_promise_latency_seconds",
			Help: "Time from a leaf's outbox commit to the log's Signed Entry Promise for it, by log, in seconds.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"log"}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keysvc_tlog_claimed_entries_total",
			Help: "Outbox rows claimed after their lease ended (left by a stopped replica, or delivered late), by log."}, []string{"log"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keysvc_tlog_type_conflicts_total",
			Help: "Leaves left out for a log because it holds their artifact hash under another artifact type (it cannot log them; ADR 0043), by log. Above 0: someone logged this node's artifacts first."}, []string{"log"}),
	}
}

var (
	backlogRowsDesc = prometheus.NewDesc("keysvc_tlog_outbox_rows",
		"Leaves in the transparency-log outbox waiting for a log, at the last count.", []string{"log"}, nil)
	backlogAgeDesc = prometheus.NewDesc("keysvc_tlog_outbox_oldest_age_seconds",
		"Age of the oldest leaf waiting in the outbox for a log, at the last count (0 when none).", []string{"log"}, nil)
	queuedDesc = prometheus.NewDesc("keysvc_tlog_queued_entries",
		"Leaves this process holds in memory for a log (queued, in flight or awaiting deletion).", []string{"log"}, nil)
	healthyDesc = prometheus.NewDesc("keysvc_tlog_log_up",
		"1 when the last add-batch to the log succeeded, else 0.", []string{"log"}, nil)
)

func (c *Client) collectors() []prometheus.Collector {
	m := &c.m
	return []prometheus.Collector{m.recordSeconds, m.recordErrors, m.groupRows, m.submitted, m.submitErrors, m.submitSeconds, m.promiseLatency, m.claimed, m.conflicts}
}

// Describe implements prometheus.Collector.
func (c *Client) Describe(ch chan<- *prometheus.Desc) {
	for _, col := range c.collectors() {
		col.Describe(ch)
	}
	ch <- backlogRowsDesc
	ch <- backlogAgeDesc
	ch <- queuedDesc
	ch <- healthyDesc
}

// Collect implements prometheus.Collector: the counters and histograms,
// and per log the outbox backlog, the rows held in memory and whether the
// log answered.
func (c *Client) Collect(ch chan<- prometheus.Metric) {
	for _, col := range c.collectors() {
		col.Collect(ch)
	}
	st, _, _ := c.Backlog()
	now := c.cfg.Now()
	urls := make([]string, 0, len(st)+len(c.logs))
	for u := range st {
		urls = append(urls, u)
	}
	for _, ls := range c.logs {
		if _, ok := st[ls.url]; !ok {
			urls = append(urls, ls.url)
		}
	}
	sort.Strings(urls)
	for _, u := range urls {
		s := st[u]
		age := 0.0
		if s.Rows > 0 {
			age = now.Sub(s.Oldest).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(backlogRowsDesc, prometheus.GaugeValue, float64(s.Rows), u)
		ch <- prometheus.MustNewConstMetric(backlogAgeDesc, prometheus.GaugeValue, age, u)
	}
	for _, ls := range c.logs {
		ls.mu.Lock()
		held := len(ls.held)
		if c.cfg.Spool != nil {
			held = int(ls.spool.next - ls.spool.acked)
		}
		ls.mu.Unlock()
		up := 0.0
		if ls.healthy.Load() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(held), ls.url)
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, up, ls.url)
	}
}
