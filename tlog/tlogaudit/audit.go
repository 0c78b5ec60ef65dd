// Package tlogaudit is a transparency-log monitor: it reads a log's whole
// STH archive (GET sth/archive) and checks that the log never forked. Every
// archived STH must verify under the log key, its checkpoint must verify
// and name the same tree, tree sizes must grow and timestamps must not go
// back, and each STH must be consistent with the next one (RFC 9162
// §2.1.4 consistency proofs from GET consistency, checked with
// github.com/transparency-dev/merkle). When GET consistency fails (5xx, a
// timeout, a broken answer), the proof is built from the log's C2SP
// tlog-tiles hash tiles instead (github.com/transparency-dev/tessera/client),
// so a log cannot hide a fork by failing exactly the proofs that would
// show it (ADR 0045). The newest GET sth must be in the archive and, with
// Options.MaxAge, no older than that (a frozen log).
package tlogaudit

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// such failure ("" when there was none): the history checks out, but
	// the log's proof endpoint does not work for its clients.
	TileProofs    int
	EndpointError string
}

// Inconsistency is the first archived STH (or pair of them) that does not
// check out. Audit's error is an *Inconsistency when the log is at fault,
// any other error when the audit could not run (network, bad options).
type Inconsistency struct {
	// First and Second are the tree sizes of the pair (Second is -1 when
	// one STH alone is bad).
	First, Second int64
	Reason        string
}

func (e *Inconsistency) Error() string {
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
// the audit could not run.
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
	var prev *checked
	after := ""
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
				return rep, err
			}
			if prev != nil {
				if err := checkPair(ctx, opts, base, *prev, *cur, &rep); err != nil {
					return rep, err
				}
			}
			prev = cur
			rep.STHs++
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
	if prev == nil {
		return rep, &Inconsistency{First: -1, Second: -1, Reason: "the STH archive is empty"}
	}
	rep.TreeSize, rep.RootHash = prev.size, prev.root

	// The newest STH the log serves must be archived: GET sth may be
	// newer than the last page read, so look it up by size.
	var latest tlogfmt.STHResponse
	if err := getJSON(ctx, opts.Client, base+tlogfmt.EndpointSTH, &latest); err != nil {
		return rep, err
	}
	sth, key, err := tlogfmt.VerifySTH(latest.STH, opts.Keys)
	if err != nil {
		return rep, &Inconsistency{First: -1, Second: -1, Reason: "GET sth: " + err.Error()}
	}
	cp, err := tlogfmt.VerifyCheckpoint(latest.Checkpoint, key)
	if err != nil || cp.TreeSize != sth.TreeSize || !bytes.Equal(cp.RootHash, sth.RootHash) {
		return rep, &Inconsistency{First: int64(sth.TreeSize), Second: -1, Reason: fmt.Sprintf("GET sth: the checkpoint does not verify or names another tree (%v)", err)}
	}
	switch {
	case sth.TreeSize == prev.size:
		if !bytes.Equal(sth.RootHash, prev.root) {
			return rep, &Inconsistency{First: int64(sth.TreeSize), Second: -1, Reason: "GET sth has another root than the archive"}
		}
	case sth.TreeSize < prev.size:
		// Behind the archive's newest: it must be an archived tree, else
		// GET sth shows its readers a tree (a fork, a rollback) that the
		// archive, and every consistency proof above, never saw.
		if err := archived(ctx, opts, base, sth); err != nil {
			return rep, err
		}
		// archived's answer is a second request the scan never checked:
		// a log can show it the head it shows GET sth's readers. What
		// binds that head to the audited history is a consistency proof
		// up to the newest tree the scan verified (no timestamp order:
		// a republished checkpoint of an older tree may be signed later).
		if err := proveConsistency(ctx, opts, base, checked{size: sth.TreeSize, root: sth.RootHash, ts: sth.Timestamp}, *prev, &rep); err != nil {
			return rep, err
		}
	default:
		if err := checkPair(ctx, opts, base, *prev, checked{size: sth.TreeSize, root: sth.RootHash, ts: sth.Timestamp}, &rep); err != nil {
			return rep, err
		}
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
		return bad("STH: %v", err)
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

// checkPair checks that b extends a, counting the proof it verifies in
// rep.
func checkPair(ctx context.Context, opts Options, base string, a, b checked, rep *Report) error {
	if b.size <= a.size {
		return &Inconsistency{First: int64(a.size), Second: int64(b.size), Reason: "tree sizes do not grow"}
	}
	if b.ts.Before(a.ts) {
		return &Inconsistency{First: int64(a.size), Second: int64(b.size),
			Reason: fmt.Sprintf("the larger tree's STH timestamp %s is before the smaller's %s", b.ts.Format(time.RFC3339), a.ts.Format(time.RFC3339))}
	}
	return proveConsistency(ctx, opts, base, a, b, rep)
}

// proveConsistency fetches and verifies the consistency proof from a to b
// (RFC 9162 §2.1.4; b.size > a.size) and counts it in rep (nothing when a
// is the empty tree, whose root it checks instead). A 4xx answer is the
// log refusing a proof between two trees it signed: an Inconsistency. Any
// other failure of GET consistency (5xx, a timeout, a malformed answer)
// falls back to a proof built from the log's hash tiles (tileProof); the
// audit could not run only when those cannot be read either.
func proveConsistency(ctx context.Context, opts Options, base string, a, b checked, rep *Report) error {
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
	path, err := endpointProof(ctx, opts, base, a, b)
	var inc *Inconsistency
	switch {
	case errors.As(err, &inc):
		return err
	case err != nil && ctx.Err() != nil:
		return err
	case err != nil:
		tiles, terr := tileProof(ctx, opts, a, b)
		if terr != nil {
			return fmt.Errorf("%w (and the log's hash tiles could not be read to build the proof: %v)", err, terr)
		}
		if verr := proof.VerifyConsistency(rfc6962.DefaultHasher, a.size, b.size, tiles, a.root, b.root); verr != nil {
			return bad("GET consistency failed (%v), and the proof built from the log's hash tiles does not verify: %v", err, verr)
		}
		if rep.EndpointError == "" {
			rep.EndpointError = err.Error()
		}
		rep.TileProofs++
		rep.ConsistencyProofs++
		return nil
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, a.size, b.size, path, a.root, b.root); err != nil {
		return bad("consistency proof does not verify: %v", err)
	}
	rep.ConsistencyProofs++
	return nil
}

// endpointProof asks GET consistency for the proof from a to b. Errors: an
// *Inconsistency when the log refuses it (4xx) or answers a proof for
// other sizes; any other error when the answer is not a proof.
func endpointProof(ctx context.Context, opts Options, base string, a, b checked) ([][]byte, error) {
	bad := func(format string, args ...any) error {
		return &Inconsistency{First: int64(a.size), Second: int64(b.size), Reason: fmt.Sprintf(format, args...)}
	}
	u := fmt.Sprintf("%s%s?first=%d&second=%d", base, tlogfmt.EndpointConsistency, a.size, b.size)
	var cr tlogfmt.ConsistencyResponse
	if err := getJSON(ctx, opts.Client, u, &cr); err != nil {
		var he *httpError
		if errors.As(err, &he) && he.status < 500 {
			return nil, bad("the log serves no consistency proof: %v", err)
		}
		return nil, err
	}
	if cr.First != a.size || cr.Second != b.size {
		return nil, bad("the log answered a proof for sizes %d and %d", cr.First, cr.Second)
	}
	path := make([][]byte, len(cr.ConsistencyProof))
	for i, s := range cr.ConsistencyProof {
		h, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(h) != tlogfmt.HashSize {
			return nil, fmt.Errorf("GET %s: consistency proof hash %d is malformed", u, i)
		}
		path[i] = h
	}
	return path, nil
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
func tileProof(ctx context.Context, opts Options, a, b checked) ([][]byte, error) {
	root, err := url.Parse(strings.TrimSuffix(opts.BaseURL, "/") + "/")
	if err != nil {
		return nil, err
	}
	bounded := *opts.Client
	bounded.Transport = limitedBodies{next: opts.Client.Transport, limit: maxTileBytes}
	f, err := client.NewHTTPFetcher(root, &bounded)
	if err != nil {
		return nil, err
	}
	pb, err := client.NewProofBuilder(ctx, b.size, f.ReadTile)
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
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &httpError{url: u, status: resp.StatusCode, body: strings.TrimSpace(string(body[:min(len(body), 300)]))}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}
