// Package tlogaudit is a transparency-log monitor: it reads a log's whole
// STH archive (GET sth/archive) and checks that the log never forked. Every
// archived STH must verify under the log key, its checkpoint must verify
// and name the same tree, tree sizes must grow and timestamps must not go
// back, and each STH must be consistent with the next one (RFC 9162
// §2.1.4 consistency proofs from GET consistency, checked with
// github.com/transparency-dev/merkle). When GET consistency fails (any
// status, a timeout, an answer that is not the proof), the proof is built
// from the log's C2SP tlog-tiles hash tiles instead
// (github.com/transparency-dev/tessera/client): only the signed roots and
// the log's data decide, so a log cannot hide a fork by failing exactly
// the proofs that would show it, and an honest log holding signed trees
// back is not taken for a forked one (ADR 0045). A proof from the tiles
// that the endpoint refused (400, 404) for a tree above the one GET sth
// published when the audit began is counted apart
// (Report.UnpublishedProofs): the log's GET consistency serves published
// trees only, so that refusal is routine, and Report.TileProofs counts
// every other failure. Both GET sth answers, the one read before the
// archive and the one after, must be archived trees the history extends,
// and the newest, with Options.MaxAge, no older than that (a frozen log).
// With Options.From (tlog audit --state) the audit starts at a tree an
// earlier audit checked, and the log's history must extend it (ADR 0046).
package tlogaudit

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/tessera/client"

	"github.com/keysvc/keysvc/internal/sameorigin"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

// Options configures Audit.
type Options struct {
	// BaseURL is the log operator's base URL (the endpoints are under
	// BaseURL + tlogfmt.PathPrefix).
	BaseURL string
	// Keys are the trusted log keys (configured out of band, never taken
	// from the log under audit).
	Keys []tlogfmt.LogKey
	// WitnessVKeys and WitnessesRequired: when WitnessesRequired > 0, the
	// published checkpoint (GET sth) must carry that many valid
	// cosignatures from these keys.
	WitnessVKeys      []string
	WitnessesRequired int
	// MaxAge and Now bound the age of the tree GET sth serves, as
	// ScanOptions.MaxAge does for a scan: a log that stopped publishing
	// (frozen, or a path replaying an old answer) fails with ErrStaleTree.
	// Zero: not checked.
	MaxAge time.Duration
	Now    func() time.Time
	// Client is the HTTP client (default: one with a 30 s timeout).
	Client *http.Client
	// PageSize is the archive page size (default 1000).
	PageSize int
	// From, when set, is an archived STH that an earlier audit of this
	// log checked (its Report.Newest, kept by the monitor). The audit
	// then reads the archive from that tree size on, and the log's
	// history must extend that tree: the archive's STH of its size, if
	// the archive still holds one, must have its root, the next archived
	// STH must be consistent with it, and an archive that ends below it
	// is a rollback. An audit without From checks only that the history
	// the log serves today is consistent with itself, which a log that
	// rewrote its whole history under its key passes. From must verify
	// under Keys (an error, not an Inconsistency, when it does not).
	From *tlogfmt.ArchivedSTH
}

// Report summarizes a clean audit.
type Report struct {
	// STHs is how many archived STHs were checked; TreeSize and RootHash
	// are the newest.
	STHs     int
	TreeSize uint64
	RootHash []byte
	// ConsistencyProofs is how many consistency proofs verified.
	ConsistencyProofs int
	// TileProofs is how many of them were built from the log's hash
	// tiles because GET consistency failed, and EndpointError the first
	// such failure ("" when there was none; its text may quote the log's
	// answer): the history checks out, but the log's proof endpoint did
	// not serve these proofs.
	TileProofs    int
	EndpointError string
	// UnpublishedProofs is how many of them were built from the hash
	// tiles because GET consistency refused them (HTTP 400 or 404) for a
	// larger tree above the one GET sth published when the audit began
	// (none when that GET sth could not be read): a log signs and archives
	// a tree before it publishes it (after its witnesses cosign), and
	// serves consistency proofs only up to the published one. Routine on
	// a log taking writes or waiting for a witness; not counted in
	// TileProofs, nor its failure in EndpointError. Any other failure (a
	// 5xx, a timeout, a proof that does not verify) counts in TileProofs
	// whatever the tree.
	UnpublishedProofs int
	// Newest is the newest archived STH checked, as the log served it
	// (Options.From when the archive held nothing after it): what a
	// monitor keeps and passes as Options.From to its next audit, once
	// this one passed.
	Newest tlogfmt.ArchivedSTH
}

// Inconsistency is the first archived STH (or pair of them) that does not
// check out. Audit's error is an *Inconsistency when the log is at fault,
// any other error when the audit could not run (network, bad options).
type Inconsistency struct {
	// First and Second are the tree sizes of the pair (Second is -1 when
	// one STH alone is bad; both are -1 when the fault names no tree).
	First, Second int64
	Reason        string
	// cause is the verification error the Reason quotes, when there is
	// one (errors.Is/As reach it through Unwrap).
	cause error
}

func (e *Inconsistency) Unwrap() error { return e.cause }

func (e *Inconsistency) Error() string {
	if e.First < 0 {
		return e.Reason
	}
	if e.Second < 0 {
		return fmt.Sprintf("archived STH of tree size %d: %s", e.First, e.Reason)
	}
	return fmt.Sprintf("archived STHs of tree sizes %d and %d are inconsistent: %s", e.First, e.Second, e.Reason)
}

type checked struct {
	size uint64
	root []byte
	ts   time.Time
}

// Audit checks the log at opts.BaseURL; see the package documentation.
// Errors: *Inconsistency when the log is at fault; ErrStaleTree (wrapped)
// when its newest tree is older than opts.MaxAge; any other error when
// the audit could not run, among them a first tree head signed by a key
// that is none of opts.Keys before anything signed under them verified
// (no opts.From): the keys may be another log's.
func Audit(ctx context.Context, opts Options) (Report, error) {
	if len(opts.Keys) == 0 {
		return Report{}, errors.New("tlogaudit: no log key")
	}
	if opts.WitnessesRequired < 0 || opts.WitnessesRequired > len(opts.WitnessVKeys) {
		return Report{}, fmt.Errorf("tlogaudit: WitnessesRequired %d: want 0 to the %d WitnessVKeys", opts.WitnessesRequired, len(opts.WitnessVKeys))
	}
	if opts.Client == nil {
		opts.Client = sameorigin.Client(30 * time.Second)
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 1000
	}
	base := strings.TrimSuffix(opts.BaseURL, "/") + tlogfmt.PathPrefix
	var rep Report
	pr := &prover{opts: opts, base: base, rep: &rep, published: math.MaxUint64}
	// GET sth before the archive: the tree the log had published when
	// the audit began. It sorts the proofs built from tiles
	// (proveConsistency), and it is a signed head like any other: one
	// that does not verify is an Inconsistency, and it must be an
	// archived tree (below). One that cannot be read (a status, a
	// timeout) sorts nothing: every proof from tiles then warns.
	var prev *checked
	after := ""
	if opts.From != nil {
		from, err := checkOne(*opts.From, opts.Keys)
		if err != nil {
			return rep, fmt.Errorf("tlogaudit: the tree an earlier audit checked (From, the --state file) does not verify under the log keys: %v", err)
		}
		prev, rep.Newest = from, *opts.From
		if from.size > 0 {
			after = strconv.FormatUint(from.size-1, 10) // from its size on
		}
	}
	// trusted: something signed under the log keys has verified in this
	// audit (From, or a head or STH read). Until then a head signed by a
	// key that is none of them says nothing about the log: the keys may
	// be another log's (the monitor's configuration), and untrustedFirst
	// makes that an error, not an Inconsistency. Once one has verified, a
	// head under another key is the log's fault.
	trusted := opts.From != nil
	_, first, firstErr := readHead(ctx, opts, base)
	var inc *Inconsistency
	if errors.As(firstErr, &inc) {
		if err := untrustedFirst(trusted, firstErr, "GET sth"); err != nil {
			return rep, err
		}
		return rep, inc
	}
	if firstErr == nil {
		pr.published = first.TreeSize
		trusted = true
	}
	firstSeen := false
	for {
		u := base + tlogfmt.EndpointArchive + "?limit=" + strconv.Itoa(opts.PageSize)
		if after != "" {
			u += "&after=" + after
		}
		var page tlogfmt.ArchiveResponse
		if err := getJSON(ctx, opts.Client, u, &page); err != nil {
			return rep, err
		}
		for _, a := range page.STHs {
			cur, err := checkOne(a, opts.Keys)
			if err != nil {
				if err := untrustedFirst(trusted, err, fmt.Sprintf("the archived STH of tree size %d", a.TreeSize)); err != nil {
					return rep, err
				}
				return rep, err
			}
			trusted = true
			switch {
			case opts.From != nil && rep.STHs == 0 && cur.size == prev.size:
				// The tree an earlier audit checked, as the archive holds
				// it today.
				if !bytes.Equal(cur.root, prev.root) {
					return rep, &Inconsistency{First: int64(cur.size), Second: -1, Reason: "the archive's STH has another root than the STH of this tree size an earlier audit checked (From): the log forked, or rewrote its history"}
				}
			case prev != nil:
				if err := pr.checkPair(ctx, *prev, *cur); err != nil {
					return rep, err
				}
			}
			if firstErr == nil && cur.size == first.TreeSize {
				if !bytes.Equal(cur.root, first.RootHash) {
					return rep, &Inconsistency{First: int64(cur.size), Second: -1, Reason: "the tree head GET sth served when the audit began has another root than the archive's"}
				}
				firstSeen = true
			}
			prev = cur
			rep.STHs++
			rep.Newest = a
		}
		if page.Next == nil {
			break
		}
		// A page that goes on must hold STHs and move past them: a log
		// that answered the same page forever would hold the monitor
		// forever, and one that went back would be read twice.
		if len(page.STHs) == 0 || prev == nil || *page.Next < prev.size {
			return rep, &Inconsistency{First: -1, Second: -1, Reason: fmt.Sprintf("the STH archive's paging does not advance (after=%s: %d STHs, next %d)", after, len(page.STHs), *page.Next)}
		}
		after = strconv.FormatUint(*page.Next, 10)
	}
	switch {
	case prev == nil:
		return rep, &Inconsistency{First: -1, Second: -1, Reason: "the STH archive is empty"}
	case opts.From != nil && rep.STHs == 0:
		return rep, &Inconsistency{First: int64(prev.size), Second: -1, Reason: "the STH archive holds no tree of this size or larger, and an earlier audit checked this one (From): the log rolled back"}
	}
	rep.TreeSize, rep.RootHash = prev.size, prev.root

	switch {
	case firstErr != nil || firstSeen:
	case first.TreeSize > prev.size:
		// A log archives a tree when it signs it, before it publishes
		// it: an archive read after GET sth published this tree ends
		// below it only when the log rolled back (or published a tree it
		// never archived, which no verifier can hold it to).
		return rep, &Inconsistency{First: int64(first.TreeSize), Second: -1, Reason: fmt.Sprintf("GET sth published this tree when the audit began, and the STH archive read after it ends at tree size %d: the log rolled back", prev.size)}
	default:
		// Behind the pages read (behind From, or left out of the
		// archive): looked up, and proved, as the final GET sth is.
		if err := pr.checkHead(ctx, first, *prev); err != nil {
			return rep, err
		}
	}

	// The newest STH the log serves must be archived: GET sth may be
	// newer than the last page read, so look it up by size.
	latest, sth, err := readHead(ctx, opts, base)
	if err != nil {
		return rep, err
	}
	if err := pr.checkHead(ctx, sth, *prev); err != nil {
		return rep, err
	}
	var cos []tlogfmt.Cosignature
	if opts.WitnessesRequired > 0 {
		// The published checkpoint (GET sth) carries the cosignatures; the
		// newest archived tree may still be waiting for its witnesses.
		cos, err = tlogfmt.VerifyCosignatures(latest.Checkpoint, opts.WitnessVKeys)
		if errors.Is(err, tlogfmt.ErrWitnessKey) {
			return rep, err // the trusted list is wrong, not the log
		}
		if err != nil || len(cos) < opts.WitnessesRequired {
			return rep, &Inconsistency{First: int64(sth.TreeSize), Second: -1,
				Reason: fmt.Sprintf("checkpoint carries %d of the %d witness cosignatures required", len(cos), opts.WitnessesRequired)}
		}
	}
	if _, err := checkTreeAge(sth, cos, opts.WitnessesRequired, opts.MaxAge, clock(opts.Now)); err != nil {
		return rep, err
	}
	return rep, nil
}

// untrustedFirst returns the error of an audit whose first signed object
// (what, e.g. "GET sth") is signed by a key that is none of the log keys,
// before anything has verified under them (trusted false): the monitor
// cannot tell a log that changed its key from log keys that are not this
// log's, so the audit could not run. It returns nil for any other err,
// and once trusted.
func untrustedFirst(trusted bool, err error, what string) error {
	var uk *tlogfmt.UntrustedKeyError
	if trusted || !errors.As(err, &uk) {
		return nil
	}
	return fmt.Errorf("tlogaudit: %s is signed by kid %q, which is none of the log keys, and nothing signed under them has verified yet: the log keys are not this log's, or the log changed its key", what, uk.KID)
}

// readHead reads GET sth and verifies it: the STH under opts.Keys, and
// its checkpoint naming the same tree. Errors: *Inconsistency when the
// log served a head that does not verify; any other error when it could
// not be read.
func readHead(ctx context.Context, opts Options, base string) (tlogfmt.STHResponse, tlogfmt.STH, error) {
	var latest tlogfmt.STHResponse
	if err := getJSON(ctx, opts.Client, base+tlogfmt.EndpointSTH, &latest); err != nil {
		return latest, tlogfmt.STH{}, err
	}
	sth, key, err := tlogfmt.VerifySTH(latest.STH, opts.Keys)
	if err != nil {
		return latest, sth, &Inconsistency{First: -1, Second: -1, Reason: "GET sth: " + err.Error(), cause: err}
	}
	cp, err := tlogfmt.VerifyCheckpoint(latest.Checkpoint, key)
	if err != nil || cp.TreeSize != sth.TreeSize || !bytes.Equal(cp.RootHash, sth.RootHash) {
		return latest, sth, &Inconsistency{First: int64(sth.TreeSize), Second: -1, Reason: fmt.Sprintf("GET sth: the checkpoint does not verify or names another tree (%v)", err)}
	}
	return latest, sth, nil
}

// checkHead checks a tree head GET sth served against newest, the
// archive's newest tree the audit checked: the same root at its size,
// an archived tree bound to newest by a consistency proof behind it, or
// a tree proved to extend newest ahead of it.
func (p *prover) checkHead(ctx context.Context, sth tlogfmt.STH, newest checked) error {
	switch {
	case sth.TreeSize == newest.size:
		if !bytes.Equal(sth.RootHash, newest.root) {
			return &Inconsistency{First: int64(sth.TreeSize), Second: -1, Reason: "GET sth has another root than the archive"}
		}
	case sth.TreeSize < newest.size:
		// Behind the archive's newest: it must be an archived tree, else
		// GET sth shows its readers a tree (a fork, a rollback) that the
		// archive, and every consistency proof above, never saw.
		if err := archived(ctx, p.opts, p.base, sth); err != nil {
			return err
		}
		// archived's answer is a second request the scan never checked:
		// a log can show it the head it shows GET sth's readers. What
		// binds that head to the audited history is a consistency proof
		// up to the newest tree the scan verified (no timestamp order:
		// a republished checkpoint of an older tree may be signed later).
		return p.proveConsistency(ctx, checked{size: sth.TreeSize, root: sth.RootHash, ts: sth.Timestamp}, newest)
	default:
		return p.checkPair(ctx, newest, checked{size: sth.TreeSize, root: sth.RootHash, ts: sth.Timestamp})
	}
	return nil
}

// archived checks that the archive holds a tree of sth's size with sth's
// root (GET sth/archive?after=size-1&limit=1: the archive is ordered by
// tree size, one STH per size).
func archived(ctx context.Context, opts Options, base string, sth tlogfmt.STH) error {
	u := base + tlogfmt.EndpointArchive + "?limit=1"
	if sth.TreeSize > 0 {
		u += "&after=" + strconv.FormatUint(sth.TreeSize-1, 10)
	}
	var page tlogfmt.ArchiveResponse
	if err := getJSON(ctx, opts.Client, u, &page); err != nil {
		return err
	}
	if len(page.STHs) > 0 {
		a, err := checkOne(page.STHs[0], opts.Keys)
		if err != nil {
			return err
		}
		if a.size == sth.TreeSize && bytes.Equal(a.root, sth.RootHash) {
			return nil
		}
	}
	return &Inconsistency{First: int64(sth.TreeSize), Second: -1, Reason: fmt.Sprintf("GET sth names tree size %d, behind the archive's newest, and the archive holds no such tree with that root: a tree head outside the archive (a fork or a rollback)", sth.TreeSize)}
}

// checkOne verifies one archived STH and its checkpoint.
func checkOne(a tlogfmt.ArchivedSTH, keys []tlogfmt.LogKey) (*checked, error) {
	bad := func(format string, args ...any) (*checked, error) {
		return nil, &Inconsistency{First: int64(a.TreeSize), Second: -1, Reason: fmt.Sprintf(format, args...)}
	}
	sth, key, err := tlogfmt.VerifySTH(a.STH, keys)
	if err != nil {
		return nil, &Inconsistency{First: int64(a.TreeSize), Second: -1, Reason: fmt.Sprintf("STH: %v", err), cause: err}
	}
	if sth.TreeSize != a.TreeSize {
		return bad("the STH is for tree size %d", sth.TreeSize)
	}
	cp, err := tlogfmt.VerifyCheckpoint(a.Checkpoint, key)
	if err != nil {
		return bad("checkpoint: %v", err)
	}
	if cp.TreeSize != sth.TreeSize || !bytes.Equal(cp.RootHash, sth.RootHash) {
		return bad("the checkpoint (size %d) and the STH name different trees", cp.TreeSize)
	}
	return &checked{size: sth.TreeSize, root: sth.RootHash, ts: sth.Timestamp}, nil
}

// prover proves that one tree extends another for one audit.
type prover struct {
	opts Options
	base string // opts.BaseURL + tlogfmt.PathPrefix
	rep  *Report
	// down is GET consistency's first failure in this audit: later
	// proofs are built from the tiles at once, so that an endpoint that
	// hangs, or refuses each proof just inside --timeout, costs one
	// --timeout, not one per pair (and cannot hold the audit past
	// --deadline before it reaches a forked pair).
	down error
	// tiles reads the log's hash tiles (tileProof), made at first use.
	tiles *client.HTTPFetcher
	// published is the tree size GET sth published when the audit
	// began (math.MaxUint64 when it could not be read).
	published uint64
}

// checkPair checks that b extends a, counting the proof it verifies in
// p.rep.
func (p *prover) checkPair(ctx context.Context, a, b checked) error {
	if b.size <= a.size {
		return &Inconsistency{First: int64(a.size), Second: int64(b.size), Reason: "tree sizes do not grow"}
	}
	if b.ts.Before(a.ts) {
		return &Inconsistency{First: int64(a.size), Second: int64(b.size),
			Reason: fmt.Sprintf("the larger tree's STH timestamp %s is before the smaller's %s", b.ts.Format(time.RFC3339), a.ts.Format(time.RFC3339))}
	}
	return p.proveConsistency(ctx, a, b)
}

// proveConsistency proves that b extends a (RFC 9162 §2.1.4; b.size >
// a.size) with the log's own proof (GET consistency) or, when that fails,
// with one built from its hash tiles (tileProof, ADR 0045), and counts it
// in p.rep (nothing when a is the empty tree, whose root it checks
// instead; one from tiles in TileProofs or UnpublishedProofs). Only the
// two signed roots and the log's data decide: an answer that is not a proof (a status, a timeout, a proof for other
// sizes) says nothing about them, and a proof for these sizes that does
// not verify is an Inconsistency only when the tiles do not show the pair
// consistent. Errors: an *Inconsistency when the log is at fault; any
// other error when neither the endpoint nor the tiles gave a proof.
func (p *prover) proveConsistency(ctx context.Context, a, b checked) error {
	bad := func(format string, args ...any) error {
		return &Inconsistency{First: int64(a.size), Second: int64(b.size), Reason: fmt.Sprintf(format, args...)}
	}
	if b.size <= a.size {
		return bad("tree sizes do not grow")
	}
	if a.size == 0 {
		// RFC 9162 §2.1.4: every tree extends the empty tree; its root
		// must be the empty root.
		if !bytes.Equal(a.root, rfc6962.DefaultHasher.EmptyRoot()) {
			return bad("the empty tree's root is not SHA-256 of the empty string")
		}
		return nil
	}
	var why string
	served := false
	if p.down != nil {
		why = fmt.Sprintf("GET consistency not asked (it failed earlier in this audit: %v)", p.down)
	} else {
		var failed error
		served, failed = p.endpointProof(ctx, a, b)
		if failed == nil {
			p.rep.ConsistencyProofs++
			return nil
		}
		if ctx.Err() != nil {
			return failed
		}
		p.down = failed
		why = failed.Error() // the log's proof, malformed or not verifying
		if !served {
			why = fmt.Sprintf("GET consistency failed (%v)", failed)
		}
	}
	path, err := p.tileProof(ctx, a, b)
	switch {
	case err != nil && served:
		return bad("%s, and the log's hash tiles could not be read to check it: %v", why, err)
	case err != nil:
		return fmt.Errorf("tree sizes %d and %d: %s, and the log's hash tiles could not be read to build the proof: %v", a.size, b.size, why, err)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, a.size, b.size, path, a.root, b.root); err != nil {
		return bad("%s, and the proof built from the log's hash tiles does not verify: %v", why, err)
	}
	p.rep.ConsistencyProofs++
	// The log serves proofs up to its published tree only and refuses
	// larger ones (400, 404): routine, not the endpoint's failure. A 5xx,
	// a timeout, or a proof that does not verify is, whatever the tree.
	var he *httpError
	if b.size > p.published && errors.As(p.down, &he) && (he.status == http.StatusBadRequest || he.status == http.StatusNotFound) {
		p.rep.UnpublishedProofs++
		return nil
	}
	if p.rep.EndpointError == "" {
		p.rep.EndpointError = p.down.Error()
	}
	p.rep.TileProofs++
	return nil
}

// maxConsistencyBytes bounds a GET consistency answer: a proof holds at
// most 2×64 hashes of 43 base64url characters.
const maxConsistencyBytes = 64 << 10

// endpointProof asks GET consistency for the proof from a to b and
// verifies it against both roots. On failure, served reports whether the
// log answered a proof for these sizes that is malformed or does not
// verify (the log's own data failing), as against no usable answer: a
// transport error, a timeout, a non-200 status, a body that is not a
// consistency response, or a proof for other sizes (a cache that ignores
// the query string).
func (p *prover) endpointProof(ctx context.Context, a, b checked) (served bool, err error) {
	u := fmt.Sprintf("%s%s?first=%d&second=%d", p.base, tlogfmt.EndpointConsistency, a.size, b.size)
	var cr tlogfmt.ConsistencyResponse
	if err := getJSONLimit(ctx, p.opts.Client, u, &cr, maxConsistencyBytes); err != nil {
		return false, err
	}
	if cr.First != a.size || cr.Second != b.size {
		return false, fmt.Errorf("GET %s: the log answered a proof for sizes %d and %d", u, cr.First, cr.Second)
	}
	path := make([][]byte, len(cr.ConsistencyProof))
	for i, s := range cr.ConsistencyProof {
		h, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(h) != tlogfmt.HashSize {
			return true, fmt.Errorf("consistency proof hash %d is malformed", i)
		}
		path[i] = h
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, a.size, b.size, path, a.root, b.root); err != nil {
		return true, fmt.Errorf("consistency proof does not verify: %v", err)
	}
	return false, nil
}

// maxTileBytes bounds one hash tile: 256 hashes of 32 bytes (C2SP
// tlog-tiles).
const maxTileBytes = 256 * 32

// tileProof builds the consistency proof from a to b out of the log's
// hash tiles (C2SP tlog-tiles, /tile/<L>/<N>[.p/<W>] at the log's root;
// a partial tile of tree b falls back to the full tile, which holds the
// same hashes): the nodes RFC 9162 §2.1.4 names, as the log's data holds
// them. The tiles are not trusted: the caller verifies the proof against
// both signed roots.
func (p *prover) tileProof(ctx context.Context, a, b checked) ([][]byte, error) {
	if p.tiles == nil {
		f, err := newFetcher(strings.TrimSuffix(p.opts.BaseURL, "/"), p.opts.Client, maxTileBytes)
		if err != nil {
			return nil, err
		}
		p.tiles = f
	}
	pb, err := client.NewProofBuilder(ctx, b.size, p.tiles.ReadTile)
	if err != nil {
		return nil, err
	}
	return pb.ConsistencyProof(ctx, a.size, b.size)
}

type httpError struct {
	url    string
	status int
	body   string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("GET %s: HTTP %d: %s", e.url, e.status, e.body)
}

// maxResponseBytes bounds one response body.
const maxResponseBytes = 64 << 20

func getJSON(ctx context.Context, c *http.Client, u string, v any) error {
	return getJSONLimit(ctx, c, u, v, maxResponseBytes)
}

// getJSONLimit is getJSON for an answer of at most limit bytes.
func getJSONLimit(ctx context.Context, c *http.Client, u string, v any, limit int64) error {
	if _, err := url.Parse(u); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &httpError{url: u, status: resp.StatusCode, body: strings.TrimSpace(string(body[:min(len(body), 300)]))}
	}
	if int64(len(body)) > limit {
		return fmt.Errorf("GET %s: answer larger than %d bytes", u, limit)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}
