package tlog_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	sumtlog "golang.org/x/mod/sumdb/tlog"

	"github.com/keysvc/keysvc/tlog"
	"github.com/keysvc/keysvc/tlog/tlogaudit"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
	"github.com/keysvc/keysvc/tlog/tlogtest"
	"github.com/keysvc/keysvc/verifier"
)

const origin = "log.example.test/vrp"

// testKey is a fixed log key (RFC 8032 §7.1 test 1 seed) so that JWS bytes
// are reproducible.
func testKey() ed25519.PrivateKey {
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	return ed25519.NewKeyFromSeed(seed)
}

func artifact(i int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("jws-%d", i)))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func startLog(t *testing.T, cfg tlog.Config) (*tlog.Operator, *httptest.Server) {
	t.Helper()
	return startLogB(t, cfg)
}

func startLogB(t testing.TB, cfg tlog.Config) (*tlog.Operator, *httptest.Server) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.Origin = origin
	if cfg.Signer == nil {
		cfg.Signer = testKey()
	}
	if cfg.CheckpointInterval == 0 {
		cfg.CheckpointInterval = 100 * time.Millisecond
	}
	op, err := tlog.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(op.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := op.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		tlogtest.Fsck(t, cfg.Dir, op.VKey())
	})
	return op, srv
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func post(t *testing.T, url, ctype, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, ctype, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// waitProof polls GET proof until the hash is in a published tree.
func waitProof(t *testing.T, base, hash string) tlogfmt.ProofResponse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := get(t, base+tlogfmt.PathPrefix+"proof?hash="+hash)
		if code == http.StatusOK {
			var p tlogfmt.ProofResponse
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatal(err)
			}
			return p
		}
		if code != http.StatusNotFound || time.Now().After(deadline) {
			t.Fatalf("proof %s: %d %s", hash, code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAddProofVerifies(t *testing.T) {
	op, srv := startLog(t, tlog.Config{})
	base := srv.URL

	// One add, one batch of three (one of them the same hash as the add).
	code, body := post(t, base+tlogfmt.PathPrefix+"add", "application/json",
		`{"artifact_type":"vrp_attestation","artifact_hash":"`+artifact(0)+`"}`)
	if code != http.StatusOK {
		t.Fatalf("add: %d %s", code, body)
	}
	var ar tlogfmt.AddResponse
	if err := json.Unmarshal(body, &ar); err != nil {
		t.Fatal(err)
	}
	sep, key, err := tlogfmt.VerifySEP(ar.SEP, []tlogfmt.LogKey{op.Key()})
	if err != nil {
		t.Fatal(err)
	}
	if key.KID != op.Key().KID || len(sep.Entries) != 1 || *sep.Entries[0].LeafIndex != 0 || sep.Entries[0].ArtifactHash != artifact(0) || sep.MMDSeconds != 60 {
		t.Fatalf("SEP %+v", sep)
	}
	batch := fmt.Sprintf(`{"entries":[{"artifact_type":"vrp_attestation","artifact_hash":%q},{"artifact_type":"vrp_status_event","artifact_hash":%q},{"artifact_type":"vrp_attestation","artifact_hash":%q}]}`,
		artifact(1), artifact(2), artifact(0))
	code, body = post(t, base+tlogfmt.PathPrefix+"add-batch", "application/json", batch)
	if code != http.StatusOK {
		t.Fatalf("add-batch: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &ar); err != nil {
		t.Fatal(err)
	}
	sep, _, err = tlogfmt.VerifySEP(ar.SEP, []tlogfmt.LogKey{op.Key()})
	if err != nil {
		t.Fatal(err)
	}
	var idx []uint64
	for _, e := range sep.Entries {
		idx = append(idx, *e.LeafIndex)
	}
	if fmt.Sprint(idx) != "[1 2 0]" {
		t.Fatalf("batch leaf indexes %v, want [1 2 0] (the repeated hash keeps index 0)", idx)
	}
	// The same batch with ?promise=digest (ADR 0038): nothing is added
	// again, and the promise is of the body's SHA-256 and count.
	digestBatch := strings.Replace(batch, artifact(0), artifact(3), 1)
	code, body = post(t, base+tlogfmt.PathPrefix+"add-batch?promise=digest", "application/json", digestBatch)
	if code != http.StatusOK {
		t.Fatalf("add-batch?promise=digest: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &ar); err != nil {
		t.Fatal(err)
	}
	d, _, err := tlogfmt.VerifySEPDigest(ar.SEP, []tlogfmt.LogKey{op.Key()})
	if err != nil {
		t.Fatal(err)
	}
	if d.Count != 3 || d.BodySHA256 != sha256.Sum256([]byte(digestBatch)) || d.LogID != origin || d.MMDSeconds != 60 {
		t.Fatalf("digest SEP %+v", d)
	}
	// A digest is given only for entries the log holds with the type
	// submitted: artifact(1) is in the log as vrp_attestation, so a digest
	// request naming it vrp_receipt — or a body naming one new hash with two
	// types — is answered with the echoing SEP, which shows the type held.
	for name, conflict := range map[string]string{
		"logged under another type": fmt.Sprintf(`{"entries":[{"artifact_type":"vrp_receipt","artifact_hash":%q}]}`, artifact(1)),
		"two types in one body":     fmt.Sprintf(`{"entries":[{"artifact_type":"vrp_attestation","artifact_hash":%q},{"artifact_type":"vrp_receipt","artifact_hash":%q}]}`, artifact(4), artifact(4)),
	} {
		code, body = post(t, base+tlogfmt.PathPrefix+"add-batch?promise=digest", "application/json", conflict)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", name, code, body)
		}
		if err := json.Unmarshal(body, &ar); err != nil {
			t.Fatal(err)
		}
		if _, _, err := tlogfmt.VerifySEPDigest(ar.SEP, []tlogfmt.LogKey{op.Key()}); err == nil {
			t.Fatalf("%s: a digest promise was given", name)
		}
		echo, _, err := tlogfmt.VerifySEP(ar.SEP, []tlogfmt.LogKey{op.Key()})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		last := echo.Entries[len(echo.Entries)-1]
		if want := map[string]string{"logged under another type": "vrp_attestation", "two types in one body": "vrp_attestation"}[name]; last.ArtifactType != want {
			t.Fatalf("%s: the echo shows type %s, want %s", name, last.ArtifactType, want)
		}
	}
	if p := waitProof(t, base, artifact(3)); p.LeafIndex != 3 {
		t.Fatalf("the digest-promised new entry is leaf %d, want 3", p.LeafIndex)
	}

	// Each proof is a tlog member the existing verifier accepts.
	code, jwksBody := get(t, base+tlogfmt.PathPrefix+"jwks.json")
	if code != http.StatusOK {
		t.Fatalf("jwks: %d", code)
	}
	logKeys, err := verifier.ParseJWKS(jwksBody)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		// verifier.VerifyTlog checks an attestation signature; the
		// artifact here is the hash of "jws-<i>".
		p := waitProof(t, base, artifact(i))
		member, _ := json.Marshal(p)
		anchor, err := verifier.VerifyTlog(member, fmt.Sprintf("jws-%d", i), logKeys)
		if err != nil {
			t.Fatalf("proof %d: %v\n%s", i, err, member)
		}
		if anchor.LeafIndex != uint64(i) || anchor.LogID != origin {
			t.Fatalf("anchor %+v", anchor)
		}
		// The checkpoint is of the same tree as the STH.
		sth, _, err := tlogfmt.VerifySTH(p.STH, []tlogfmt.LogKey{op.Key()})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.Checkpoint, fmt.Sprintf("%s\n%d\n", origin, sth.TreeSize)) {
			t.Fatalf("checkpoint %q does not match STH size %d", p.Checkpoint, sth.TreeSize)
		}
	}
	// A hash never added is not found.
	code, body = get(t, base+tlogfmt.PathPrefix+"proof?hash="+artifact(99))
	if code != http.StatusNotFound || !bytes.Contains(body, []byte(`"code":"not_found"`)) {
		t.Fatalf("unknown hash: %d %s", code, body)
	}
}

// startWitness starts a litewitness named name that knows the test log
// (origin, testKey), and returns it with the log's key.
func startWitness(t *testing.T, name string) (*tlogtest.Litewitness, tlogfmt.LogKey) {
	t.Helper()
	key, err := tlogfmt.NewLogKey(origin, testKey().Public())
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := key.VKey()
	if err != nil {
		t.Fatal(err)
	}
	w := tlogtest.StartLitewitness(t, name)
	w.AddLog(t, origin, vkey)
	return w, key
}

func TestWitnessCosignsCheckpoints(t *testing.T) {
	w, key := startWitness(t, "witness.example.test/w1")
	pub := testKey().Public()
	_, srv := startLog(t, tlog.Config{Witnesses: []tlog.Witness{{VKey: w.VKey, URL: w.URL}}})

	code, body := post(t, srv.URL+tlogfmt.PathPrefix+"add", "application/json",
		`{"artifact_type":"vrp_attestation","artifact_hash":"`+artifact(7)+`"}`)
	if code != http.StatusOK {
		t.Fatalf("add: %d %s", code, body)
	}
	p := waitProof(t, srv.URL, artifact(7))
	cosigs, err := tlogfmt.VerifyCosignatures(p.Checkpoint, []string{w.VKey})
	if err != nil {
		t.Fatalf("%v\ncheckpoint:\n%s\nwitness log:\n%s", err, p.Checkpoint, w.Stderr())
	}
	if len(cosigs) != 1 || cosigs[0].Name != w.Name || time.Since(cosigs[0].Timestamp) > time.Minute || cosigs[0].Timestamp.After(time.Now()) {
		t.Fatalf("cosignatures %+v", cosigs)
	}
	code, body = get(t, srv.URL+tlogfmt.PathPrefix+"sth")
	var sr tlogfmt.STHResponse
	if code != http.StatusOK || json.Unmarshal(body, &sr) != nil {
		t.Fatalf("sth: %d %s", code, body)
	}
	if _, err := tlogfmt.VerifyCosignatures(sr.Checkpoint, []string{w.VKey}); err != nil {
		t.Fatalf("sth checkpoint: %v", err)
	}
	// The monitor counts the witness's cosignature on the newest tree, and
	// refuses when the required witness is another one.
	opts := tlogaudit.Options{BaseURL: srv.URL, Keys: []tlogfmt.LogKey{key}, WitnessVKeys: []string{w.VKey}, WitnessesRequired: 1}
	if _, err := tlogaudit.Audit(context.Background(), opts); err != nil {
		t.Fatalf("audit with the witness required: %v", err)
	}
	// The monitor holds the newest tree to MaxAge from its cosignature.
	opts.MaxAge, opts.Now = time.Hour, func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := tlogaudit.Audit(context.Background(), opts); !errors.Is(err, tlogaudit.ErrStaleTree) || !strings.Contains(err.Error(), "was last cosigned by a trusted witness at ") {
		t.Fatalf("audit two hours after the newest cosignature: %v", err)
	}
	opts.MaxAge, opts.Now = 0, nil
	other := tlogtest.StartLitewitness(t, "witness.example.test/other")
	opts.WitnessVKeys = []string{other.VKey}
	var inc *tlogaudit.Inconsistency
	if _, err := tlogaudit.Audit(context.Background(), opts); !errors.As(err, &inc) || !strings.Contains(inc.Reason, "0 of the 1 witness cosignatures") {
		t.Fatalf("audit requiring a witness that never cosigned: %v", err)
	}
	// A scan that requires the witness reads the tree it cosigned; one
	// that requires another witness refuses the tree and keeps nothing.
	scan := tlogaudit.ScanOptions{BaseURL: srv.URL, Keys: []ed25519.PublicKey{pub.(ed25519.PublicKey)}, ArtifactTypes: []string{"vrp_attestation"},
		WitnessVKeys: []string{w.VKey}, WitnessesRequired: 1}
	sc, err := tlogaudit.Scan(context.Background(), scan)
	if err != nil || sc.TreeSize != 1 || sc.Kept != 1 || len(sc.Cosignatures) != 1 || sc.Cosignatures[0].Name != w.Name || !sc.CurrentAt.Equal(sc.Cosignatures[0].Timestamp) {
		t.Fatalf("scan with the witness required: %+v %v", sc, err)
	}
	// With witnesses required, a tree's age is its newest cosignature's,
	// not the STH's own time (which the log alone signs).
	cosigned := sc.Cosignatures[0].Timestamp
	scan.MaxAge, scan.Now = time.Hour, func() time.Time { return cosigned.Add(61 * time.Minute) }
	if sc, err := tlogaudit.Scan(context.Background(), scan); !errors.Is(err, tlogaudit.ErrStaleTree) || sc != nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("was last cosigned by a trusted witness at %s, 1h1m0s ago", cosigned.UTC().Format(time.RFC3339))) {
		t.Fatalf("scan of a tree cosigned 61 minutes ago with 1h allowed: %+v %v", sc, err)
	}
	scan.Now = func() time.Time { return cosigned.Add(59 * time.Minute) }
	if _, err := tlogaudit.Scan(context.Background(), scan); err != nil {
		t.Fatalf("scan of a tree cosigned 59 minutes ago with 1h allowed: %v", err)
	}
	scan.MaxAge, scan.Now = 0, nil
	scan.WitnessVKeys = []string{other.VKey}
	if sc, err := tlogaudit.Scan(context.Background(), scan); !errors.As(err, &inc) || !strings.Contains(inc.Reason, "0 of the 1 witness cosignatures") || sc != nil {
		t.Fatalf("scan requiring a witness that never cosigned: %+v %v", sc, err)
	}
}

// TestIdleLogWitnessedAgain: a log that does not grow has its checkpoint
// cosigned again at every republish (here every second; Tessera's default
// is 10 minutes), so the cosignature GET sth carries gets newer while the
// STH keeps the time its tree size was first signed. A scan's CurrentAt,
// which --max-tree-age measures, follows the cosignature (ADR 0016).
// Without the republish interval it fails after 15 s.
func TestIdleLogWitnessedAgain(t *testing.T) {
	w, _ := startWitness(t, "witness.example.test/idle")
	pub := testKey().Public()
	_, srv := startLog(t, tlog.Config{Witnesses: []tlog.Witness{{VKey: w.VKey, URL: w.URL}}, CheckpointRepublishInterval: time.Second})
	if code, body := post(t, srv.URL+tlogfmt.PathPrefix+"add", "application/json",
		`{"artifact_type":"vrp_attestation","artifact_hash":"`+artifact(8)+`"}`); code != http.StatusOK {
		t.Fatalf("add: %d %s", code, body)
	}
	waitProof(t, srv.URL, artifact(8))
	scan := func() *tlogaudit.Scanned {
		t.Helper()
		sc, err := tlogaudit.Scan(context.Background(), tlogaudit.ScanOptions{BaseURL: srv.URL, Keys: []ed25519.PublicKey{pub.(ed25519.PublicKey)},
			WitnessVKeys: []string{w.VKey}, WitnessesRequired: 1})
		if err != nil || sc.TreeSize != 1 {
			t.Fatalf("scan: %+v %v", sc, err)
		}
		return sc
	}
	first := scan()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		sc := scan()
		if sc.CurrentAt.After(first.CurrentAt) {
			if !sc.Timestamp.Equal(first.Timestamp) || !sc.CurrentAt.Equal(sc.Cosignatures[0].Timestamp) {
				t.Fatalf("republished: STH time %v (first %v), CurrentAt %v, cosigned %v", sc.Timestamp, first.Timestamp, sc.CurrentAt, sc.Cosignatures[0].Timestamp)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle log's cosignature stayed at %v for 15 s (republish every 1 s)\nwitness log:\n%s", first.CurrentAt, w.Stderr())
		}
	}
}

// c2spTiles is a golang.org/x/mod/sumdb/tlog TileReader over a log's C2SP
// tlog-tiles HTTP resources: sumdb names tiles tile/8/L/N, tlog-tiles
// tile/L/N (height 8 is fixed).
type c2spTiles struct {
	t    *testing.T
	base string
}

func (c c2spTiles) Height() int { return 8 }

func (c c2spTiles) ReadTiles(tiles []sumtlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, tile := range tiles {
		p := strings.Replace(tile.Path(), "tile/8/", "tile/", 1)
		code, body := get(c.t, c.base+"/"+p)
		if code != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %d", p, code)
		}
		out[i] = body
	}
	return out, nil
}

func (c c2spTiles) SaveTiles([]sumtlog.Tile, [][]byte) {}

// TestStockClientReadsTiles reads the log with golang.org/x/mod/sumdb (no
// keysvc or Tessera code on the read side): the checkpoint verifies as a
// signed note under the log's vkey, the tree hash computed from the tiles
// equals the checkpoint's, each entry read from the entry bundles is a
// v0.1 leaf, and sumdb's own record proofs check out for it.
func TestStockClientReadsTiles(t *testing.T) {
	op, srv := startLog(t, tlog.Config{})
	var subs []tlogfmt.Submission
	for i := 0; i < 300; i++ { // more than one full tile and entry bundle
		subs = append(subs, tlogfmt.Submission{ArtifactType: tlogfmt.ArtifactAttestation, ArtifactHash: artifact(1000 + i)})
	}
	if _, _, err := op.Add(context.Background(), subs); err != nil {
		t.Fatal(err)
	}
	var cpText []byte
	for i := 0; ; i++ {
		_, cpText = get(t, srv.URL+"/checkpoint")
		if bytes.HasPrefix(cpText, []byte(origin+"\n300\n")) {
			break
		}
		if i > 200 {
			t.Fatalf("checkpoint never reached 300: %s", cpText)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, vkey := get(t, srv.URL+tlogfmt.PathPrefix+"vkey")
	v, err := note.NewVerifier(strings.TrimSpace(string(vkey)))
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(cpText, note.VerifierList(v))
	if err != nil {
		t.Fatalf("checkpoint does not open with the stock note package: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	size, _ := strconv.ParseInt(lines[1], 10, 64)
	root, _ := base64.StdEncoding.DecodeString(lines[2])
	tree := sumtlog.Tree{N: size}
	copy(tree.Hash[:], root)

	hr := sumtlog.TileHashReader(tree, c2spTiles{t, srv.URL})
	got, err := sumtlog.TreeHash(size, hr)
	if err != nil {
		t.Fatal(err)
	}
	if got != tree.Hash {
		t.Fatalf("sumdb tree hash %x, checkpoint %x", got, tree.Hash)
	}
	// Entries: C2SP tlog-tiles bundles, each entry a big-endian uint16
	// length and the data.
	var entries [][]byte
	for b := 0; len(entries) < int(size); b++ {
		p := fmt.Sprintf("/tile/entries/%03d", b)
		if rem := int(size) - len(entries); rem < 256 {
			p += fmt.Sprintf(".p/%d", rem)
		}
		code, body := get(t, srv.URL+p)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", p, code)
		}
		for len(body) > 0 {
			l := int(body[0])<<8 | int(body[1])
			entries = append(entries, body[2:2+l])
			body = body[2+l:]
		}
	}
	for _, i := range []int{0, 1, 255, 256, 299} {
		leaf, err := tlogfmt.ParseLeaf(entries[i])
		if err != nil || leaf.ArtifactHash != artifact(1000+i) {
			t.Fatalf("entry %d: %v %+v", i, err, leaf)
		}
		proof, err := sumtlog.ProveRecord(size, int64(i), hr)
		if err != nil {
			t.Fatal(err)
		}
		if err := sumtlog.CheckRecord(proof, size, tree.Hash, int64(i), sumtlog.RecordHash(entries[i])); err != nil {
			t.Fatalf("entry %d: sumdb record proof: %v", i, err)
		}
	}
}

// TestHTTPErrors holds every refusal to its status and stable code.
func TestHTTPErrors(t *testing.T) {
	op, srv := startLog(t, tlog.Config{})
	base := srv.URL + tlogfmt.PathPrefix
	okBody := `{"artifact_type":"vrp_attestation","artifact_hash":"` + artifact(5) + `"}`
	many := `{"entries":[` + strings.Repeat(`{"artifact_type":"vrp_attestation","artifact_hash":"`+artifact(6)+`"},`, tlogfmt.MaxBatchEntries) +
		`{"artifact_type":"vrp_attestation","artifact_hash":"` + artifact(6) + `"}]}`
	for _, c := range []struct {
		name, method, path, ctype, body string
		status                          int
		code                            string
	}{
		{"text content type", "POST", "add", "text/plain", okBody, 415, "unsupported_media_type"},
		{"latin-1 charset", "POST", "add", "application/json; charset=latin1", okBody, 415, "unsupported_media_type"},
		{"unknown field", "POST", "add", "application/json", strings.Replace(okBody, "}", `,"x":1}`, 1), 400, "unknown_field"},
		{"duplicate key", "POST", "add", "application/json", strings.Replace(okBody, "{", `{"artifact_type":"vrp_spec",`, 1), 400, "duplicate_key"},
		{"trailing data", "POST", "add", "application/json", okBody + "{}", 400, "trailing_data"},
		{"empty body", "POST", "add", "application/json", "", 400, "empty_body"},
		{"upper-case hex", "POST", "add", "application/json", strings.ToUpper(okBody[:0]) + strings.Replace(okBody, artifact(5), strings.ToUpper(artifact(5)), 1), 400, "invalid_request"},
		{"unknown artifact type", "POST", "add", "application/json", strings.Replace(okBody, "vrp_attestation", "vrp_other", 1), 400, "invalid_request"},
		{"oversized add", "POST", "add", "application/json", `{"artifact_type":"` + strings.Repeat("a", 5000) + `"}`, 413, "body_too_large"},
		{"empty batch", "POST", "add-batch", "application/json", `{"entries":[]}`, 400, "invalid_request"},
		{"batch too large", "POST", "add-batch", "application/json", many, 400, "batch_too_large"},
		{"unknown promise form", "POST", "add-batch?promise=all", "application/json", `{"entries":[` + okBody + `]}`, 400, "invalid_request"},
		{"promise form twice", "POST", "add-batch?promise=digest&promise=digest", "application/json", `{"entries":[` + okBody + `]}`, 400, "invalid_request"},
		{"empty promise form", "POST", "add-batch?promise=", "application/json", `{"entries":[` + okBody + `]}`, 400, "invalid_request"},
		{"malformed query", "POST", "add-batch?promise=%zz", "application/json", `{"entries":[` + okBody + `]}`, 400, "invalid_request"},
		{"digest of an empty batch", "POST", "add-batch?promise=digest", "application/json", `{"entries":[]}`, 400, "invalid_request"},
		{"GET add", "GET", "add", "", "", 405, "method_not_allowed"},
		{"POST sth", "POST", "sth", "application/json", "{}", 405, "method_not_allowed"},
		{"no such endpoint", "GET", "nope", "", "", 404, "not_found"},
		{"proof without hash", "GET", "proof", "", "", 400, "invalid_request"},
		{"proof of a bad hash", "GET", "proof?hash=sha256:12", "", "", 400, "invalid_request"},
		{"proof hash twice", "GET", "proof?hash=" + artifact(5) + "&hash=" + artifact(5), "", "", 400, "invalid_request"},
		{"consistency first 0", "GET", "consistency?first=0&second=1", "", "", 400, "invalid_request"},
		{"consistency reversed", "GET", "consistency?first=2&second=1", "", "", 400, "invalid_request"},
		{"consistency beyond the tree", "GET", "consistency?first=1&second=99999", "", "", 400, "invalid_request"},
		{"consistency leading zero", "GET", "consistency?first=01&second=1", "", "", 400, "invalid_request"},
		{"archive limit 0", "GET", "sth/archive?limit=0", "", "", 400, "invalid_request"},
		{"archive limit too big", "GET", "sth/archive?limit=1001", "", "", 400, "invalid_request"},
		{"archive negative after", "GET", "sth/archive?after=-1", "", "", 400, "invalid_request"},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e tlogfmt.ErrorResponse
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || e.Error.Code != c.code || e.Error.Message == "" {
			t.Errorf("%s: %d %s, want %d %s", c.name, resp.StatusCode, body, c.status, c.code)
		}
	}
	// Nothing refused reached the log.
	if _, _, err := op.Add(context.Background(), []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: artifact(5)}}); err != nil {
		t.Fatal(err)
	}
	p := waitProof(t, srv.URL, artifact(5))
	if p.LeafIndex != 0 {
		t.Fatalf("the first accepted entry has index %d; a refused request was logged", p.LeafIndex)
	}
	// Static files: only C2SP names, never the Tessera state directory.
	for path, want := range map[string]int{
		"/checkpoint": 200, "/tile/entries/000.p/1": 200, "/tile/0/000.p/1": 200,
		"/.state/treeState": 404, "/tile/../.state/treeState": 404, "/tile/%2e%2e/.state/treeState": 404, "/tile/": 404,
	} {
		if code, body := get(t, srv.URL+path); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, body, want)
		}
	}
}

// TestArchivePagesAndConsistency lists the archive page by page and checks
// each STH against the next with the log's own consistency proofs.
func TestArchivePagesAndConsistency(t *testing.T) {
	op, srv := startLog(t, tlog.Config{})
	for i := 0; i < 5; i++ {
		if _, _, err := op.Add(context.Background(), []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: artifact(200 + i)}}); err != nil {
			t.Fatal(err)
		}
		waitProof(t, srv.URL, artifact(200+i))
	}
	var all []tlogfmt.ArchivedSTH
	after := ""
	for pages := 0; ; pages++ {
		u := srv.URL + tlogfmt.PathPrefix + "sth/archive?limit=2"
		if after != "" {
			u += "&after=" + after
		}
		code, body := get(t, u)
		var page tlogfmt.ArchiveResponse
		if code != 200 || json.Unmarshal(body, &page) != nil || len(page.STHs) > 2 {
			t.Fatalf("archive page: %d %s", code, body)
		}
		all = append(all, page.STHs...)
		if page.Next == nil {
			break
		}
		after = strconv.FormatUint(*page.Next, 10)
	}
	var sizes []uint64
	for _, a := range all {
		sizes = append(sizes, a.TreeSize)
	}
	if len(all) != 6 || fmt.Sprint(sizes) != "[0 1 2 3 4 5]" {
		t.Fatalf("archive sizes %v, want one per checkpoint [0 1 2 3 4 5]", sizes)
	}
	rep, err := tlogaudit.Audit(context.Background(), tlogaudit.Options{BaseURL: srv.URL, Keys: []tlogfmt.LogKey{op.Key()}})
	if err != nil || rep.STHs != 6 || rep.ConsistencyProofs != 4 || rep.TreeSize != 5 {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}

// TestAuditProvesFromTesseraTiles: with the log's consistency endpoint
// answering 503, tlogaudit builds every proof from the hash tiles Tessera
// wrote (ADR 0045), across a completed tile (300 entries: tile 0 full,
// tile 1 partial, a level-1 tile), and the audit passes on the real log.
func TestAuditProvesFromTesseraTiles(t *testing.T) {
	op, srv := startLog(t, tlog.Config{})
	ctx := context.Background()
	add := func(from, n int) {
		subs := make([]tlogfmt.Submission, n)
		for i := range subs {
			subs[i] = tlogfmt.Submission{ArtifactType: "vrp_attestation", ArtifactHash: artifact(from + i)}
		}
		if _, _, err := op.Add(ctx, subs); err != nil {
			t.Fatal(err)
		}
		waitProof(t, srv.URL, artifact(from+n-1))
	}
	add(1000, 1)
	add(1001, 299)
	add(1300, 1)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == tlogfmt.PathPrefix+tlogfmt.EndpointConsistency {
			http.Error(w, "consistency endpoint down", http.StatusServiceUnavailable)
			return
		}
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer failing.Close()
	opts := tlogaudit.Options{BaseURL: failing.URL, Keys: []tlogfmt.LogKey{op.Key()}}
	rep, err := tlogaudit.Audit(ctx, opts)
	// Trees 0, 1, 300 and 301: the proofs from 1 to 300 and 300 to 301
	// (every tree extends the empty one without a proof).
	if err != nil || rep.STHs != 4 || rep.TreeSize != 301 || rep.ConsistencyProofs != 2 || rep.TileProofs != 2 ||
		rep.EndpointError != "GET "+failing.URL+tlogfmt.PathPrefix+"consistency?first=1&second=300: HTTP 503: consistency endpoint down" {
		t.Fatalf("audit with GET consistency down: %+v %v; want both proofs built from tiles up to tree 301", rep, err)
	}
	direct, err := tlogaudit.Audit(ctx, tlogaudit.Options{BaseURL: srv.URL, Keys: []tlogfmt.LogKey{op.Key()}})
	if err != nil || direct.TileProofs != 0 || direct.ConsistencyProofs != rep.ConsistencyProofs || direct.STHs != rep.STHs {
		t.Fatalf("audit through the endpoint: %+v %v; want the same proofs, none from tiles (%+v)", direct, err, rep)
	}
}

// TestFsckDetectsDamage: the fsck helper is not a no-op — a flipped byte in
// an entry bundle fails it.
func TestFsckDetectsDamage(t *testing.T) {
	dir := t.TempDir()
	op, err := tlog.New(context.Background(), tlog.Config{Dir: dir, Origin: origin, Signer: testKey(), CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := op.Add(context.Background(), []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: artifact(1)}}); err != nil {
		t.Fatal(err)
	}
	if err := op.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tlogtest.FsckDir(dir+"/log", op.VKey()); err != nil {
		t.Fatalf("fsck of a sound log: %v", err)
	}
	bundle := dir + "/log/tile/entries/000.p/1"
	b, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 1
	if err := os.WriteFile(bundle, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tlogtest.FsckDir(dir+"/log", op.VKey()); err == nil {
		t.Fatal("fsck passed a log with a damaged entry bundle")
	}
}

// TestProofsUseOnlyCosignedTrees: with the witness gone and the log
// failing open, checkpoints are still published, but proofs are served
// only from trees the witness cosigned; an entry only in newer trees is
// not found (yet).
func TestProofsUseOnlyCosignedTrees(t *testing.T) {
	w, _ := startWitness(t, "witness.example.test/w2")
	op, srv := startLog(t, tlog.Config{Witnesses: []tlog.Witness{{VKey: w.VKey, URL: w.URL}}, WitnessFailOpen: true, WitnessTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	if _, _, err := op.Add(ctx, []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: artifact(300)}}); err != nil {
		t.Fatal(err)
	}
	first := waitProof(t, srv.URL, artifact(300))
	w.Stop()
	if _, _, err := op.Add(ctx, []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: artifact(301)}}); err != nil {
		t.Fatal(err)
	}
	// The log publishes the grown tree without a cosignature...
	for i := 0; ; i++ {
		_, cp := get(t, srv.URL+"/checkpoint")
		if bytes.HasPrefix(cp, []byte(origin+"\n2\n")) {
			if _, err := tlogfmt.VerifyCosignatures(string(cp), []string{w.VKey}); err == nil {
				t.Fatal("a checkpoint published after the witness stopped carries its cosignature")
			}
			break
		}
		if i > 100 {
			t.Fatalf("tree of 2 never published: %s", cp)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// ...but proofs stay on the cosigned tree.
	code, body := get(t, srv.URL+tlogfmt.PathPrefix+"proof?hash="+artifact(301))
	if code != http.StatusNotFound {
		t.Fatalf("entry only in an uncosigned tree: %d %s", code, body)
	}
	again := waitProof(t, srv.URL, artifact(300))
	if again.TreeSize != first.TreeSize {
		t.Fatalf("proof moved to tree %d without a cosignature", again.TreeSize)
	}
	if _, err := tlogfmt.VerifyCosignatures(again.Checkpoint, []string{w.VKey}); err != nil {
		t.Fatal(err)
	}
	code, _ = get(t, srv.URL+tlogfmt.PathPrefix+"proof?hash="+artifact(301)+"&tree_size=2")
	if code != http.StatusNotFound {
		t.Fatalf("tree_size=2 (not cosigned) answered %d", code)
	}
}

// TestInFlightSetDrains: every entry leaves the in-flight set once the
// index follower has it, whichever of the two finishes first.
func TestInFlightSetDrains(t *testing.T) {
	op, _ := startLog(t, tlog.Config{BatchMaxAge: 5 * time.Millisecond})
	var wg sync.WaitGroup
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				var subs []tlogfmt.Submission
				for j := 0; j < 50; j++ {
					subs = append(subs, tlogfmt.Submission{ArtifactType: "vrp_attestation", ArtifactHash: artifact(10000 + c*1000 + i*50 + j)})
				}
				if _, _, err := op.Add(context.Background(), subs); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := 0; tlog.PendingLen(op) > 0; i++ {
		if i > 100 {
			t.Fatalf("%d entries never left the in-flight set", tlog.PendingLen(op))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestProofAtOnceForPublishedCheckpoint: a client that reads a checkpoint
// at /checkpoint covering a leaf and asks for its proof at once gets it,
// though the checkpoint watcher (every 100 ms) has not yet recorded that
// checkpoint as published (CI failure of TestTlogServeKill9: 404 for a
// promised, published leaf); so does a consistency proof to that tree.
func TestProofAtOnceForPublishedCheckpoint(t *testing.T) {
	_, srv := startLog(t, tlog.Config{})
	for round := 0; round < 5; round++ {
		h := artifact(20000 + round)
		code, body := post(t, srv.URL+tlogfmt.PathPrefix+"add", "application/json",
			`{"artifact_type":"vrp_attestation","artifact_hash":"`+h+`"}`)
		if code != http.StatusOK {
			t.Fatalf("add: %d %s", code, body)
		}
		want := fmt.Sprintf("%s\n%d\n", origin, round+1)
		for i := 0; ; i++ {
			if _, cp := get(t, srv.URL+"/checkpoint"); strings.HasPrefix(string(cp), want) {
				break
			}
			if i > 5000 {
				t.Fatalf("no checkpoint of size %d", round+1)
			}
			time.Sleep(time.Millisecond)
		}
		if round > 0 {
			u := fmt.Sprintf("%sconsistency?first=%d&second=%d", srv.URL+tlogfmt.PathPrefix, round, round+1)
			if code, body := get(t, u); code != http.StatusOK {
				t.Fatalf("round %d: consistency to the tree at /checkpoint: %d %s", round, code, body)
			}
		}
		code, body = get(t, srv.URL+tlogfmt.PathPrefix+"proof?hash="+h)
		if code != http.StatusOK {
			t.Fatalf("round %d: the checkpoint covers leaf %d, proof: %d %s", round, round, code, body)
		}
		var p tlogfmt.ProofResponse
		if err := json.Unmarshal(body, &p); err != nil || p.LeafIndex != uint64(round) || p.TreeSize != uint64(round+1) {
			t.Fatalf("round %d: proof %+v (%v)", round, p, err)
		}
	}
}

// TestStateWALTruncated: the follower's checkpoint copies the state
// database's WAL into it and truncates it (SQLite's passive automatic
// checkpoints let it grow without bound under steady look-ups).
func TestStateWALTruncated(t *testing.T) {
	dir := t.TempDir()
	op, _ := startLog(t, tlog.Config{Dir: dir})
	var subs []tlogfmt.Submission
	for i := 0; i < 2000; i++ {
		subs = append(subs, tlogfmt.Submission{ArtifactType: "vrp_attestation", ArtifactHash: artifact(30000 + i)})
	}
	if _, _, err := op.Add(context.Background(), subs); err != nil {
		t.Fatal(err)
	}
	wal := filepath.Join(dir, "state.db-wal")
	for i := 0; tlog.PendingLen(op) > 0; i++ { // indexed: the WAL holds the rows
		if i > 100 {
			t.Fatal("entries never indexed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, err := os.Stat(wal); err != nil || st.Size() == 0 {
		t.Fatalf("WAL before the checkpoint: %v %v, want a non-empty file", st, err)
	}
	if err := tlog.CheckpointState(op); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 0 {
		t.Fatalf("WAL after the checkpoint: %d bytes, want 0", st.Size())
	}
	// The index still answers from the database.
	if _, _, err := op.Add(context.Background(), subs[:1]); err != nil {
		t.Fatal(err)
	}
}

// TestWitnessOutageFailsClosed: while the only witness is down the log
// keeps sequencing (SEPs) but publishes no checkpoint, so proofs of new
// entries wait; once the witness is back they arrive, cosigned.
func TestWitnessOutageFailsClosed(t *testing.T) {
	w, _ := startWitness(t, "witness.example.test/w3")
	op, srv := startLog(t, tlog.Config{Witnesses: []tlog.Witness{{VKey: w.VKey, URL: w.URL}}, WitnessTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	if _, _, err := op.Add(ctx, []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: artifact(400)}}); err != nil {
		t.Fatal(err)
	}
	waitProof(t, srv.URL, artifact(400))
	w.Stop()
	if _, _, err := op.Add(ctx, []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: artifact(401)}}); err != nil {
		t.Fatalf("adds must go on while the witness is down: %v", err)
	}
	time.Sleep(1 * time.Second) // several checkpoint intervals (100 ms)
	if _, cp := get(t, srv.URL+"/checkpoint"); !bytes.HasPrefix(cp, []byte(origin+"\n1\n")) {
		t.Fatalf("a checkpoint was published without the required cosignature:\n%s", cp)
	}
	if code, _ := get(t, srv.URL+tlogfmt.PathPrefix+"proof?hash="+artifact(401)); code != http.StatusNotFound {
		t.Fatalf("proof of an entry in no cosigned tree: %d", code)
	}
	w.Restart(t)
	p := waitProof(t, srv.URL, artifact(401))
	cos, err := tlogfmt.VerifyCosignatures(p.Checkpoint, []string{w.VKey})
	if err != nil || p.TreeSize != 2 || len(cos) != 1 {
		t.Fatalf("after the witness came back: size %d, %v %v", p.TreeSize, cos, err)
	}
}

// TestSubmitTokens: with submitter tokens configured, add and add-batch
// need one; reads stay public.
func TestSubmitTokens(t *testing.T) {
	_, srv := startLog(t, tlog.Config{SubmitTokenHashes: [][32]byte{sha256.Sum256([]byte("node-1-secret"))}})
	body := `{"artifact_type":"vrp_attestation","artifact_hash":"` + artifact(500) + `"}`
	for _, c := range []struct {
		auth   string
		status int
	}{{"", 401}, {"Bearer ", 401}, {"Bearer node-1-secreT", 401}, {"Basic bm9kZS0xLXNlY3JldA==", 401}, {"Bearer node-1-secret", 200}} {
		status, b := postSubmission(t, srv.URL, "add", body, c.auth)
		if status != c.status || (c.status == 401 && !bytes.Contains(b, []byte(`"code":"unauthorized"`))) {
			t.Errorf("Authorization %q: %d %s, want %d", c.auth, status, b, c.status)
		}
	}
	waitProof(t, srv.URL, artifact(500)) // reads need no token
}

// postSubmission POSTs a JSON body to the log's endpoint (add or
// add-batch) with an Authorization header when auth is not empty, and
// returns the status and body.
func postSubmission(t *testing.T, base, endpoint, body, auth string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+tlogfmt.PathPrefix+endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestSubmitInProcessOnly: with SubmitInProcessOnly (serve's embedded
// log) add and add-batch answer 403 forbidden, with or without a token,
// and add nothing; the process's own Add logs, and reads stay public.
func TestSubmitInProcessOnly(t *testing.T) {
	op, srv := startLog(t, tlog.Config{SubmitInProcessOnly: true, SubmitTokenHashes: [][32]byte{sha256.Sum256([]byte("node-1-secret"))}})
	for _, c := range []struct{ path, body, auth string }{
		{"add", `{"artifact_type":"vrp_status_event","artifact_hash":"` + artifact(700) + `"}`, ""},
		{"add", `{"artifact_type":"vrp_status_event","artifact_hash":"` + artifact(700) + `"}`, "Bearer node-1-secret"},
		{"add-batch", `{"entries":[{"artifact_type":"vrp_status_event","artifact_hash":"` + artifact(700) + `"}]}`, ""},
	} {
		status, b := postSubmission(t, srv.URL, c.path, c.body, c.auth)
		if status != http.StatusForbidden || !bytes.Contains(b, []byte(`"code":"forbidden"`)) {
			t.Errorf("POST %s (Authorization %q): %d %s, want 403 forbidden", c.path, c.auth, status, b)
		}
	}
	_, sep, err := op.Add(context.Background(), []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: artifact(700)}})
	if err != nil || *sep.Entries[0].LeafIndex != 0 || sep.Entries[0].ArtifactType != "vrp_attestation" {
		t.Fatalf("in-process Add after the refused posts: %+v %v; want leaf 0 as vrp_attestation (nothing was added over HTTP)", sep, err)
	}
	waitProof(t, srv.URL, artifact(700)) // reads stay public
}

// TestOneOperatorPerDir: a second operator on a data directory in use is
// refused; after Close it opens, and the log it finds is the same.
func TestOneOperatorPerDir(t *testing.T) {
	dir := t.TempDir()
	op, err := tlog.New(context.Background(), tlog.Config{Dir: dir, Origin: origin, Signer: testKey(), CheckpointInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tlog.New(context.Background(), tlog.Config{Dir: dir, Origin: origin, Signer: testKey()}); err == nil || !strings.Contains(err.Error(), "another operator holds") {
		t.Fatalf("second operator on the same directory: %v", err)
	}
	if _, _, err := op.Add(context.Background(), []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: artifact(600)}}); err != nil {
		t.Fatal(err)
	}
	if err := op.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	op2, srv := startLog(t, tlog.Config{Dir: dir})
	_, sep, err := op2.Add(context.Background(), []tlogfmt.Submission{{ArtifactType: "vrp_attestation", ArtifactHash: artifact(600)}})
	if err != nil || *sep.Entries[0].LeafIndex != 0 {
		t.Fatalf("re-adding after restart: %v %+v", err, sep)
	}
	waitProof(t, srv.URL, artifact(600))
}
