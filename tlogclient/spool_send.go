package tlogclient

import (
	"context"
	"errors"
	"time"

	"github.com/keysvc/keysvc/store"
)

// spoolFlight is one batch read from the spool: records [start, end).
type spoolFlight struct {
	start, end uint64
	done       bool
}

// spoolCursor is a log's position in the spool (under logState.mu).
type spoolCursor struct {
	next    uint64         // next record to read
	acked   uint64         // every record before it is delivered
	flights []*spoolFlight // read, not yet all delivered, in order
	saved   uint64         // acked as last written to the cursor file
}

// advance moves acked past the delivered flights at the head; the caller
// holds ls.mu.
func (sc *spoolCursor) advance() {
	for len(sc.flights) > 0 && sc.flights[0].done {
		sc.acked = sc.flights[0].end
		sc.flights = sc.flights[1:]
	}
	if len(sc.flights) == 0 {
		sc.acked = sc.next
	}
}

// startSpool positions every log's cursor: where it was delivered to, or
// for a log new to the spool, at its end (it is owed what is signed from
// now on).
func (c *Client) startSpool() {
	sp := c.cfg.Spool
	end := sp.End()
	for _, ls := range c.logs {
		cur, ok := sp.readCursor(ls.url)
		pos := cur.pos
		if ok && cur.hasUnlistedAt {
			// Configured again: the mark an earlier run without the log
			// wrote no longer holds. It goes now, durably, not at the
			// log's first delivery, which may never come in this run (the
			// log down): a later run without it would then keep the old
			// mark and not count what was signed in between.
			if err := sp.saveCursorDurable(ls.url, pos); err != nil {
				c.cfg.Logger.Warn("transparency log: spool: writing a cursor failed", "log", ls.url, "err", err)
			}
		}
		if !ok {
			pos = end
			if err := sp.saveCursorDurable(ls.url, pos); err != nil {
				c.cfg.Logger.Warn("transparency log: spool: writing a cursor failed", "log", ls.url, "err", err)
			}
		}
		if pos > end {
			// A cursor past the spool's end: the spool is not the one the
			// cursor was written for. Deliver everything it holds again
			// (the log folds duplicates) rather than skip anything.
			c.cfg.Logger.Warn("transparency log: spool: a cursor is past the spool's end; delivering the whole spool again", "log", ls.url, "cursor", pos, "end", end)
			pos = 0
		}
		pos = max(pos, sp.first.Load())
		ls.spool = spoolCursor{next: pos, acked: pos, saved: pos}
		if end > pos {
			c.cfg.Logger.Info("transparency log: spool: delivering leaves left by the previous run", "log", ls.url, "leaves", end-pos)
		}
	}
	urls := c.LogURLs()
	sp.markUnlisted(urls)
	for u, owed := range sp.Unlisted(urls) {
		c.cfg.Logger.Warn("transparency log: spool has leaves for a log that is no longer configured; they are not delivered and their segments are deleted once the configured logs have them",
			"log", u, "leaves", owed)
	}
}

// spoolSendLoop sends the spool to one log in batches, in order, at most
// InFlight at once.
func (ls *logState) spoolSendLoop(ctx context.Context) {
	cfg := &ls.c.cfg
	sp := cfg.Spool
	wake := sp.subscribe()
	defer sp.unsubscribe(wake)
	t := time.NewTicker(time.Second) // a safety net against a missed wake-up
	defer t.Stop()
	read := func() uint64 { // the next record this log reads
		ls.mu.Lock()
		defer ls.mu.Unlock()
		return ls.spool.next
	}
	unread := func() uint64 { return sp.End() - read() } // records in the spool this log has not read
	for {
		waiting := unread()
		if waiting == 0 {
			if !sp.waitWake(ctx, wake, t.C, read) {
				return
			}
			continue
		}
		if waiting < uint64(cfg.MaxBatch) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(cfg.FlushDelay):
			case <-ls.c.flushing:
			}
		}
		// Send a batch, then more at once only while full batches wait:
		// a partial one waits FlushDelay above, so that records arriving
		// while batches are in flight gather into one request instead of
		// a request each (at 5,000 signatures/s, 17 entries per request
		// before, ~500 after: fewer promises to check here, fewer
		// requests for the log).
		for sent := 0; ; sent++ {
			if sent > 0 && unread() < uint64(cfg.MaxBatch) {
				break
			}
			select {
			case ls.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			ls.mu.Lock()
			start := ls.spool.next
			ls.mu.Unlock()
			entries, next, err := sp.read(start, cfg.MaxBatch)
			if err != nil {
				<-ls.sem
				cfg.Logger.Warn("transparency log: spool: read failed; retrying", "log", ls.url, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				break
			}
			if next == start {
				<-ls.sem
				break
			}
			fl := &spoolFlight{start: start, end: next, done: len(entries) == 0}
			ls.mu.Lock()
			ls.spool.next = next
			ls.spool.flights = append(ls.spool.flights, fl)
			ls.spool.advance()
			ls.mu.Unlock()
			if fl.done {
				<-ls.sem
				continue
			}
			ls.inFlight.Add(1)
			go func() {
				defer func() { ls.inFlight.Add(-1); <-ls.sem }()
				if ls.sendSpool(ctx, entries) {
					ls.mu.Lock()
					fl.done = true
					ls.spool.advance()
					ls.mu.Unlock()
				}
			}()
		}
	}
}

// sendSpool delivers one batch of spool records (deliver): true once the
// log promised them, false when ctx ended first (the records are delivered
// again from the cursor at the next start).
func (ls *logState) sendSpool(ctx context.Context, batch []spoolEntry) bool {
	entries := make([]Entry, len(batch))
	for i, r := range batch {
		entries[i] = r.entry
	}
	return ls.deliver(ctx, entries, func(i int) time.Time { return batch[i].at }, "spool")
}

// spoolCursorLoop writes each log's delivered position every 250 ms (and
// once more when ctx ends) and deletes the segments every log has passed.
func (c *Client) spoolCursorLoop(ctx context.Context) {
	t := time.NewTicker(spoolCursorInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.saveCursors()
			return
		case <-t.C:
			c.saveCursors()
		}
	}
}

func (c *Client) saveCursors() {
	sp := c.cfg.Spool
	low := sp.End()
	for _, ls := range c.logs {
		ls.mu.Lock()
		acked, saved := ls.spool.acked, ls.spool.saved
		ls.mu.Unlock()
		low = min(low, acked)
		if acked == saved {
			continue
		}
		if err := sp.saveCursor(ls.url, acked); err != nil {
			c.cfg.Logger.Warn("transparency log: spool: writing a cursor failed", "log", ls.url, "err", err)
			low = min(low, saved)
			continue
		}
		ls.mu.Lock()
		ls.spool.saved = acked
		ls.mu.Unlock()
	}
	sp.trim(low)
}

// spoolBacklog is Backlog in spool mode: per log, the records after its
// delivered position and when the first of them was appended.
func (c *Client) spoolBacklog() map[string]store.OutboxStat {
	sp := c.cfg.Spool
	end := sp.End()
	out := map[string]store.OutboxStat{}
	for _, ls := range c.logs {
		ls.mu.Lock()
		acked := ls.spool.acked
		ls.mu.Unlock()
		if end <= acked {
			continue
		}
		st := store.OutboxStat{Rows: int64(end - acked)}
		if at, ok := sp.enqueuedAt(max(acked, sp.first.Load())); ok {
			st.Oldest = at
		} else {
			st.Oldest = c.cfg.Now()
		}
		out[ls.url] = st
	}
	return out
}

// ErrNoSpool: the client records to the outbox, not to a spool.
var ErrNoSpool = errors.New("tlogclient: no spool configured")

// Flush asks a running client (Run) to deliver what the spool holds now
// and waits until every configured log has it: nil, or ctx.Err() when ctx
// ends first (what is still owed stays in the spool for the next start or
// `keysvc tlog drain`). From the first Flush on, the send loops no longer
// gather a partial batch for FlushDelay: it is meant for a graceful stop,
// after the last Record. A client on the outbox returns ErrNoSpool: its
// rows are in key history, where any replica delivers them.
func (c *Client) Flush(ctx context.Context) error {
	if c.cfg.Spool == nil {
		return ErrNoSpool
	}
	c.flushingOnce.Do(func() { close(c.flushing) })
	target := c.cfg.Spool.End()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !c.spoolDeliveredTo(target) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// spoolDeliveredTo reports whether every log has every record before end.
func (c *Client) spoolDeliveredTo(end uint64) bool {
	for _, ls := range c.logs {
		ls.mu.Lock()
		acked := ls.spool.acked
		ls.mu.Unlock()
		if acked < end {
			return false
		}
	}
	return true
}

// DrainSpool runs the client until every configured log has every leaf of
// the spool (or ctx ends), then stops it: `keysvc tlog drain`, the hand-off
// of a stopped replica's spool. It returns the most leaves any log was
// owed at the start. The logs must be the URLs the replica was configured
// with: a log new to the spool is owed only what is appended from now on.
func (c *Client) DrainSpool(ctx context.Context) (uint64, error) {
	if c.cfg.Spool == nil {
		return 0, ErrNoSpool
	}
	c.spoolOnce.Do(c.startSpool)
	var owed int64
	for _, s := range c.spoolBacklog() {
		owed = max(owed, s.Rows)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(rctx) }()
	defer func() { cancel(); <-done }()
	if err := c.Flush(ctx); err != nil {
		return 0, err
	}
	return uint64(owed), nil
}

// adoptEvery is how often a spool-mode client moves expired outbox rows
// into its spool.
const adoptEvery = 5 * time.Second

// adoptOutboxLoop moves rows left in key history's outbox — by this
// replica before it switched to the spool, or by a replica of the fleet
// still on the outbox that was killed — into the spool: claimed (with the
// outbox's lease, so replicas never take one row at once), appended,
// then deleted. Until then they stay claimable; a row moved twice is a
// duplicate the log folds.
func (c *Client) adoptOutboxLoop(ctx context.Context) {
	t := time.NewTicker(adoptEvery)
	defer t.Stop()
	first := true
	for {
		for _, ls := range c.logs {
			for c.adoptOnce(ctx, ls.url, first) {
			}
		}
		first = false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// adoptOnce moves up to MaxBatch expired rows of one log into the spool;
// it reports whether the claim was full (more may wait).
func (c *Client) adoptOnce(ctx context.Context, logURL string, first bool) bool {
	cfg := &c.cfg
	now := cfg.Now()
	before := now
	if first && cfg.ClaimAllAtStart {
		before = now.Add(cfg.Lease + time.Hour)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := cfg.Outbox.ClaimOutbox(wctx, logURL, before, now.Add(cfg.Lease), cfg.MaxBatch)
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn("transparency log: claiming outbox rows for the spool failed", "log", logURL, "err", err)
		}
		return false
	}
	if len(rows) == 0 {
		return false
	}
	byType := map[string][][32]byte{}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		byType[r.ArtifactType] = append(byType[r.ArtifactType], r.ArtifactHash)
		ids[i] = r.ID
	}
	for typ, hashes := range byType {
		code := artifactCode(typ)
		if code == 0 {
			cfg.Logger.Error("transparency log: outbox rows of an unknown artifact_type left in the outbox", "log", logURL, "artifact_type", typ, "rows", len(hashes))
			return false
		}
		if err := cfg.Spool.append(wctx, code, now, hashes); err != nil {
			cfg.Logger.Warn("transparency log: moving outbox rows into the spool failed", "log", logURL, "err", err)
			return false
		}
	}
	if err := cfg.Outbox.DeleteOutbox(wctx, ids); err != nil {
		cfg.Logger.Warn("transparency log: deleting outbox rows moved into the spool failed (they will be moved again)", "log", logURL, "err", err)
		return false
	}
	c.m.claimed.WithLabelValues(logURL).Add(float64(len(rows)))
	cfg.Logger.Info("transparency log: outbox rows moved into the spool", "log", logURL, "rows", len(rows))
	return len(rows) == cfg.MaxBatch
}
