package tlogaudit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/tessera/api"
	"github.com/transparency-dev/tessera/client"

	"github.com/keysvc/keysvc/internal/sameorigin"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

// ScanOptions configures Scan.
type ScanOptions struct {
	// BaseURL is the log operator's base URL: GET sth under
	// BaseURL + tlogfmt.PathPrefix, the C2SP tlog-tiles entry bundles under
	// BaseURL + "/tile/entries/".
	BaseURL string
	// Keys are the trusted log keys (Ed25519, configured out of band,
	// never taken from the log under scan). The log's name (log_id, its
	// checkpoint origin) is read from its STH, which must verify under
	// one of them.
	Keys []ed25519.PublicKey
	// ArtifactTypes are the leaves whose artifact hashes Scan keeps (every
	// leaf is read and hashed into the tree either way).
	ArtifactTypes []string
	// WitnessVKeys and WitnessesRequired: when WitnessesRequired > 0, the
	// STH's checkpoint (GET sth) must carry that many valid cosignatures
	// from these witness keys (C2SP tlog-cosignature), so that a tree the
	// log signed alone — a branch that leaves entries out — is refused.
	WitnessVKeys      []string
	WitnessesRequired int
	// MaxAge, when > 0, bounds how old the scanned tree may be, measured
	// from Scanned.CurrentAt: with WitnessesRequired, the K-th newest
	// trusted cosignature. A Tessera log asks its witnesses to cosign its
	// checkpoint again every 10 minutes even when idle, so a witnessed
	// live tree is minutes old; an older one is a log, or a path, serving
	// a tree from before markers written since, and Scan fails with
	// ErrStaleTree. Without witnesses it is the STH's time, which a keysvc
	// log does not move while idle (the archive keeps the first STH of a
	// tree size): set MaxAge then only for a log that keeps growing. Too
	// few cosignatures dated within MaxClockSkew of Now, or an STH dated
	// further ahead, fail too. Zero: not checked.
	MaxAge time.Duration
	// Now is the clock MaxAge is measured against (default time.Now).
	Now func() time.Time
	// Client is the HTTP client (default: one with a 30 s timeout per
	// request; redirects only within the log's origin).
	Client *http.Client
	// Workers is how many entry bundles are fetched at once (default 4).
	Workers uint
}

// Scanned is a log read in full against one of its Signed Tree Heads:
// every entry of the tree, hashed into an RFC 6962 tree whose root is the
// STH's. What it holds is therefore what the log committed to in that
// tree — including what it does not hold.
type Scanned struct {
	// LogID, TreeSize, RootHash and Timestamp are the STH's (verified under
	// ScanOptions.Keys).
	LogID     string
	TreeSize  uint64
	RootHash  []byte
	Timestamp time.Time
	// Kept counts the leaves of ScanOptions.ArtifactTypes.
	Kept int
	// Cosignatures are the trusted witnesses' cosignatures on the STH's
	// checkpoint (none unless ScanOptions.WitnessVKeys is set).
	Cosignatures []tlogfmt.Cosignature
	// CurrentAt is when the tree is known to have been the log's newest:
	// its ScanOptions.WitnessesRequired-th newest trusted cosignature (left
	// out: any dated more than MaxClockSkew ahead of the scan), or without
	// witnesses the STH's time, which a keysvc log keeps from when the tree
	// size was first signed (the earliest time anchor) while the log is
	// idle.
	CurrentAt time.Time
	have      map[scannedLeaf]struct{}
}

type scannedLeaf struct {
	artifactType string
	hash         [32]byte
}

// Has reports whether the scanned tree holds a leaf of artifactType (one of
// ScanOptions.ArtifactTypes) whose artifact_hash is "sha256:" + hex(hash).
// False is a proof of absence as of the tree: the log signed a tree in
// which no such leaf is.
func (s *Scanned) Has(artifactType string, hash [32]byte) bool {
	_, ok := s.have[scannedLeaf{artifactType, hash}]
	return ok
}

// ErrStaleTree is the error (wrapped) of a scan or an audit whose newest
// tree is older than ScanOptions.MaxAge (Options.MaxAge), or dated ahead
// of the clock by more than MaxClockSkew.
var ErrStaleTree = errors.New("tlogaudit: the tree is stale")

// MaxClockSkew is how far ahead of the scanner's clock a tree's time may
// be under ScanOptions.MaxAge.
const MaxClockSkew = 5 * time.Minute

// maxBundleBytes bounds one entry bundle: 256 entries of at most 64 KiB
// each (C2SP tlog-tiles' two-byte length prefix).
const maxBundleBytes = 256 * (2 + 65535)

// Scan reads the whole log at opts.BaseURL as of its newest Signed Tree
// Head (GET sth, verified under opts.Keys, its checkpoint naming the same
// tree): every entry bundle of the tree (C2SP tlog-tiles, fetched with
// github.com/transparency-dev/tessera/client), each entry a v0.1 leaf in
// its RFC 8785 form (tlogfmt.ParseLeaf), hashed (RFC 6962 §2.1) into a
// compact range (github.com/transparency-dev/merkle) whose root must be
// the STH's. With opts.WitnessesRequired, the checkpoint must carry that
// many cosignatures by opts.WitnessVKeys first. Errors: *Inconsistency
// when the log serves something its signed tree does not hold (a
// malformed leaf, a missing or extra entry, a root other than the STH's)
// or a tree too few trusted witnesses cosigned; ErrStaleTree (wrapped)
// when opts.MaxAge is set and the tree is older (checked before any entry
// is read); any other error when the scan could not run.
// Cost: one request per 256 entries and every entry's bytes, so for a
// large log this is a monitor's job, not a per-request check.
func Scan(ctx context.Context, opts ScanOptions) (*Scanned, error) {
	if len(opts.Keys) == 0 {
		return nil, errors.New("tlogaudit: no log key")
	}
	if opts.WitnessesRequired < 0 || opts.WitnessesRequired > len(opts.WitnessVKeys) {
		return nil, fmt.Errorf("tlogaudit: WitnessesRequired %d: want 0 to the %d WitnessVKeys", opts.WitnessesRequired, len(opts.WitnessVKeys))
	}
	if opts.Client == nil {
		opts.Client = sameorigin.Client(30 * time.Second)
	}
	if opts.Workers == 0 {
		opts.Workers = 4
	}
	keep := map[string]bool{}
	for _, t := range opts.ArtifactTypes {
		keep[t] = true
	}
	base := strings.TrimSuffix(opts.BaseURL, "/")
	var latest tlogfmt.STHResponse
	if err := getJSON(ctx, opts.Client, base+tlogfmt.PathPrefix+tlogfmt.EndpointSTH, &latest); err != nil {
		return nil, err
	}
	keys, err := namedKeys(latest.STH, opts.Keys)
	if err != nil {
		return nil, &Inconsistency{First: -1, Second: -1, Reason: "GET sth: " + err.Error()}
	}
	sth, key, err := tlogfmt.VerifySTH(latest.STH, keys)
	if err != nil {
		return nil, &Inconsistency{First: -1, Second: -1, Reason: "GET sth: " + err.Error()}
	}
	bad := func(format string, args ...any) (*Scanned, error) {
		return nil, &Inconsistency{First: int64(sth.TreeSize), Second: -1, Reason: fmt.Sprintf(format, args...)}
	}
	if cp, err := tlogfmt.VerifyCheckpoint(latest.Checkpoint, key); err != nil || cp.TreeSize != sth.TreeSize || !bytes.Equal(cp.RootHash, sth.RootHash) {
		return bad("GET sth: the checkpoint does not verify or names another tree (%v)", err)
	}
	var cosigs []tlogfmt.Cosignature
	if opts.WitnessesRequired > 0 {
		cosigs, err = tlogfmt.VerifyCosignatures(latest.Checkpoint, opts.WitnessVKeys)
		if errors.Is(err, tlogfmt.ErrWitnessKey) {
			return nil, err // the trusted list is wrong, not the log
		}
		if err != nil || len(cosigs) < opts.WitnessesRequired {
			return bad("the checkpoint carries %d of the %d witness cosignatures required", len(cosigs), opts.WitnessesRequired)
		}
	}
	current, err := checkTreeAge(sth, cosigs, opts.WitnessesRequired, opts.MaxAge, clock(opts.Now))
	if err != nil {
		return nil, err
	}
	// Stop the bundle fetches still in flight when the scan ends early.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f, err := newFetcher(base, opts.Client, maxBundleBytes)
	if err != nil {
		return nil, err
	}
	s := &Scanned{LogID: sth.LogID, TreeSize: sth.TreeSize, RootHash: sth.RootHash, Timestamp: sth.Timestamp, Cosignatures: cosigs, CurrentAt: current, have: map[scannedLeaf]struct{}{}}
	tree := (&compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}).NewEmptyRange(0)
	size := func(context.Context) (uint64, error) { return sth.TreeSize, nil }
	bundles := client.EntryBundles(ctx, opts.Workers, size, f.ReadEntryBundle, 0, sth.TreeSize)
	for e, err := range client.Entries(bundles, unbundle) {
		if err != nil {
			return nil, fmt.Errorf("tlogaudit: scan %s: %w", base, err)
		}
		if e.Index != tree.End() {
			return bad("entry %d came where entry %d belongs", e.Index, tree.End())
		}
		l, err := tlogfmt.ParseLeaf(e.Entry)
		if err != nil {
			return bad("entry %d is not a v0.1 leaf: %v", e.Index, err)
		}
		if err := tree.Append(rfc6962.DefaultHasher.HashLeaf(e.Entry), nil); err != nil {
			return nil, err
		}
		if keep[l.ArtifactType] {
			var h [32]byte
			if _, err := hex.Decode(h[:], []byte(strings.TrimPrefix(l.ArtifactHash, "sha256:"))); err != nil {
				return bad("entry %d: artifact_hash: %v", e.Index, err)
			}
			s.have[scannedLeaf{l.ArtifactType, h}] = struct{}{}
			s.Kept++
		}
	}
	if tree.End() != sth.TreeSize {
		return bad("the entry bundles hold %d entries", tree.End())
	}
	got := rfc6962.DefaultHasher.EmptyRoot()
	if sth.TreeSize > 0 {
		if got, err = tree.GetRootHash(nil); err != nil {
			return nil, err
		}
	}
	if !bytes.Equal(got, sth.RootHash) {
		return bad("the entries hash to root %x, the STH names %x", got, sth.RootHash)
	}
	return s, nil
}

// currentAt is when the tree of sth is known to have been its log's
// newest at the latest: with required > 0, the required-th newest of the
// trusted cosignatures (a witness cosigns only the newest tree it has
// seen, and K witnesses must vouch for that as K must cosign the tree),
// leaving out any dated more than MaxClockSkew after t (a witness whose
// clock runs fast does not make a tree look fresh); else the STH's own
// time. ok is false when fewer than required cosignatures remain, or the
// STH is dated that far ahead; what says which time it is.
func currentAt(sth tlogfmt.STH, cosigs []tlogfmt.Cosignature, required int, t time.Time) (at time.Time, what string, ok bool) {
	if required == 0 {
		return sth.Timestamp, "signed", !sth.Timestamp.After(t.Add(MaxClockSkew))
	}
	var ts []time.Time
	for _, c := range cosigs {
		if !c.Timestamp.After(t.Add(MaxClockSkew)) {
			ts = append(ts, c.Timestamp)
		}
	}
	what = "last cosigned by a trusted witness"
	if required > 1 {
		what = fmt.Sprintf("last cosigned by %d trusted witnesses", required)
	}
	at, ok = kthNewest(ts, required)
	return at, what, ok
}

// kthNewest returns the k-th newest of ts (k ≥ 1; ts is sorted in place),
// or false when ts holds fewer than k times.
func kthNewest(ts []time.Time, k int) (time.Time, bool) {
	if len(ts) < k {
		return time.Time{}, false
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return b.Compare(a) })
	return ts[k-1], true
}

// clock is now, or time.Now when now is nil (ScanOptions.Now, Options.Now).
func clock(now func() time.Time) time.Time {
	if now == nil {
		return time.Now()
	}
	return now()
}

// checkTreeAge returns currentAt of the tree of sth as of t and, when
// maxAge > 0, holds the tree to it: ErrStaleTree when it is older, or
// when currentAt found no time to trust (too few cosignatures, or an STH
// dated ahead of t). maxAge 0 checks nothing.
//
// The time returned is never more than MaxClockSkew after t, the skew
// currentAt allows: a clock running further ahead must not move the NOT
// LOGGED cutoff (cmd/keysvc printNotLogged) forward. With maxAge 0 and no
// time to trust, it is the required-th newest of the cosignature times (or
// the STH's), each taken as t + MaxClockSkew at the latest, so that a
// witness or log whose clock runs ahead makes that cutoff stricter, never
// absent.
func checkTreeAge(sth tlogfmt.STH, cosigs []tlogfmt.Cosignature, required int, maxAge time.Duration, t time.Time) (time.Time, error) {
	at, what, ok := currentAt(sth, cosigs, required, t)
	if maxAge <= 0 {
		if !ok {
			latest := t.Add(MaxClockSkew)
			at = earliest(sth.Timestamp, latest)
			if required > 0 {
				ts := make([]time.Time, 0, len(cosigs))
				for _, c := range cosigs {
					ts = append(ts, earliest(c.Timestamp, latest))
				}
				if kth, ok := kthNewest(ts, required); ok {
					at = kth
				}
			}
		}
		return at, nil
	}
	switch {
	case !ok && required > 0:
		return at, fmt.Errorf("%w: log %s, tree size %d: fewer than %d of its trusted cosignatures are dated before %s (this clock, %s, plus %s): a witness's clock, or this one, is wrong",
			ErrStaleTree, sth.LogID, sth.TreeSize, required, t.Add(MaxClockSkew).UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339), MaxClockSkew)
	case !ok:
		return at, fmt.Errorf("%w: log %s, tree size %d, was signed at %s, %s ahead of this clock (%s)",
			ErrStaleTree, sth.LogID, sth.TreeSize, at.UTC().Format(time.RFC3339), at.Sub(t).Round(time.Second), t.UTC().Format(time.RFC3339))
	case t.Sub(at) > maxAge:
		why := "the log (or whoever answers for it) serves a tree from before anything written since"
		if required > 0 {
			why += ", or its witnesses stopped cosigning"
		}
		return at, fmt.Errorf("%w: log %s, tree size %d, was %s at %s, %s ago, over the %s allowed: %s",
			ErrStaleTree, sth.LogID, sth.TreeSize, what, at.UTC().Format(time.RFC3339), t.Sub(at).Round(time.Second), maxAge, why)
	}
	return at, nil
}

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if a.After(b) {
		return b
	}
	return a
}

// namedKeys names keys for the log_id an STH claims (its payload, read
// unverified: VerifySTH then checks the STH under the named keys, so a
// wrong name fails there).
func namedKeys(sthJWS string, keys []ed25519.PublicKey) ([]tlogfmt.LogKey, error) {
	parts := strings.Split(sthJWS, ".")
	if len(parts) != 3 {
		return nil, errors.New("the STH is not a compact JWS")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, errors.New("the STH payload is not base64url")
	}
	var p struct {
		LogID string `json:"log_id"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("the STH payload: %w", err)
	}
	out := make([]tlogfmt.LogKey, 0, len(keys))
	for _, k := range keys {
		lk, err := tlogfmt.NewLogKey(p.LogID, k)
		if err != nil {
			return nil, err
		}
		out = append(out, lk)
	}
	return out, nil
}

// unbundle splits a C2SP tlog-tiles entry bundle into its entries.
func unbundle(b []byte) ([][]byte, error) {
	var eb api.EntryBundle
	if err := eb.UnmarshalText(b); err != nil {
		return nil, err
	}
	return eb.Entries, nil
}

// newFetcher returns a Tessera fetcher of the C2SP tlog-tiles resources
// (tiles, entry bundles) of the log at base (its root URL, no trailing
// slash) through c, every 200 body cut at limit bytes (limitedBodies).
func newFetcher(base string, c *http.Client, limit int64) (*client.HTTPFetcher, error) {
	root, err := url.Parse(base + "/")
	if err != nil {
		return nil, err
	}
	bounded := *c
	bounded.Transport = limitedBodies{next: c.Transport, limit: limit}
	return client.NewHTTPFetcher(root, &bounded)
}

// limitedBodies is an http.RoundTripper that cuts every response body
// after limit bytes (with an error), so a log cannot make a scan read
// without end.
type limitedBodies struct {
	next  http.RoundTripper
	limit int64
}

func (t limitedBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		// Tessera's HTTPFetcher reads only a 200's body and never closes
		// another's (a 404 for a partial tile or bundle its log has
		// cleaned up is routine): read a little of it and close it here,
		// so that the connection goes back to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		resp.Body = http.NoBody
		return resp, nil
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.limit, limit: t.limit}
	return resp, nil
}

type limitedBody struct {
	rc          io.ReadCloser
	left, limit int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	// One byte past the limit may be read: a body of exactly limit bytes
	// ends with EOF, a longer one with this error.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, fmt.Errorf("tlogaudit: response larger than %d bytes (the most an entry bundle or hash tile can be)", b.limit)
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
