package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	f_log "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
	_ "modernc.org/sqlite"

	"github.com/keysvc/keysvc/backends/pkcs11/softhsmtest"
	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
	"github.com/keysvc/keysvc/tlog/tlogtest"
)

// tlogServer is a running `keysvc tlog serve` process.
type tlogServer struct {
	cmd    *exec.Cmd
	URL    string
	VKey   string
	stderr *lockedBuffer
	done   chan error
}

// startTlogServer starts `keysvc tlog serve --listen 127.0.0.1:0 --data-dir
// dir --dev args...` and waits for its banner.
func startTlogServer(t *testing.T, dir string, args ...string) *tlogServer {
	t.Helper()
	return startTlogServerEnv(t, nil, dir, args...)
}

// startTlogServerEnv is startTlogServer with extra environment variables.
func startTlogServerEnv(t *testing.T, env []string, dir string, args ...string) *tlogServer {
	t.Helper()
	cmd := exec.Command(keysvcBinary(t), append([]string{"tlog", "serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--dev",
		"--origin", "log.example.test/vrp", "--checkpoint-interval", "200ms"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	s := &tlogServer{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = pw, s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- cmd.Wait(); pw.Close() }()
	banner := make(chan map[string]string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var b map[string]string
			if json.Unmarshal(sc.Bytes(), &b) == nil && b["listening"] != "" {
				banner <- b
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case b := <-banner:
		s.URL, s.VKey = b["listening"], b["vkey"]
	case err := <-s.done:
		t.Fatalf("keysvc tlog serve exited early: %v\n%s", err, s.stderr.String())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("keysvc tlog serve did not start:\n%s", s.stderr.String())
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop sends SIGTERM and waits for a clean exit (idempotent).
func (s *tlogServer) stop(t testing.TB) {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("keysvc tlog serve exited with %v\n%s", err, s.stderr.String())
		}
		s.done <- err
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Errorf("keysvc tlog serve did not stop on SIGTERM")
	}
}

// kill9 kills the process with SIGKILL: no shutdown code runs.
func (s *tlogServer) kill9(t testing.TB) {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	err := <-s.done
	s.done <- err
}

func randomArtifact() string {
	var b [32]byte
	rand.Read(b[:])
	sum := sha256.Sum256(b[:])
	return "sha256:" + hex.EncodeToString(sum[:])
}

// addBatch posts entries to add-batch and returns the SEP JWS, or an error
// for any failure (a refused request or a connection cut by a kill).
func addBatch(base string, hashes []string) (string, error) {
	var req tlogfmt.AddBatchRequest
	for _, h := range hashes {
		req.Entries = append(req.Entries, tlogfmt.Submission{ArtifactType: tlogfmt.ArtifactAttestation, ArtifactHash: h})
	}
	body, _ := json.Marshal(req)
	resp, err := http.Post(base+tlogfmt.PathPrefix+"add-batch", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("add-batch: %d %s", resp.StatusCode, rb)
	}
	var ar tlogfmt.AddResponse
	if err := json.Unmarshal(rb, &ar); err != nil {
		return "", err
	}
	return ar.SEP, nil
}

func proofFor(base, hash string) (int, tlogfmt.ProofResponse) {
	resp, err := http.Get(base + tlogfmt.PathPrefix + "proof?hash=" + hash)
	if err != nil {
		return 0, tlogfmt.ProofResponse{}
	}
	defer resp.Body.Close()
	var p tlogfmt.ProofResponse
	json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p
}

// TestTlogServeKill9 adds entries from 4 clients while `keysvc tlog serve`
// is killed with SIGKILL twice; after each restart every entry that got a
// SEP is in the log at the SEP's leaf_index, the index answers proofs for
// it, the monitor finds the archive consistent and Tessera's fsck passes.
func TestTlogServeKill9(t *testing.T) {
	dir := t.TempDir()
	srv := startTlogServer(t, dir)
	vkey := srv.VKey
	key, err := tlogfmt.ParseVKey(vkey)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	promised := map[string]uint64{} // artifact hash -> leaf_index from its SEP
	for round := 0; round < 2; round++ {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10000; i++ { // bounded; the kill ends it first
					select {
					case <-stop:
						return
					default:
					}
					hashes := make([]string, 50)
					for j := range hashes {
						hashes[j] = randomArtifact()
					}
					jws, err := addBatch(srv.URL, hashes)
					if err != nil {
						continue // killed mid-request: no promise, nothing owed
					}
					sep, _, err := tlogfmt.VerifySEP(jws, []tlogfmt.LogKey{key})
					if err != nil {
						t.Errorf("SEP does not verify: %v", err)
						return
					}
					mu.Lock()
					for _, e := range sep.Entries {
						promised[e.ArtifactHash] = *e.LeafIndex
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(1500 * time.Millisecond)
		srv.kill9(t)
		close(stop)
		wg.Wait()
		srv = startTlogServer(t, dir)
		if srv.VKey != vkey {
			t.Fatalf("restart changed the log key: %s", srv.VKey)
		}
	}
	if len(promised) < 200 {
		t.Fatalf("only %d entries got a SEP before the kills; the test proves nothing", len(promised))
	}
	// Every promised entry is in the published tree at its promised index:
	// read every entry from the C2SP entry bundles, then ask for proofs of
	// a sample.
	var maxIdx uint64
	for _, idx := range promised {
		maxIdx = max(maxIdx, idx)
	}
	var size uint64
	for i := 0; ; i++ {
		_, cp := httpGet(t, srv.URL+"/checkpoint")
		if lines := strings.Split(cp, "\n"); len(lines) > 1 {
			fmt.Sscan(lines[1], &size)
		}
		if size > maxIdx {
			break
		}
		if i > 300 {
			t.Fatalf("published tree size %d never covered leaf_index %d", size, maxIdx)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var entries []string
	for b := uint64(0); uint64(len(entries)) < size; b++ {
		p := fmt.Sprintf("/tile/entries/%s", tilePathIndex(b))
		if rem := size - uint64(len(entries)); rem < 256 {
			p += fmt.Sprintf(".p/%d", rem)
		}
		code, body := httpGet(t, srv.URL+p)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", p, code)
		}
		for len(body) > 0 {
			l := int(body[0])<<8 | int(body[1])
			leaf, err := tlogfmt.ParseLeaf([]byte(body[2 : 2+l]))
			if err != nil {
				t.Fatalf("entry %d: %v", len(entries), err)
			}
			entries = append(entries, leaf.ArtifactHash)
			body = body[2+l:]
		}
	}
	n := 0
	for h, idx := range promised {
		if entries[idx] != h {
			t.Fatalf("SEP promised %s at leaf_index %d; the log has %s there", h, idx, entries[idx])
		}
		if n++; n <= 50 {
			if code, p := proofFor(srv.URL, h); code != http.StatusOK || p.LeafIndex != idx {
				t.Fatalf("proof of %s: %d, index %d, promised %d", h, code, p.LeafIndex, idx)
			}
		}
	}
	t.Logf("%d entries promised across two kill -9; all in the log", len(promised))
	// Resubmitting promised hashes after the restarts adds nothing: each
	// keeps its first leaf_index (the index caught up from the log).
	var again []string
	for h := range promised {
		if again = append(again, h); len(again) == 100 {
			break
		}
	}
	jws, err := addBatch(srv.URL, again)
	if err != nil {
		t.Fatal(err)
	}
	sep, _, err := tlogfmt.VerifySEP(jws, []tlogfmt.LogKey{key})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sep.Entries {
		if *e.LeafIndex != promised[e.ArtifactHash] {
			t.Fatalf("resubmitted %s got leaf_index %d, first promised %d", e.ArtifactHash, *e.LeafIndex, promised[e.ArtifactHash])
		}
	}
	out, stderr, code := runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey)
	if code != 0 {
		t.Fatalf("audit after kill -9: exit %d\n%s%s", code, out, stderr)
	}
	srv.stop(t)
	tlogtest.Fsck(t, dir, vkey)
}

// TestTlogAuditDetectsTampering rewrites the stopped operator's STH archive
// as an operator holding the log key could — a forked tree head for one
// size, then a broken signature — and checks that `keysvc tlog audit`
// exits 1 naming the inconsistent pair, and exits 0 on the untouched log.
func TestTlogAuditDetectsTampering(t *testing.T) {
	dir := t.TempDir()
	srv := startTlogServer(t, dir)
	for i := 0; i < 4; i++ {
		hashes := []string{randomArtifact(), randomArtifact(), randomArtifact()}
		if _, err := addBatch(srv.URL, hashes); err != nil {
			t.Fatal(err)
		}
		time.Sleep(350 * time.Millisecond) // a checkpoint per batch (interval 200ms)
	}
	waitPublished(t, srv.URL, 12) // the last batch is in a published tree
	vkey := srv.VKey
	code, metrics := httpGet(t, srv.URL+"/metrics")
	for _, m := range []string{"keysvc_tlog_operator_published_tree_size 12", "keysvc_tlog_operator_integrated_tree_size 12",
		"keysvc_tlog_operator_entries_added_total 12", `keysvc_tlog_operator_add_requests_total{result="ok"} 4`, "keysvc_tlog_operator_inflight_entries 0"} {
		if code != 200 || !strings.Contains(metrics, "\n"+m+"\n") {
			t.Errorf("/metrics lacks %q", m)
		}
	}
	// The families deploy/lint/metrics.go lets the docs name (tlogOperatorTypes).
	for name, typ := range map[string]string{
		"keysvc_tlog_operator_add_requests_total": "counter", "keysvc_tlog_operator_add_duration_seconds": "histogram",
		"keysvc_tlog_operator_entries_added_total": "counter", "keysvc_tlog_operator_integrated_tree_size": "gauge",
		"keysvc_tlog_operator_published_tree_size": "gauge", "keysvc_tlog_operator_cosigned_tree_size": "gauge",
		"keysvc_tlog_operator_checkpoint_changed_timestamp_seconds": "gauge", "keysvc_tlog_operator_inflight_entries": "gauge",
	} {
		if !strings.Contains(metrics, "# TYPE "+name+" "+typ+"\n") {
			t.Errorf("/metrics lacks %s (%s)", name, typ)
		}
	}
	out, stderr, code := runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey)
	if code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("audit of an untouched log: exit %d\n%s%s", code, out, stderr)
	}
	// With GET consistency failing, every proof is built from the log's
	// hash tiles (ADR 0045): exit 0, and a warning that counts them.
	var sths, proofs, size int
	if _, err := fmt.Sscanf(out, "ok: %d archived STHs, %d consistency proofs verified, newest tree size %d\n", &sths, &proofs, &size); err != nil || proofs == 0 {
		t.Fatalf("audit output %q: %v", out, err)
	}
	down := failingConsistency(t, srv.URL)
	out2, stderr, code := runCLI(t, nil, "tlog", "audit", down, "--log-key", vkey)
	warn := fmt.Sprintf("keysvc: warning: %d of the consistency proofs were built from the log's hash tiles: its consistency endpoint failed for trees it had published (first: \"GET %s%sconsistency?first=", proofs, down, tlogfmt.PathPrefix)
	if code != 0 || out2 != out || !strings.HasPrefix(stderr, warn) || !strings.HasSuffix(stderr, `: HTTP 503: consistency endpoint down")`+"\n") {
		t.Fatalf("audit with GET consistency down: exit %d, want 0, %q and a warning %q...\n%s%s", code, out, warn, out2, stderr)
	}
	// A newest tree older than --max-tree-age (here any tree: 1 ms) is a
	// log that stopped publishing: exit 1, STALE. (An STH's time is whole
	// seconds rounded up, so the tree is first let age past that second.)
	time.Sleep(1500 * time.Millisecond)
	out, stderr, code = runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey, "--max-tree-age", "1ms")
	if want := "STALE: tlogaudit: the tree is stale: log "; code != 1 || !strings.HasPrefix(out, want) || !strings.Contains(out, ", tree size 12, was signed at ") {
		t.Fatalf("audit with --max-tree-age 1ms: exit %d, want 1 with %q\n%s%s", code, want, out, stderr)
	}
	// One witness's public key listed twice (here under a second name) is
	// the operator's mistake, not the log's: exit 2, "could not run",
	// nothing INCONSISTENT (a witness is its key; its lines can be copied
	// under any name).
	witnessPub, _, _ := ed25519.GenerateKey(rand.Reader)
	w1, _ := note.NewEd25519VerifierKey("witness.example.test/a", witnessPub)
	w2, _ := note.NewEd25519VerifierKey("witness.example.test/a-again", witnessPub)
	out, stderr, code = runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey, "--witness-key", w1, "--witness-key", w2, "--witnesses-required", "2")
	if code != 2 || out != "" || !strings.Contains(stderr, "keysvc: audit could not run: tlogfmt: witness keys: ") || !strings.Contains(stderr, "are one public key, one witness, listed twice") {
		t.Fatalf("audit with one witness key under two names: exit %d, want 2\n%s%s", code, out, stderr)
	}
	srv.stop(t)

	db, err := sql.Open("sqlite", filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var sizes []uint64
	rows, err := db.Query(`SELECT tree_size FROM sths ORDER BY tree_size`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n uint64
		rows.Scan(&n)
		sizes = append(sizes, n)
	}
	rows.Close()
	if len(sizes) < 4 {
		t.Fatalf("archive holds sizes %v; want at least 4 checkpoints", sizes)
	}
	// Fork: a tree head for a middle size with another root, signed by the
	// real log key (STH and checkpoint alike).
	victim := sizes[len(sizes)/2]
	prevSize := sizes[len(sizes)/2-1]
	origSTH, origCP := forgeArchivedSTH(t, db, dir, vkey, victim)
	srv = startTlogServer(t, dir)
	out, stderr, code = runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey)
	want := fmt.Sprintf("INCONSISTENT: archived STHs of tree sizes %d and %d are inconsistent: consistency proof does not verify", prevSize, victim)
	if code != 1 || !strings.HasPrefix(out, want) {
		t.Fatalf("forked STH: exit %d, want 1 with %q\n%s%s", code, want, out, stderr)
	}
	// The log cannot hide the fork by failing that proof: it is built from
	// the hash tiles instead, and they are the honest tree's (before ADR
	// 0045 this exited 2, "could not run").
	down = failingConsistency(t, srv.URL)
	out, stderr, code = runCLI(t, nil, "tlog", "audit", down, "--log-key", vkey)
	// The endpoint is asked once: for the first pair of non-empty trees
	// (GET consistency failed), after which later pairs say it was not
	// asked; either way the tiles decide.
	want = fmt.Sprintf("INCONSISTENT: archived STHs of tree sizes %d and %d are inconsistent: GET consistency ", prevSize, victim)
	tail := "HTTP 503: consistency endpoint down), and the proof built from the log's hash tiles does not verify: "
	if code != 1 || !strings.HasPrefix(out, want) || !strings.Contains(out, tail) {
		t.Fatalf("forked STH, GET consistency down: exit %d, want 1 with %q…%q\n%s%s", code, want, tail, out, stderr)
	}
	srv.stop(t)

	// A broken signature on the untouched STH of the same size.
	bad := origSTH[:len(origSTH)-2] + flip(origSTH[len(origSTH)-2:])
	if _, err := db.Exec(`UPDATE sths SET sth = ?, checkpoint = ?, root_hash = (SELECT root_hash FROM sths WHERE tree_size = ?) WHERE tree_size = ?`, bad, origCP, victim, victim); err != nil {
		t.Fatal(err)
	}
	srv = startTlogServer(t, dir)
	out, _, code = runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey)
	want = fmt.Sprintf("INCONSISTENT: archived STH of tree size %d: STH: tlogfmt: signature does not verify", victim)
	if code != 1 || !strings.HasPrefix(out, want) {
		t.Fatalf("bad signature: exit %d, want 1 with %q\n%s", code, want, out)
	}
	// Another log key: the audit trusts only the configured key.
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	k, _ := tlogfmt.ParseVKey(vkey)
	otherKey, _ := tlogfmt.NewLogKey(k.Origin, other)
	otherVKey, _ := otherKey.VKey()
	// It could not run (exit 2): with no --state, nothing signed under
	// the given key has verified, and a mistyped --log-key is not a fork.
	out, stderr, code = runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", otherVKey)
	if code != 2 || out != "" || !strings.Contains(stderr, "keysvc: audit could not run: tlogaudit: GET sth is signed by kid ") || !strings.Contains(stderr, "which is none of the log keys") {
		t.Fatalf("another log's key: exit %d\n%s%s", code, out, stderr)
	}
	srv.stop(t)
	tlogtest.Fsck(t, dir, vkey)
}

// forgeArchivedSTH rewrites the stopped operator's archived STH of tree
// size (database db of data directory dir) as an operator holding the log
// key could: a tree head of that size with another root (0x42…), STH and
// checkpoint both signed by the real log key. It returns the original STH
// and checkpoint.
func forgeArchivedSTH(t *testing.T, db *sql.DB, dir, vkey string, size uint64) (origSTH, origCP string) {
	t.Helper()
	logSigner := loadTestLogKey(t, dir)
	forged := bytes.Repeat([]byte{0x42}, 32)
	k, _ := tlogfmt.ParseVKey(vkey)
	js, _ := signer.NewJWSSigner(k.KID, signer.AlgEdDSA, logSigner)
	sth, err := tlogfmt.SignSTH(js, tlogfmt.STH{LogID: k.Origin, TreeSize: size, RootHash: forged, Timestamp: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	ns, _ := tlogfmt.NewNoteSigner(k, logSigner)
	cp, err := note.Sign(&note.Note{Text: string(f_log.Checkpoint{Origin: k.Origin, Size: size, Hash: forged}.Marshal())}, ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT sth, checkpoint FROM sths WHERE tree_size = ?`, size).Scan(&origSTH, &origCP); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE sths SET sth = ?, checkpoint = ?, root_hash = ? WHERE tree_size = ?`, sth, string(cp), forged, size); err != nil {
		t.Fatal(err)
	}
	return origSTH, origCP
}

// waitPublished waits until the log at base publishes a tree of size n.
func waitPublished(t *testing.T, base string, n int) {
	t.Helper()
	for i := 0; ; i++ {
		code, body := httpGet(t, base+tlogfmt.PathPrefix+"sth")
		if code == http.StatusOK && strings.Contains(body, fmt.Sprintf("\\n%d\\n", n)) {
			return
		}
		if i > 100 {
			t.Fatalf("the log did not publish tree size %d: %s", n, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTlogAuditState: with --state, tlog audit remembers the newest tree
// of the last audit that passed, reads the archive from it on, and
// requires the log's history to extend it. A log whose operator re-signed
// that tree with another root is INCONSISTENT at that tree, and the state
// file keeps the tree it contradicts; a damaged state file is exit 2.
// (TestAuditFromEarlierTree shows what an audit without it misses: a
// whole history rewritten under the log key.)
func TestTlogAuditState(t *testing.T) {
	dir := t.TempDir()
	srv := startTlogServer(t, dir)
	for i := 0; i < 2; i++ {
		if _, err := addBatch(srv.URL, []string{randomArtifact(), randomArtifact(), randomArtifact()}); err != nil {
			t.Fatal(err)
		}
		waitPublished(t, srv.URL, 3*(i+1))
	}
	vkey := srv.VKey
	state := filepath.Join(t.TempDir(), "audit-state.json")
	out, stderr, code := runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey, "--state", state)
	var sths, proofs, size int
	if _, err := fmt.Sscanf(out, "ok: %d archived STHs, %d consistency proofs verified, newest tree size %d\n", &sths, &proofs, &size); err != nil || code != 0 || size != 6 {
		t.Fatalf("first audit with a new --state file: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	var kept tlogfmt.ArchivedSTH
	if b, err := os.ReadFile(state); err != nil || json.Unmarshal(b, &kept) != nil || kept.TreeSize != 6 {
		t.Fatalf("--state file after the first audit: %+v %v; want the archived STH of tree size 6", kept, err)
	}
	// Resumed: the kept tree alone is read again (its root compared).
	out, stderr, code = runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey, "--state", state)
	if code != 0 || out != "ok: 1 archived STHs, 0 consistency proofs verified, newest tree size 6\n" {
		t.Fatalf("audit resumed at the newest tree: exit %d\n%s%s", code, out, stderr)
	}
	if _, err := addBatch(srv.URL, []string{randomArtifact(), randomArtifact(), randomArtifact()}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, srv.URL, 9)
	out, stderr, code = runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey, "--state", state)
	if code != 0 || out != "ok: 2 archived STHs, 1 consistency proofs verified, newest tree size 9\n" {
		t.Fatalf("audit resumed after one more tree: exit %d\n%s%s", code, out, stderr)
	}
	before, _ := os.ReadFile(state)
	srv.stop(t)

	// The operator re-signs tree 9 with another root: the newest tree, so
	// an audit without --state still finds the pair 6–9 inconsistent;
	// with it, tree 9 itself contradicts the tree kept.
	db, err := sql.Open("sqlite", filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	forgeArchivedSTH(t, db, dir, vkey, 9)
	srv = startTlogServer(t, dir)
	defer srv.stop(t)
	out, stderr, code = runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey, "--state", state)
	want := "INCONSISTENT: archived STH of tree size 9: the archive's STH has another root than the STH of this tree size an earlier audit checked (From): the log forked, or rewrote its history\n"
	if after, _ := os.ReadFile(state); code != 1 || out != want || !bytes.Equal(after, before) {
		t.Fatalf("audit from a kept tree the log re-signed: exit %d, state file changed %v; want 1 with %q\n%s%s", code, !bytes.Equal(after, before), want, out, stderr)
	}
	// A damaged state file: the audit could not run (2), nothing written.
	if err := os.WriteFile(state, []byte(`{"tree_size":9,"sth":"x","checkpoint":"y","extra":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code = runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey, "--state", state)
	if code != 2 || out != "" || !strings.HasPrefix(stderr, "keysvc: audit could not run: --state "+state+": ") {
		t.Fatalf("audit with a damaged --state file: exit %d, want 2\n%s%s", code, out, stderr)
	}
}

// failingConsistency serves target's log through a proxy whose GET
// consistency answers 503, as a log hiding a fork would; its URL.
func failingConsistency(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == tlogfmt.PathPrefix+tlogfmt.EndpointConsistency {
			http.Error(w, "consistency endpoint down", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p.URL
}

func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

// loadTestLogKey opens the --dev software log key of a data directory.
func loadTestLogKey(t *testing.T, dir string) ed25519.PrivateKey {
	t.Helper()
	f := &tlogKeyFlags{dataDir: dir}
	_, s, b, err := f.loadLogKey(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	return s.(ed25519.PrivateKey)
}

// TestTlogLogKeyInPKCS11 keeps the log key in a SoftHSM2 token: keygen
// records no key material, serve signs SEPs, STHs and checkpoints with the
// token's key through the backends interface.
func TestTlogLogKeyInPKCS11(t *testing.T) {
	tk := softhsmtest.New(t)
	dir := t.TempDir()
	pin := writePIN(t, t.TempDir(), tk.PIN)
	out, stderr, code := runCLI(t, []string{tk.Env()}, append([]string{"tlog", "keygen", "--data-dir", dir, "--origin", "log.example.test/vrp",
		"--backend", "pkcs11", "--key-id", "tlog-hsm-1"}, pkcs11Args(tk, pin)...)...)
	if code != 0 {
		t.Fatalf("keygen: %d %s %s", code, out, stderr)
	}
	var rec logKeyRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Backend != "pkcs11" || rec.Sealed != "" || !strings.HasPrefix(rec.VKey, "log.example.test/vrp+") {
		t.Fatalf("keygen record %+v %v", rec, err)
	}
	srv := startTlogServerEnv(t, []string{tk.Env()}, dir, pkcs11Args(tk, pin)...)
	if srv.VKey != rec.VKey {
		t.Fatalf("serve uses vkey %s, keygen made %s", srv.VKey, rec.VKey)
	}
	key, _ := tlogfmt.ParseVKey(rec.VKey)
	jws, err := addBatch(srv.URL, []string{randomArtifact()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tlogfmt.VerifySEP(jws, []tlogfmt.LogKey{key}); err != nil {
		t.Fatalf("SEP signed in the HSM does not verify: %v", err)
	}
	for i := 0; ; i++ {
		code, body := httpGet(t, srv.URL+"/checkpoint")
		if code == 200 && strings.HasPrefix(body, "log.example.test/vrp\n1\n") {
			if _, err := tlogfmt.VerifyCheckpoint(body, key); err != nil {
				t.Fatal(err)
			}
			break
		}
		if i > 100 {
			t.Fatalf("checkpoint: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, stderr, code = runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", rec.VKey)
	if code != 0 {
		t.Fatalf("audit: %d %s %s", code, out, stderr)
	}
	srv.stop(t)
	tlogtest.Fsck(t, dir, rec.VKey)
}

// tilePathIndex is the C2SP tlog-tiles path encoding of a tile index:
// three-digit groups, all but the last prefixed with "x".
func tilePathIndex(n uint64) string {
	p := fmt.Sprintf("%03d", n%1000)
	for n >= 1000 {
		n /= 1000
		p = fmt.Sprintf("x%03d/%s", n%1000, p)
	}
	return p
}

// TestTlogAuditDeadline: a log that holds each answer just short of
// --timeout (here: until the client goes) cannot hold the audit past
// --deadline: exit 2, "could not run", naming the flag and how far it got.
func TestTlogAuditDeadline(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	}))
	defer srv.Close()
	defer close(hang)
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	vkey, _ := note.NewEd25519VerifierKey("log.example.test", pub)
	start := time.Now()
	out, stderr, code := runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey, "--timeout", "1m", "--deadline", "500ms")
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("audit took %s with --deadline 500ms", took)
	}
	want := "keysvc: audit could not run: gave up after 500ms (--deadline), 0 archived STHs checked: "
	if code != 2 || out != "" || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "context deadline exceeded") {
		t.Fatalf("audit of a log that never answers: exit %d, want 2 with %q\n%s%s", code, want, out, stderr)
	}
	if _, stderr, code := runCLI(t, nil, "tlog", "audit", srv.URL, "--log-key", vkey, "--deadline", "-1s"); code != 2 || !strings.Contains(stderr, "--deadline must not be negative") {
		t.Fatalf("--deadline -1s: exit %d, want 2 (a usage error: the audit could not run; ADR 0031 addendum)\n%s", code, stderr)
	}
}
