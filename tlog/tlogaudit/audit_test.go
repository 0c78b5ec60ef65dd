package tlogaudit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	f_log "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
	"golang.org/x/mod/sumdb/note"

	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
	"github.com/keysvc/keysvc/tlog/tlogtest"
)

// A hostile log, in process: fixed answers for GET sth, the STH archive
// (honouring after= and limit=), consistency proofs of its tree and one
// entry bundle. Its key is fixed, so every signature is exact.

const hostileOrigin = "hostile.example/log"

var hostilePriv = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))

func hostileKey(t *testing.T) tlogfmt.LogKey {
	t.Helper()
	k, err := tlogfmt.NewLogKey(hostileOrigin, hostilePriv.Public())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// leaf returns the i-th v0.1 leaf of a status event.
func leaf(i int) []byte {
	h := sha256.Sum256(fmt.Append(nil, "event ", i))
	b, err := tlogfmt.Leaf{ArtifactHash: fmt.Sprintf("sha256:%x", h), ArtifactType: tlogfmt.ArtifactStatusEvent, LeafVersion: tlogfmt.LeafVersion, LoggedAt: "2026-12-01T00:00:00Z"}.Bytes()
	if err != nil {
		panic(err)
	}
	return b
}

// signedHead returns the STH and checkpoint of a tree of size with root,
// cosigned by cos.
func signedHead(t *testing.T, size uint64, root []byte, ts time.Time, cos ...note.Signer) tlogfmt.ArchivedSTH {
	t.Helper()
	return signedHeadBy(t, hostilePriv, size, root, ts, cos...)
}

// signedHeadBy is signedHead under the log key priv (origin hostileOrigin).
func signedHeadBy(t *testing.T, priv ed25519.PrivateKey, size uint64, root []byte, ts time.Time, cos ...note.Signer) tlogfmt.ArchivedSTH {
	t.Helper()
	lk, err := tlogfmt.NewLogKey(hostileOrigin, priv.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	js, err := signer.NewJWSSigner(lk.KID, signer.AlgEdDSA, priv)
	if err != nil {
		t.Fatal(err)
	}
	sth, err := tlogfmt.SignSTH(js, tlogfmt.STH{LogID: hostileOrigin, TreeSize: size, RootHash: root, Timestamp: ts})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := tlogfmt.NewNoteSigner(lk, priv)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := note.Sign(&note.Note{Text: string(f_log.Checkpoint{Origin: hostileOrigin, Size: size, Hash: root}.Marshal())}, append([]note.Signer{ns}, cos...)...)
	if err != nil {
		t.Fatal(err)
	}
	return tlogfmt.ArchivedSTH{TreeSize: size, STH: sth, Checkpoint: string(cp)}
}

type hostileLog struct {
	current  tlogfmt.ArchivedSTH   // GET sth
	archive  []tlogfmt.ArchivedSTH // oldest first
	tree     *testonly.Tree        // consistency proofs; its leaves, the one bundle
	leaves   [][]byte
	requests atomic.Int64
	// firstSTH, when set, answers the first GET sth after sthCalls was
	// reset (the one an audit reads before the archive): a log that
	// switches heads mid-audit, so that the GET sth read at the end is
	// the one under test.
	firstSTH *tlogfmt.ArchivedSTH
	sthCalls atomic.Int64
}

func (h *hostileLog) start(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		q := r.URL.Query()
		switch r.URL.Path {
		case tlogfmt.PathPrefix + tlogfmt.EndpointSTH:
			cur := h.current
			if h.sthCalls.Add(1) == 1 && h.firstSTH != nil {
				cur = *h.firstSTH
			}
			_ = json.NewEncoder(w).Encode(tlogfmt.STHResponse{STH: cur.STH, Checkpoint: cur.Checkpoint})
		case tlogfmt.PathPrefix + tlogfmt.EndpointArchive:
			after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
			if !q.Has("after") {
				after = -1
			}
			limit, _ := strconv.Atoi(q.Get("limit"))
			var page tlogfmt.ArchiveResponse
			for _, a := range h.archive {
				if int64(a.TreeSize) > after && len(page.STHs) < limit {
					page.STHs = append(page.STHs, a)
				}
			}
			_ = json.NewEncoder(w).Encode(page)
		case tlogfmt.PathPrefix + tlogfmt.EndpointConsistency:
			serveConsistency(w, r, h.tree)
		default:
			if strings.HasPrefix(r.URL.Path, "/tile/entries/") {
				var b []byte
				for _, e := range h.leaves {
					b = append(binary.BigEndian.AppendUint16(b, uint16(len(e))), e...)
				}
				_, _ = w.Write(b)
				return
			}
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func newHostileLog(leaves ...[]byte) *hostileLog {
	h := &hostileLog{tree: testonly.New(rfc6962.DefaultHasher), leaves: leaves}
	h.tree.AppendData(leaves...)
	return h
}

// serveConsistency answers GET consistency?first=&second= from tree.
func serveConsistency(w http.ResponseWriter, r *http.Request, tree *testonly.Tree) {
	q := r.URL.Query()
	first, _ := strconv.ParseUint(q.Get("first"), 10, 64)
	second, _ := strconv.ParseUint(q.Get("second"), 10, 64)
	p, err := tree.ConsistencyProof(first, second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cr := tlogfmt.ConsistencyResponse{LogID: hostileOrigin, First: first, Second: second}
	for _, x := range p {
		cr.ConsistencyProof = append(cr.ConsistencyProof, base64.RawURLEncoding.EncodeToString(x))
	}
	_ = json.NewEncoder(w).Encode(cr)
}

// TestAuditTreeHeadBehindTheArchive: a GET sth behind the archive's
// newest tree must be one the archive holds (ADR 0012: the current STH
// extends the archive). A lagging copy of an archived head passes; a head
// of that size with another root — a fork shown to GET sth's readers
// while the archive and its consistency proofs look clean — does not.
// The head under test is the one read after the archive (the one before
// it is the honest newest; TestAuditFirstTreeHeadIsChecked covers it).
func TestAuditTreeHeadBehindTheArchive(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	h := newHostileLog(leaf(0), leaf(1), leaf(2))
	two, three := signedHead(t, 2, h.tree.HashAt(2), t0), signedHead(t, 3, h.tree.HashAt(3), t0.Add(time.Minute))
	h.archive = []tlogfmt.ArchivedSTH{two, three}
	h.firstSTH = &three
	u := h.start(t)
	opts := Options{BaseURL: u, Keys: []tlogfmt.LogKey{hostileKey(t)}}

	h.current = two
	rep, err := Audit(context.Background(), opts)
	if err != nil || rep.STHs != 2 || rep.TreeSize != 3 || rep.ConsistencyProofs != 2 {
		t.Fatalf("GET sth an archived head behind the newest: %+v %v", rep, err)
	}
	fork := testonly.New(rfc6962.DefaultHasher)
	fork.AppendData(leaf(0), leaf(99))
	h.current = signedHead(t, 2, fork.Hash(), t0.Add(2*time.Minute))
	h.sthCalls.Store(0)
	_, err = Audit(context.Background(), opts)
	var inc *Inconsistency
	if !errors.As(err, &inc) || !strings.Contains(err.Error(), "GET sth names tree size 2, behind the archive's newest, and the archive holds no such tree with that root") {
		t.Fatalf("GET sth a forked head of size 2: %v, want *Inconsistency", err)
	}
	h.current = signedHead(t, 1, h.tree.HashAt(1), t0.Add(2*time.Minute)) // a size the archive never held
	h.sthCalls.Store(0)
	if _, err := Audit(context.Background(), opts); !errors.As(err, &inc) {
		t.Fatalf("GET sth a head of a size not archived: %v, want *Inconsistency", err)
	}
}

// TestAuditTreeHeadBehindTheArchiveIsProved: archived's look-up is a
// second answer the scan never checked, so a log can show it the forked
// head that GET sth serves. The head must also be proved consistent with
// the newest tree the scan verified: a fork of size 2 fails whether the
// scanned archive never held size 2 or held it with the honest root. (From
// an attack review, session 37.) The head under test is the one read after
// the archive; the one before it is the honest newest, tree 3.
func TestAuditTreeHeadBehindTheArchiveIsProved(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	honest := testonly.New(rfc6962.DefaultHasher)
	honest.AppendData(leaf(0), leaf(1), leaf(2))
	one, two, three := signedHead(t, 1, honest.HashAt(1), t0), signedHead(t, 2, honest.HashAt(2), t0.Add(20*time.Second)), signedHead(t, 3, honest.HashAt(3), t0.Add(time.Minute))
	fork := testonly.New(rfc6962.DefaultHasher)
	fork.AppendData(leaf(0), leaf(99)) // rewrites entry 1
	forked := signedHead(t, 2, fork.Hash(), t0.Add(30*time.Second))
	for name, scanned := range map[string][]tlogfmt.ArchivedSTH{
		"size 2 never in the scanned archive":              {one, three},
		"size 2 scanned with the honest root, then forked": {one, two, three},
	} {
		t.Run(name, func(t *testing.T) {
			var sths atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				q := r.URL.Query()
				switch r.URL.Path {
				case tlogfmt.PathPrefix + tlogfmt.EndpointSTH:
					if sths.Add(1) == 1 {
						_ = json.NewEncoder(w).Encode(tlogfmt.STHResponse{STH: three.STH, Checkpoint: three.Checkpoint})
						return
					}
					_ = json.NewEncoder(w).Encode(tlogfmt.STHResponse{STH: forked.STH, Checkpoint: forked.Checkpoint})
				case tlogfmt.PathPrefix + tlogfmt.EndpointArchive:
					if q.Get("limit") == "1" { // archived's look-up
						_ = json.NewEncoder(w).Encode(tlogfmt.ArchiveResponse{STHs: []tlogfmt.ArchivedSTH{forked}})
						return
					}
					_ = json.NewEncoder(w).Encode(tlogfmt.ArchiveResponse{STHs: scanned})
				case tlogfmt.PathPrefix + tlogfmt.EndpointConsistency:
					serveConsistency(w, r, honest)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			rep, err := Audit(context.Background(), Options{BaseURL: srv.URL, Keys: []tlogfmt.LogKey{hostileKey(t)}})
			var inc *Inconsistency
			if !errors.As(err, &inc) || inc.First != 2 || inc.Second != 3 || !strings.Contains(err.Error(), "consistency proof does not verify") {
				t.Fatalf("Audit of a log whose GET sth is a forked size-2 head: %+v, %v; want the consistency proof from 2 to 3 refused", rep, err)
			}
		})
	}
}

// TestAuditArchivePagingMustAdvance: an archive page that goes on must
// hold STHs and move past them; one that answers an empty page with a
// "next" forever is an inconsistency found at once, not a monitor that
// never reports.
func TestAuditArchivePagingMustAdvance(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != tlogfmt.PathPrefix+tlogfmt.EndpointArchive {
			http.NotFound(w, r) // GET sth, read first, sorts nothing then
			return
		}
		n.Add(1)
		next := uint64(0)
		_ = json.NewEncoder(w).Encode(tlogfmt.ArchiveResponse{Next: &next})
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Audit(ctx, Options{BaseURL: srv.URL, Keys: []tlogfmt.LogKey{hostileKey(t)}})
	var inc *Inconsistency
	if !errors.As(err, &inc) || !strings.Contains(err.Error(), "the STH archive's paging does not advance") || n.Load() != 1 {
		t.Fatalf("Audit of an endless archive: %v after %d archive pages", err, n.Load())
	}
}

// TestWitnessQuorumIsPublicKeys: Scan and Audit count witnesses by public
// key. A cosignature/v1 line does not sign the witness's name, so a log
// (or whoever answers for it) can copy the one cosignature it has under a
// second name; with K = 2 and only one witness's key trusted, that is 1
// of 2. A trusted list that names one public key twice, under one name or
// two, is the caller's mistake (tlogfmt.ErrWitnessKey, "could not run"),
// not the log's inconsistency.
func TestWitnessQuorumIsPublicKeys(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	w := tlogtest.NewCosigner("witness.example/a", 9).At(now.Add(-time.Minute))
	alias := w.As("witness.example/a-alias")
	other := tlogtest.NewCosigner("witness.example/b", 7).At(now.Add(-time.Minute))
	h := newHostileLog(leaf(0), leaf(1))
	head := signedHead(t, 2, h.tree.Hash(), now.Add(-time.Minute), w, alias) // w's line, and a copy under the alias
	h.current, h.archive = head, []tlogfmt.ArchivedSTH{head}
	u := h.start(t)
	scan := func(vkeys ...string) error {
		_, err := Scan(context.Background(), ScanOptions{BaseURL: u, Keys: []ed25519.PublicKey{hostilePriv.Public().(ed25519.PublicKey)},
			ArtifactTypes: []string{tlogfmt.ArtifactStatusEvent}, WitnessVKeys: vkeys, WitnessesRequired: 2, MaxAge: time.Hour})
		return err
	}
	audit := func(vkeys ...string) error {
		_, err := Audit(context.Background(), Options{BaseURL: u, Keys: []tlogfmt.LogKey{hostileKey(t)}, WitnessVKeys: vkeys, WitnessesRequired: 2, MaxAge: time.Hour})
		return err
	}
	for name, check := range map[string]func(...string) error{"Scan": scan, "Audit": audit} {
		var inc *Inconsistency
		if err := check(w.VKey(), other.VKey()); !errors.As(err, &inc) || !strings.Contains(err.Error(), "carries 1 of the 2 witness cosignatures required") {
			t.Errorf("%s, one witness's line under two names, K=2: %v, want 1 of 2", name, err)
		}
		for what, vkeys := range map[string][]string{
			"one public key under two names": {w.VKey(), alias.VKey()},
			"one key listed twice":           {w.VKey(), w.VKey()},
			"a malformed key":                {w.VKey(), "not-a-vkey"},
		} {
			if err := check(vkeys...); !errors.Is(err, tlogfmt.ErrWitnessKey) || errors.As(err, &inc) {
				t.Errorf("%s, %s: %v, want tlogfmt.ErrWitnessKey", name, what, err)
			}
		}
	}
	// Two witnesses, two cosignatures: 2 of 2.
	h.current = signedHead(t, 2, h.tree.Hash(), now.Add(-time.Minute), w, other)
	h.archive = []tlogfmt.ArchivedSTH{h.current}
	if err := scan(w.VKey(), other.VKey()); err != nil {
		t.Errorf("Scan, two witnesses: %v", err)
	}
	if err := audit(w.VKey(), other.VKey()); err != nil {
		t.Errorf("Audit, two witnesses: %v", err)
	}
}

// TestWitnessesRequiredRange: Audit and Scan refuse a WitnessesRequired
// below 0 or above the trusted witness keys before any request (a
// negative K indexed the cosignature times, and panicked).
func TestWitnessesRequiredRange(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request %s: the options should have been refused first", r.URL)
	}))
	defer srv.Close()
	for _, k := range []int{-1, 1} {
		_, err := Audit(context.Background(), Options{BaseURL: srv.URL, Keys: []tlogfmt.LogKey{hostileKey(t)}, WitnessesRequired: k})
		want := fmt.Sprintf("tlogaudit: WitnessesRequired %d: want 0 to the 0 WitnessVKeys", k)
		if err == nil || err.Error() != want {
			t.Errorf("Audit with WitnessesRequired %d: %v, want %q", k, err, want)
		}
		_, err = Scan(context.Background(), ScanOptions{BaseURL: srv.URL, Keys: []ed25519.PublicKey{hostileKey(t).Public}, WitnessesRequired: k})
		if err == nil || err.Error() != want {
			t.Errorf("Scan with WitnessesRequired %d: %v, want %q", k, err, want)
		}
	}
}

// TestAuditConsistencyFromTiles: when GET consistency fails (a 5xx, or an
// answer that is not a proof), the proof is built from the log's hash
// tiles and verified against both signed roots. A log that signed a
// forked tree cannot hide it by failing exactly that proof: before ADR
// 0045 the audit gave up ("could not run", exit 2) and a monitor read an
// outage where the log had forked.
func TestAuditConsistencyFromTiles(t *testing.T) {
	failing := map[string]http.HandlerFunc{
		"503": down503,
		"not a proof": func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			fmt.Fprintf(w, `{"log_id":%q,"first":%s,"second":%s,"consistency_proof":["@@"]}`, hostileOrigin, q.Get("first"), q.Get("second"))
		},
	}
	for name, fail := range failing {
		t.Run("honest, consistency "+name, func(t *testing.T) {
			l := newFallbackLog(t, 3, []uint64{1, 2, 3})
			l.consistency, l.tile = fail, l.honestTiles
			rep, err := Audit(context.Background(), Options{BaseURL: l.start(t), Keys: []tlogfmt.LogKey{hostileKey(t)}})
			if err != nil || rep.STHs != 3 || rep.ConsistencyProofs != 2 || rep.TileProofs != 2 || rep.TreeSize != 3 {
				t.Fatalf("Audit: %+v %v; want 3 STHs, both proofs built from tiles", rep, err)
			}
			want := map[string]string{"503": "HTTP 503: consistency endpoint down", "not a proof": "consistency proof hash 0 is malformed"}[name]
			if !strings.Contains(rep.EndpointError, want) {
				t.Fatalf("EndpointError %q, want it to name %q", rep.EndpointError, want)
			}
		})
	}

	// The log signed tree 2 over a rewritten entry 1 and tree 3 over the
	// honest entries, and answers 503 for every proof: the one from 1 to 2
	// shows the fork.
	fork := testonly.New(rfc6962.DefaultHasher)
	fork.AppendData(leaf(0), leaf(99))
	l := newFallbackLog(t, 3, []uint64{1, 2, 3})
	l.archive[1] = signedHead(t, 2, fork.Hash(), time.Date(2026, 12, 6, 1, 0, 1, 0, time.UTC)) // newFallbackLog's time for it
	l.consistency, l.tile = down503, l.honestTiles
	u := l.start(t)
	_, err := Audit(context.Background(), Options{BaseURL: u, Keys: []tlogfmt.LogKey{hostileKey(t)}})
	var inc *Inconsistency
	if !errors.As(err, &inc) || inc.First != 1 || inc.Second != 2 ||
		!strings.Contains(err.Error(), "GET consistency failed (GET "+u+tlogfmt.PathPrefix+"consistency?first=1&second=2: HTTP 503: consistency endpoint down), and the proof built from the log's hash tiles does not verify") {
		t.Fatalf("Audit of a forked log failing the proof: %v; want an Inconsistency between trees 1 and 2 from the tiles", err)
	}

	// No tiles either: the audit could not run, and says both.
	l = newFallbackLog(t, 3, []uint64{1, 2, 3})
	l.consistency, l.tile = down503, func(w http.ResponseWriter, r *http.Request, _ uint64) { http.NotFound(w, r) }
	_, err = Audit(context.Background(), Options{BaseURL: l.start(t), Keys: []tlogfmt.LogKey{hostileKey(t)}})
	if err == nil || errors.As(err, &inc) || !strings.Contains(err.Error(), "HTTP 503: consistency endpoint down") || !strings.Contains(err.Error(), "the log's hash tiles could not be read to build the proof") {
		t.Fatalf("Audit with neither proofs nor tiles: %v; want an error that is not an Inconsistency", err)
	}
}
