package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// AnchorEvent is one key-history anchoring event (issue 12 item 5, ADR
// 0016): a compact JWS signed by the node's event key, whose SHA-256 is a
// vrp_status_event leaf in the transparency log. The store keeps the JWS so
// that a checker can read it back; it never interprets it.
type AnchorEvent struct {
	Hash      [32]byte  // SHA-256 of JWS (the leaf's artifact_hash)
	Kind      string    // "version", "key", "audit", or a marker kind
	Subject   string    // what it is about: a kid, a key name, an audit seq
	JWS       string    // the compact JWS as signed
	CreatedAt time.Time // when it was written
}

// AnchorStore keeps anchoring events. Both implementations of Store (and
// their Tx) implement it; it is separate from Reader and Tx so that the
// signing path's interfaces stay as they are.
type AnchorStore interface {
	// AnchorEventsByHash returns the events among hashes that are stored,
	// by hash (absent hashes are left out).
	AnchorEventsByHash(ctx context.Context, hashes [][32]byte) (map[[32]byte]AnchorEvent, error)
	// ListAnchorEvents returns every stored event, oldest first.
	ListAnchorEvents(ctx context.Context) ([]AnchorEvent, error)
	// AnchorEventHashes returns the hash of every stored event, in
	// ListAnchorEvents' order: 32 bytes a row, for a periodic check of
	// which events are new without reading every JWS again.
	AnchorEventHashes(ctx context.Context) ([][32]byte, error)
}

// AnchorWriter is the write side, inside a transaction (Tx values of both
// implementations implement it).
type AnchorWriter interface {
	// InsertAnchorEvents stores events; an event whose hash is already
	// stored is left as it is (the same fact signed again).
	InsertAnchorEvents(ctx context.Context, events []AnchorEvent) error
}

const anchorCols = `artifact_hash, kind, subject, jws, created_at`

func scanAnchor(scan func(...any) error) (AnchorEvent, error) {
	var ev AnchorEvent
	var h []byte
	if err := scan(&h, &ev.Kind, &ev.Subject, &ev.JWS, timeCol{&ev.CreatedAt}); err != nil {
		return ev, err
	}
	if len(h) != len(ev.Hash) {
		return ev, fmt.Errorf("store: anchor event: artifact_hash is %d bytes", len(h))
	}
	copy(ev.Hash[:], h)
	return ev, nil
}

// AnchorEventsByHash implements AnchorStore: one query per
// anchorLookupChunk hashes.
func (o ops) AnchorEventsByHash(ctx context.Context, hashes [][32]byte) (map[[32]byte]AnchorEvent, error) {
	out := make(map[[32]byte]AnchorEvent, len(hashes))
	for len(hashes) > 0 {
		n := min(len(hashes), anchorLookupChunk)
		args := make([]any, n)
		for i, h := range hashes[:n] {
			args[i] = h[:]
		}
		in := strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
		err := o.query(ctx, "get anchor events", `SELECT `+anchorCols+` FROM anchor_events WHERE artifact_hash IN (`+in+`)`,
			args, func(scan func(...any) error) error {
				ev, err := scanAnchor(scan)
				if err == nil {
					out[ev.Hash] = ev
				}
				return err
			})
		if err != nil {
			return nil, err
		}
		hashes = hashes[n:]
	}
	return out, nil
}

// anchorLookupChunk is how many hashes one AnchorEventsByHash query asks
// for (well under SQLite's 32,766 and PostgreSQL's 65,535 parameters).
const anchorLookupChunk = 500

// anchorOrder is the order of ListAnchorEvents and AnchorEventHashes.
const anchorOrder = ` ORDER BY created_at, kind, subject`

// ListAnchorEvents implements AnchorStore.
func (o ops) ListAnchorEvents(ctx context.Context) ([]AnchorEvent, error) {
	var out []AnchorEvent
	err := o.query(ctx, "list anchor events", `SELECT `+anchorCols+` FROM anchor_events`+anchorOrder,
		nil, func(scan func(...any) error) error {
			ev, err := scanAnchor(scan)
			out = append(out, ev)
			return err
		})
	return out, err
}

// AnchorEventHashes implements AnchorStore.
func (o ops) AnchorEventHashes(ctx context.Context) ([][32]byte, error) {
	var out [][32]byte
	err := o.query(ctx, "list anchor event hashes", `SELECT artifact_hash FROM anchor_events`+anchorOrder,
		nil, func(scan func(...any) error) error {
			var h []byte
			if err := scan(&h); err != nil {
				return err
			}
			if len(h) != 32 {
				return fmt.Errorf("store: anchor event: artifact_hash is %d bytes", len(h))
			}
			out = append(out, [32]byte(h))
			return nil
		})
	return out, err
}

// InsertAnchorEvents implements AnchorWriter.
func (t *sqlTx) InsertAnchorEvents(ctx context.Context, events []AnchorEvent) error {
	for _, ev := range events {
		at := ev.CreatedAt
		if at.IsZero() {
			at = Now()
		}
		if _, err := t.exec(ctx, "insert anchor event", `INSERT INTO anchor_events (`+anchorCols+`) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (artifact_hash) DO NOTHING`, ev.Hash[:], ev.Kind, ev.Subject, ev.JWS, t.ts(at)); err != nil {
			return err
		}
	}
	return nil
}
