package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/pgtest"
	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlog/tlogtest"
	"github.com/keysvc/keysvc/tlogclient"
	"github.com/keysvc/keysvc/verifier"
)

const e2eLogOrigin = "log.example.test/vrp"

// tlogStack is one `keysvc tlog serve` process whose checkpoints one real
// litewitness cosigns (nothing of keysvc runs in the witness), with the
// files a verifier needs: the log's JWKS and the witness's verifier key.
type tlogStack struct {
	srv             *tlogServer
	dir, vkey       string
	witness         *tlogtest.Litewitness
	logKeysFile     string
	witnessKeysFile string
	extra           []string
}

// startTlogStack creates a log key (keysvc tlog keygen), registers it with a
// fresh litewitness and starts the log with that witness required.
// listen, when not "", is a fixed address (for a stop and restart on the
// same URL).
func startTlogStack(t *testing.T, listen string) *tlogStack {
	t.Helper()
	s := &tlogStack{dir: t.TempDir()}
	writeKEK(t, s.dir)
	out, errOut, code := runCLI(t, nil, "tlog", "keygen", "--data-dir", s.dir, "--origin", e2eLogOrigin)
	if code != 0 {
		t.Fatalf("tlog keygen: %d %s%s", code, out, errOut)
	}
	var rec struct{ VKey string }
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.VKey == "" {
		t.Fatalf("tlog keygen printed %q", out)
	}
	s.vkey = rec.VKey
	s.witness = tlogtest.StartLitewitness(t, "witness.example.test/w1")
	s.witness.AddLog(t, e2eLogOrigin, s.vkey)
	s.extra = []string{"--witness", s.witness.URL + " " + s.witness.VKey}
	if listen != "" {
		s.extra = append(s.extra, "--listen", listen)
	}
	s.srv = startTlogServer(t, s.dir, s.extra...)
	code2, jwks := httpGet(t, s.srv.URL+tlogclient.PathPrefix+"jwks.json")
	if code2 != 200 {
		t.Fatalf("log jwks.json: %d %s", code2, jwks)
	}
	s.logKeysFile = filepath.Join(s.dir, "log-jwks.json")
	s.witnessKeysFile = filepath.Join(s.dir, "witness-keys.txt")
	if err := os.WriteFile(s.logKeysFile, []byte(jwks), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.witnessKeysFile, []byte("# the one witness of the test log\n"+s.witness.VKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.srv.stop(t)
		tlogtest.Fsck(t, s.dir, s.vkey)
	})
	return s
}

// runInProcess runs the keysvc command line in this process (the same
// cobra commands as the binary) and returns stdout, stderr and the exit
// code: for the thousand-receipt loops, where a process per receipt would
// dominate the test's time. The binary runs the same commands elsewhere.
//
// Only verify and receipt are built: other commands register package-level
// backend flags, which would race between concurrent calls.
func runInProcess(args ...string) (string, string, int) {
	cmd := &cobra.Command{Use: "keysvc", SilenceUsage: true, SilenceErrors: true}
	cmd.AddCommand(newVerifyCmd(), newReceiptCmd())
	var o, e bytes.Buffer
	cmd.SetOut(&o)
	cmd.SetErr(&e)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	code := 0
	if ee, ok := err.(exitError); ok {
		code = ee.code
	} else if err != nil {
		code = 1
		e.WriteString(err.Error())
	}
	return o.String(), e.String(), code
}

// verifyResult is `keysvc verify --json` for a one-attestation receipt.
type verifyResult struct {
	ReceiptValid  bool `json:"receipt_valid"`
	FullyVerified bool `json:"fully_verified"`
	Attestations  []struct {
		Status string  `json:"status"`
		Error  *string `json:"error"`
		KID    *string `json:"kid"`
	} `json:"attestations"`
}

func parseVerify(t *testing.T, out string) verifyResult {
	t.Helper()
	var r verifyResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Attestations) != 1 {
		t.Fatalf("verify output %q: %v", out, err)
	}
	return r
}

// receiptJSON wraps attestations in a VRP receipt v1.
func receiptJSON(t *testing.T, atts ...any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(map[string]any{
		"vrp_receipt_version": "1.0",
		"subject":             map[string]any{"property": "villaakerlyckan.se", "stay": "2026-09-02/2026-09-05"},
		"issuer":              map[string]any{"node": "villaakerlyckan.se"},
		"attestations":        atts,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTlogEndToEnd is the acceptance run of issue 12 items 4 and 6, on
// SQLite (one process) and on PostgreSQL (three replicas), against a real
// log operator process with one real litewitness: sign 1,000 transport
// assertions, revoke the version with compromised_at = now; every receipt,
// proved with `keysvc receipt prove`, verifies with keysvc verify
// --history --log-keys --witness-keys --log-url; a receipt signed with the
// leaked private key after compromised_at (valid_from backdated) is
// invalid / key_revoked with a log proof and tlog_required without one; a
// genuine receipt without its proof is tlog_required. Tessera's fsck passes
// on the log afterwards.
func TestTlogEndToEnd(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { tlogEndToEnd(t, "", 1) })
	t.Run("postgres", func(t *testing.T) { tlogEndToEnd(t, pgtest.URL(t), 3) })
}

func tlogEndToEnd(t *testing.T, pgURL string, replicas int) {
	const n = 1000
	ls := startTlogStack(t, "")
	e := newLifecycleEnv(t, pgURL)
	var nodes []*server
	for i := 0; i < replicas; i++ {
		dir := e.dir
		if i > 0 {
			dir = t.TempDir()
		}
		nodes = append(nodes, startServer(t, e.env, "--data-dir", dir, "--kek-file", e.kek, "--reload-interval", "500ms",
			"--rate-limit", "0", "--tlog-url", ls.srv.URL))
	}
	ctx := context.Background()
	admin := client.New(nodes[0].URL, e.token)
	if _, _, err := admin.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatal(err)
	}
	// Every replica has the key before the load starts.
	for _, nd := range nodes {
		waitFor(t, 10*time.Second, "every replica has the key", func() bool {
			code, _ := httpGet(t, nd.URL+"/v1/keys/villa/jwks.json")
			return code == 200
		})
	}

	phase := time.Now()
	atts := make([]client.Attestation, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			c := client.New(nodes[w%len(nodes)].URL, e.token)
			for i := w; i < n; i += 8 {
				res, err := c.MCPTransport(ctx, "villa", client.TransportRequest{Tool: "get_verified_stay_offer",
					Arguments: map[string]any{"checkIn": "2026-09-02", "guests": i}, OfferRef: fmt.Sprintf("offer:villa:%d", i)})
				if err != nil {
					errs <- err
					return
				}
				atts[i] = res.Attestation
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("sign: %v", err)
	}
	kid := jwsHeaderKID(t, atts[0].Signature)
	t.Logf("%d transport assertions signed through %d replica(s) in %s", n, len(nodes), time.Since(phase).Round(time.Millisecond))
	phase = time.Now()

	// Every signature reaches the log, in a witnessed tree.
	logs := []tlogclient.Log{mustHTTPLog(t, ls.srv.URL)}
	waitFor(t, 60*time.Second, "the last signature is in a witnessed tree", func() bool {
		_, err := tlogclient.Prove(ctx, logs, tlogclient.HashArtifact(atts[n-1].Signature))
		return err == nil
	})
	t.Logf("the last signature is in a witnessed tree %s after the last answer", time.Since(phase).Round(time.Millisecond))
	var missing atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := logs[0].Proof(ctx, tlogclient.HashArtifact(atts[i].Signature), 0); err != nil {
					missing.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if missing.Load() > 0 {
		t.Fatalf("%d of %d signatures are not in the log", missing.Load(), n)
	}
	t.Logf("all %d checked in the log %s after the last answer", n, time.Since(phase).Round(time.Millisecond))
	// Cosignatures carry whole seconds: let the last one's second end
	// before the compromise instant.
	time.Sleep(2 * time.Second)
	compromisedAt := time.Now().UTC()
	if _, _, err := admin.Revoke(ctx, kid, compromisedAt.Format(time.RFC3339Nano), "HSM backup leaked"); err != nil {
		t.Fatal(err)
	}
	history, err := admin.History(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	historyFile := filepath.Join(work, "history.json")
	tokenFile := filepath.Join(work, "token")
	for f, b := range map[string][]byte{historyFile: history, tokenFile: []byte(e.token + "\n")} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	verifyArgs := func(receipt string, at time.Time) []string {
		return []string{"verify", receipt, "--history", historyFile, "--log-keys", ls.logKeysFile, "--witness-keys", ls.witnessKeysFile,
			"--witnesses-required", "1", "--log-url", ls.srv.URL, "--at", at.Format(time.RFC3339), "--json"}
	}

	// All 1,000 receipts, proved after the revocation, verify.
	start := time.Now()
	var failed sync.Once
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				a := atts[i]
				f := filepath.Join(work, fmt.Sprintf("receipt-%04d.json", i))
				if err := os.WriteFile(f, receiptJSON(t, a), 0o600); err != nil {
					t.Error(err)
					return
				}
				// Alternate the two proof sources: the node's endpoint
				// (through every replica) and the log directly.
				prove := []string{"receipt", "prove", f, "--in-place", "--server", nodes[i%len(nodes)].URL, "--token-file", tokenFile}
				if i%2 == 1 {
					prove = []string{"receipt", "prove", f, "--in-place", "--log-url", ls.srv.URL}
				}
				if out, errOut, code := runInProcess(prove...); code != 0 {
					failed.Do(func() { t.Errorf("receipt %d: prove: %d %s%s", i, code, out, errOut) })
					return
				}
				at := mustInstant(t, a.ValidFrom).Add(time.Minute)
				out, errOut, code := runInProcess(verifyArgs(f, at)...)
				var r verifyResult
				if code != 0 || json.Unmarshal([]byte(out), &r) != nil || !r.FullyVerified {
					failed.Do(func() {
						t.Errorf("receipt %d (kid %s) proved after the revocation does not verify: exit %d\n%s%s", i, kid, code, out, errOut)
					})
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d receipts proved and verified in %s", n, time.Since(start).Round(time.Millisecond))
	// The binary agrees on a sample.
	for _, i := range []int{0, n / 2, n - 1} {
		f := filepath.Join(work, fmt.Sprintf("receipt-%04d.json", i))
		out, errOut, code := runCLI(t, nil, verifyArgs(f, mustInstant(t, atts[i].ValidFrom).Add(time.Minute))...)
		if code != 0 {
			t.Fatalf("binary verify of receipt %d: %d %s%s", i, code, out, errOut)
		}
	}
	// A proved receipt's tlog member is the log's, with the witness's
	// cosignature in its checkpoint.
	raw, _ := os.ReadFile(filepath.Join(work, "receipt-0000.json"))
	var proved struct {
		Attestations []struct {
			Signature string          `json:"signature"`
			Tlog      json.RawMessage `json:"tlog"`
		} `json:"attestations"`
	}
	if err := json.Unmarshal(raw, &proved); err != nil || proved.Attestations[0].Signature != atts[0].Signature {
		t.Fatalf("proved receipt: %v %s", err, raw)
	}
	witnesses, _ := verifier.ParseWitnessKeys([]byte(ls.witness.VKey))
	lk, _ := os.ReadFile(ls.logKeysFile)
	logKeys, _ := verifier.ParseJWKS(lk)
	anchor, err := verifier.VerifyTlog(proved.Attestations[0].Tlog, atts[0].Signature, logKeys, witnesses...)
	if err != nil || len(anchor.Cosignatures) != 1 || !anchor.Timestamp.Before(compromisedAt) {
		t.Fatalf("tlog member of receipt 0: %+v %v", anchor, err)
	}

	// Without its proof, the genuine receipt fails closed.
	bare := filepath.Join(work, "bare.json")
	if err := os.WriteFile(bare, receiptJSON(t, atts[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, _ := runCLI(t, nil, verifyArgs(bare, mustInstant(t, atts[1].ValidFrom).Add(time.Minute))...)
	if r := parseVerify(t, out); r.Attestations[0].Status != "invalid" || r.Attestations[0].Error == nil || *r.Attestations[0].Error != "tlog_required" {
		t.Fatalf("genuine receipt without a proof: %s", out)
	}

	// Forged: the leaked private key signs after compromised_at, claiming
	// a time before it (valid_from backdated into the version's window).
	forgedAt := mustInstant(t, atts[0].ValidFrom)
	forged := forgeTransport(t, e, pgURL, kid, forgedAt)
	forgedFile := filepath.Join(work, "forged.json")
	if err := os.WriteFile(forgedFile, receiptJSON(t, forged), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, _ = runCLI(t, nil, verifyArgs(forgedFile, forgedAt.Add(time.Minute))...)
	if r := parseVerify(t, out); r.Attestations[0].Status != "invalid" || *r.Attestations[0].Error != "tlog_required" {
		t.Fatalf("forged receipt without a proof: %s", out)
	}
	// The forger gets its JWS logged (the log's add is public): the proof
	// shows a tree head after the compromise.
	if _, err := logs[0].AddBatch(ctx, []tlogclient.Entry{{ArtifactType: tlogclient.ArtifactAttestation, ArtifactHash: tlogclient.HashArtifact(forged.Signature)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the forged JWS is in the log", func() bool {
		_, err := tlogclient.Prove(ctx, logs, tlogclient.HashArtifact(forged.Signature))
		return err == nil
	})
	if out, errOut, code := runCLI(t, nil, "receipt", "prove", forgedFile, "--in-place", "--log-url", ls.srv.URL); code != 0 {
		t.Fatalf("prove forged: %d %s%s", code, out, errOut)
	}
	out, _, _ = runCLI(t, nil, verifyArgs(forgedFile, forgedAt.Add(time.Minute))...)
	if r := parseVerify(t, out); r.Attestations[0].Status != "invalid" || *r.Attestations[0].Error != "key_revoked" {
		t.Fatalf("forged receipt with its (post-compromise) log proof: %s", out)
	}
	// Nor does a genuine receipt's proof lend its anchor to the forgery.
	var genuine map[string]any
	json.Unmarshal(raw, &genuine)
	borrowed := map[string]any{}
	b, _ := json.Marshal(forged)
	json.Unmarshal(b, &borrowed)
	borrowed["tlog"] = genuine["attestations"].([]any)[0].(map[string]any)["tlog"]
	if err := os.WriteFile(forgedFile, receiptJSON(t, borrowed), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, _ = runCLI(t, nil, verifyArgs(forgedFile, forgedAt.Add(time.Minute))...)
	if r := parseVerify(t, out); r.Attestations[0].Status != "invalid" || *r.Attestations[0].Error != "key_revoked" {
		t.Fatalf("forged receipt with a genuine receipt's proof: %s", out)
	}
	for _, nd := range nodes {
		nd.stop(t)
	}
}

// forgeTransport signs a transport assertion with version kid's private key
// taken from key history and the KEK — what an attacker holding the leaked
// key can do — claiming served_at = at.
func forgeTransport(t *testing.T, e *lifecycleEnv, pgURL, kid string, at time.Time) client.Attestation {
	t.Helper()
	ctx := context.Background()
	cfg := store.Config{PostgresURL: pgURL, SQLitePath: filepath.Join(e.dir, "keysvc.db")}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v, err := st.GetVersion(ctx, kid)
	if err != nil {
		t.Fatal(err)
	}
	jwk, err := verifier.ParseJWK(v.PublicJWK)
	if err != nil {
		t.Fatal(err)
	}
	kekText, _ := os.ReadFile(e.kek)
	kek, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(string(kekText)))
	sw, err := software.New(kek)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := sw.Signer(ctx, kid, backends.Handle{Ref: v.BackendRef, Sealed: v.SealedPrivateKey, Public: jwk.Public, KeyName: v.KeyName})
	if err != nil {
		t.Fatal(err)
	}
	js, err := signer.NewJWSSigner(kid, signer.AlgEdDSA, priv)
	if err != nil {
		t.Fatal(err)
	}
	_, payload, err := signer.BuildTransportAssertion(signer.TransportCall{Tool: "get_verified_stay_offer",
		Arguments: []byte(`{"guests":9}`), ServedAt: at, Issuer: "villaakerlyckan.se", OfferRef: "offer:forged"})
	if err != nil {
		t.Fatal(err)
	}
	jws, err := js.Sign(payload, signer.TransportJWSTyp)
	if err != nil {
		t.Fatal(err)
	}
	return client.Attestation{Layer: "transport", Source: "https://villaakerlyckan.se/.well-known/jwks.json", Signature: jws,
		Ref: "offer:forged", ValidFrom: signer.FormatInstant(at), ValidUntil: signer.FormatInstant(at.Add(time.Hour))}
}

func mustHTTPLog(t *testing.T, u string) *tlogclient.HTTPLog {
	t.Helper()
	l, err := tlogclient.NewHTTPLog(u)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustInstant(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := verifier.ParseInstant(s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func jwsHeaderKID(t *testing.T, jws string) string {
	t.Helper()
	h, _, _ := strings.Cut(jws, ".")
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	var hdr struct{ KID string }
	if err := json.Unmarshal(b, &hdr); err != nil || hdr.KID == "" {
		t.Fatalf("JWS header %s", b)
	}
	return hdr.KID
}

// TestTlogDevEmbedded: `serve --dev` runs a log in process (its own
// listener, a dev log key in <data-dir>/tlog); signatures reach it through
// the operator's Go API, the node's proof endpoint serves their proofs and
// a receipt proved with them verifies after the version is revoked. A
// restart keeps the log (same key, same tree).
func TestTlogDevEmbedded(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, nil, "--dev", "--data-dir", dir, "--tlog-embedded-listen", "127.0.0.1:0")
	logURL := embeddedLogURL(t, srv)
	ctx := context.Background()
	token := strings.TrimSpace(mustRead(t, filepath.Join(dir, "dev-token")))
	c := client.New(srv.URL, token)
	res, err := c.MCPTransport(ctx, "dev", client.TransportRequest{Tool: "get_verified_stay_offer", Arguments: map[string]any{"guests": 2}})
	if err != nil {
		t.Fatal(err)
	}
	var proof []byte
	waitFor(t, 20*time.Second, "the node serves the proof", func() bool {
		proof, err = c.TlogProof(ctx, res.JWS)
		return err == nil
	})
	code, jwks := httpGet(t, logURL+tlogclient.PathPrefix+"jwks.json")
	if code != 200 {
		t.Fatalf("embedded log jwks.json: %d", code)
	}
	// A detached signature (ADR 0028) is logged too: a vrp_receipt leaf
	// over the exact bytes signed.
	det, err := c.SignDetached(ctx, "dev", map[string]any{"version": 1, "alg": "EdDSA", "backLink": map[string]string{"attestationNonce": "n-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := signer.DigestSHA256([]byte(det.Signed)); det.ArtifactHash != want || det.Signed != `{"alg":"EdDSA","backLink":{"attestationNonce":"n-1"},"version":1}` {
		t.Fatalf("detached: %+v", det)
	}
	waitFor(t, 20*time.Second, "the embedded log includes the detached signature's leaf", func() bool {
		code, body := httpGet(t, logURL+tlogclient.PathPrefix+"proof?hash="+det.ArtifactHash)
		var pr struct {
			Leaf struct {
				ArtifactType string `json:"artifact_type"`
				ArtifactHash string `json:"artifact_hash"`
			} `json:"leaf"`
		}
		return code == 200 && json.Unmarshal([]byte(body), &pr) == nil && pr.Leaf.ArtifactType == "vrp_receipt" && pr.Leaf.ArtifactHash == det.ArtifactHash
	})
	keys, _ := verifier.ParseJWKS([]byte(jwks))
	if _, err := verifier.VerifyTlog(proof, res.JWS, keys); err != nil {
		t.Fatalf("proof from the embedded log: %v\n%s", err, proof)
	}
	time.Sleep(1100 * time.Millisecond) // the STH's whole second ends before the compromise
	kid := jwsHeaderKID(t, res.JWS)
	if _, _, err := c.Revoke(ctx, kid, time.Now().UTC().Format(time.RFC3339Nano), "dev test"); err != nil {
		t.Fatal(err)
	}
	history, err := c.History(ctx, "dev")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	hf, kf, rf := filepath.Join(work, "history.json"), filepath.Join(work, "log-keys.json"), filepath.Join(work, "receipt.json")
	for f, b := range map[string][]byte{hf: history, kf: []byte(jwks), rf: receiptJSON(t, res.Attestation)} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	at := mustInstant(t, res.Attestation.ValidFrom).Add(time.Minute).Format(time.RFC3339)
	if out, errOut, code := runCLI(t, []string{"KEYSVC_TOKEN=" + token}, "receipt", "prove", rf, "--in-place", "--server", srv.URL); code != 0 || out != "" || errOut != "wrote "+rf+": 1 of 1 attestation(s) proved\n" {
		t.Fatalf("receipt prove: %d %q %q", code, out, errOut)
	}
	if out, errOut, code := runCLI(t, nil, "verify", rf, "--history", hf, "--log-keys", kf, "--log-url", logURL, "--at", at); code != 0 {
		t.Fatalf("verify after revocation: %d %s%s", code, out, errOut)
	}
	srv.stop(t)
	srv2 := startServer(t, nil, "--dev", "--data-dir", dir, "--tlog-embedded-listen", "127.0.0.1:0")
	logURL2 := embeddedLogURL(t, srv2)
	if code, jwks2 := httpGet(t, logURL2+tlogclient.PathPrefix+"jwks.json"); code != 200 || jwks2 != jwks {
		t.Fatalf("the embedded log's key changed across a restart:\n%s\n%s", jwks, jwks2)
	}
	if out, errOut, code := runCLI(t, nil, "verify", rf, "--history", hf, "--log-keys", kf, "--log-url", logURL2, "--at", at); code != 0 {
		t.Fatalf("verify against the restarted log (consistency): %d %s%s", code, out, errOut)
	}
	srv2.stop(t)
	tlogtest.Fsck(t, filepath.Join(dir, "tlog"), strings.TrimSpace(logVKey(t, dir)))
}

// embeddedLogURL finds the embedded log's listener in serve's log.
func embeddedLogURL(t *testing.T, s *server) string {
	t.Helper()
	var u string
	waitFor(t, 10*time.Second, "the embedded log listens", func() bool {
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			var l struct{ Msg, URL string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "embedded transparency log listening" {
				u = l.URL
				return true
			}
		}
		return false
	})
	return u
}

// logVKey reads the embedded log's verifier key from its key record.
func logVKey(t *testing.T, dataDir string) string {
	t.Helper()
	var rec struct{ VKey string }
	if err := json.Unmarshal([]byte(mustRead(t, filepath.Join(dataDir, "tlog", logKeyFile))), &rec); err != nil {
		t.Fatal(err)
	}
	return rec.VKey
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTlogEmbeddedOwedAcrossRestart: the embedded log listens on a new
// port at each start (--tlog-embedded-listen 127.0.0.1:0), and the spool
// keeps what it owes a log under the log's URL. Records owed to the
// embedded log when serve stopped (here: recorded for its previous URL
// while it was down) reach it after the restart, at its new URL
// (moveEmbeddedCursor; found by an attack review: before, they stayed
// owed to the old URL and never reached the log).
func TestTlogEmbeddedOwedAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, nil, "--dev", "--data-dir", dir, "--tlog-embedded-listen", "127.0.0.1:0")
	url1 := embeddedLogURL(t, srv)
	srv.stop(t)
	if got := strings.TrimSpace(mustRead(t, filepath.Join(dir, "tlog", embeddedURLFile))); got != url1 {
		t.Fatalf("%s holds %q, want the embedded log's URL %q", embeddedURLFile, got, url1)
	}
	// What a run stopped with: a signature recorded for the embedded log
	// at url1 and not delivered (the log is down: serve has stopped).
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: filepath.Join(dir, spoolDirName), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := tlogclient.NewHTTPLog(url1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tlogclient.New(tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{hl}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	const owed = "eyJhbGciOiJFZERTQSJ9.b3dlZCBhY3Jvc3MgYSByZXN0YXJ0.c2ln"
	if err := c.RecordJWS(context.Background(), []string{owed}); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	srv2 := startServer(t, nil, "--dev", "--data-dir", dir, "--tlog-embedded-listen", "127.0.0.1:0")
	defer srv2.stop(t)
	url2 := embeddedLogURL(t, srv2)
	h := tlogclient.HashArtifact(owed)
	waitFor(t, 20*time.Second, "the owed signature reaches the embedded log at its new URL", func() bool {
		code, _ := httpGet(t, url2+tlogclient.PathPrefix+"proof?hash="+tlogclient.FormatHash(h))
		return code == 200
	})
	if url2 != url1 && !strings.Contains(srv2.stderr.String(), "the embedded log listens at a new URL") {
		t.Errorf("serve did not log the cursor it moved:\n%s", srv2.stderr.String())
	}
}
