package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/keysvc/keysvc/anchor"
	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/pgtest"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlog/tlogtest"
	"github.com/keysvc/keysvc/tlogclient"
)

// TestAnchorDatabaseWriterAttacks is issue 12's database-writer acceptance
// (item 5, ADR 0016) against live `keysvc serve` processes anchoring key
// history in a `keysvc tlog serve` log: someone with write access to the
// key-history database swaps a retired version's public key, inserts a
// version, un-revokes one, deletes the newest version, mints its kid again,
// truncates and rewrites the audit chain (recomputing every hash). Each is
// detected — /readyz unready naming the kid or key and an error log line,
// or `keysvc audit verify` exit 1 naming the row — and no tampered version
// is ever published (JWKS, key history) or signs; repairing the row makes
// the replica ready again. Tessera's fsck passes on the log afterwards.
func TestAnchorDatabaseWriterAttacks(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { anchorAttacks(t, "") })
	t.Run("postgres", func(t *testing.T) { anchorAttacks(t, pgtest.URL(t)) })
}

// dbWriter is raw SQL on the live key-history database, as its writer could.
type dbWriter struct {
	st store.Store
	pg bool
}

func (d dbWriter) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if d.pg {
		for i := 1; strings.Contains(q, "?"); i++ {
			q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
		}
	}
	if err := store.ExecRawForTest(context.Background(), d.st, q, args...); err != nil {
		t.Fatalf("dbWriter %q: %v", q, err)
	}
}

func (d dbWriter) ts(p *time.Time) any {
	if p == nil {
		return nil
	}
	if d.pg {
		return p.UTC()
	}
	return p.UnixMicro()
}

// insertVersion writes v as a row, every column.
func (d dbWriter) insertVersion(t *testing.T, v store.KeyVersion) {
	t.Helper()
	var sealed any
	if v.SealedPrivateKey != nil {
		sealed = v.SealedPrivateKey
	}
	d.exec(t, `INSERT INTO key_versions (kid, key_name, algorithm, backend_ref, sealed_private_key, public_jwk, state, created_at,
		published_at, activates_at, activated_at, retired_at, revoked_at, compromised_at, revocation_reason, material_destroyed_at, activation_armed_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		v.KID, v.KeyName, v.Algorithm, v.BackendRef, sealed, string(v.PublicJWK), string(v.State), d.ts(&v.CreatedAt),
		d.ts(v.PublishedAt), d.ts(v.ActivatesAt), d.ts(v.ActivatedAt), d.ts(v.RetiredAt), d.ts(v.RevokedAt), d.ts(v.CompromisedAt),
		v.RevocationReason, d.ts(v.MaterialDestroyedAt), d.ts(v.ArmedAt))
}

func (d dbWriter) version(t *testing.T, kid string) store.KeyVersion {
	t.Helper()
	v, err := d.st.GetVersion(context.Background(), kid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// forgedJWK is an Ed25519 public JWK of another key (RFC 8037 A.2's x) under kid.
func forgedJWK(kid string) []byte {
	return []byte(`{"alg":"EdDSA","crv":"Ed25519","kid":"` + kid + `","kty":"OKP","use":"sig","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}`)
}

func waitReadyz(t *testing.T, srv *server, wantReady bool, contains string) string {
	t.Helper()
	var body string
	waitFor(t, 20*time.Second, fmt.Sprintf("/readyz ready=%v containing %q", wantReady, contains), func() bool {
		var code int
		code, body = httpGet(t, srv.URL+"/readyz")
		return (code == 200) == wantReady && strings.Contains(body, contains)
	})
	return body
}

// publishedAnywhere reports whether kid appears in the key's JWKS or key
// history document.
func publishedAnywhere(t *testing.T, c *client.Client, key, kid string) bool {
	t.Helper()
	ctx := context.Background()
	h, err := c.History(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.JWKS(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(h), kid) || strings.Contains(string(j), kid)
}

func anchorAttacks(t *testing.T, pgURL string) {
	ctx := context.Background()
	logDir := t.TempDir()
	logSrv := startTlogServer(t, logDir)
	t.Cleanup(func() {
		logSrv.stop(t)
		tlogtest.Fsck(t, logDir, logSrv.VKey)
	})
	e := newLifecycleEnv(t, pgURL)
	keyFile := filepath.Join(e.dir, "anchor-key.json")
	if out, errOut, code := runCLI(t, nil, "anchor", "keygen", "--out", keyFile); code != 0 || !strings.Contains(out, `"kty":"OKP"`) || strings.Contains(out, `"d"`) {
		t.Fatalf("anchor keygen: %d %s%s", code, out, errOut)
	}
	serve := func() *server {
		return startServer(t, e.env, "--data-dir", e.dir, "--kek-file", e.kek, "--jwks-max-age", "0s",
			"--scheduler-interval", "100ms", "--reload-interval", "300ms",
			"--tlog-url", logSrv.URL, "--anchor-key-file", keyFile, "--anchor-check-interval", "300ms")
	}
	srv := serve()
	c := client.New(srv.URL, e.token)
	evKey, err := anchor.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	// inLog waits until the log serves the marker ev in a published tree.
	must := func(ev anchor.Event, err error) anchor.Event {
		if err != nil {
			panic(err) // a fixed payload always signs
		}
		return ev
	}
	inLog := func(t *testing.T, ev anchor.Event) {
		t.Helper()
		waitFor(t, 20*time.Second, "the log has "+ev.Kind+" "+ev.Subject, func() bool {
			code, _ := proofFor(logSrv.URL, tlogclient.FormatHash(ev.Hash))
			return code == 200
		})
	}
	// restart replaces the replica by a fresh process: what it finds rests
	// on key history and the log alone, nothing learned in memory.
	restart := func(t *testing.T) {
		t.Helper()
		srv.stop(t)
		srv = serve()
		c = client.New(srv.URL, e.token)
	}
	st, err := store.Open(ctx, store.Config{PostgresURL: pgURL, SQLitePath: filepath.Join(e.dir, "keysvc.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db := dbWriter{st: st, pg: pgURL != ""}
	_, first, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"})
	if err != nil {
		t.Fatal(err)
	}
	v1Active := db.version(t, first.KID) // as an older backup holds it
	active, retired, err := c.Rotate(ctx, "villa", "second version")
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := retired.KID, active.KID
	waitReadyz(t, srv, true, "ready")
	if _, err := c.Sign(ctx, "villa", map[string]any{"n": 1}, ""); err != nil {
		t.Fatal(err)
	}
	auditVerify := func() (string, int) {
		out, errOut, code := runCLI(t, e.env, "audit", "verify", "--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", logSrv.URL)
		return out + errOut, code
	}
	if out, code := auditVerify(); code != 0 || !strings.Contains(out, "audit chain anchored") {
		t.Fatalf("audit verify before any attack: %d %s", code, out)
	}
	if out, errOut, code := runCLI(t, e.env, "anchor", "check", "--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", logSrv.URL); code != 0 ||
		!strings.Contains(out, "key history backed by the transparency log: 1 keys, 2 versions") {
		t.Fatalf("anchor check before any attack: %d %s%s", code, out, errOut)
	}
	t.Run("swapped public key", func(t *testing.T) {
		orig := db.version(t, v1)
		db.exec(t, `UPDATE key_versions SET public_jwk = ? WHERE kid = ?`, string(forgedJWK(v1)), v1)
		body := waitReadyz(t, srv, false, v1)
		if !strings.Contains(body, "public key, state or instants as stored are not backed") {
			t.Fatalf("/readyz: %s", body)
		}
		if publishedAnywhere(t, c, "villa", v1) {
			t.Fatalf("the swapped version %s is published", v1)
		}
		if !strings.Contains(srv.stderr.String(), `"kid":"`+v1+`"`) {
			t.Fatalf("no log line names %s", v1)
		}
		db.exec(t, `UPDATE key_versions SET public_jwk = ? WHERE kid = ?`, string(orig.PublicJWK), v1)
		waitReadyz(t, srv, true, "ready")
		if !publishedAnywhere(t, c, "villa", v1) {
			t.Fatalf("the repaired version %s is not published", v1)
		}
	})

	t.Run("inserted version", func(t *testing.T) {
		ins := db.version(t, v1)
		ins.KID = "villaakerlyckan.se-2026-01-02-01"
		ins.PublicJWK = forgedJWK(ins.KID)
		ins.SealedPrivateKey = nil
		ins.BackendRef = "software:kid=" + ins.KID
		db.insertVersion(t, ins)
		waitReadyz(t, srv, false, ins.KID)
		if publishedAnywhere(t, c, "villa", ins.KID) {
			t.Fatalf("the inserted version %s is published", ins.KID)
		}
		db.exec(t, `DELETE FROM key_versions WHERE kid = ?`, ins.KID)
		waitReadyz(t, srv, true, "ready")
	})

	t.Run("changed key settings", func(t *testing.T) {
		db.exec(t, `UPDATE keys SET issuer = 'attacker.example' WHERE name = 'villa'`)
		body := waitReadyz(t, srv, false, "key villa: its settings")
		if publishedAnywhere(t, c, "villa", v2) {
			t.Fatalf("a key with forged settings is published: %s", body)
		}
		db.exec(t, `UPDATE keys SET issuer = 'villaakerlyckan.se' WHERE name = 'villa'`)
		waitReadyz(t, srv, true, "ready")
	})

	t.Run("rolled-back key settings", func(t *testing.T) {
		before, err := st.GetKey(ctx, "villa")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SetPolicy(ctx, "villa", client.Policy{RotationPeriod: "720h", Prepublish: "1h"}, "anchor test: a monthly rotation"); err != nil {
			t.Fatal(err)
		}
		after, err := st.GetKey(ctx, "villa")
		if err != nil || after.SettingsRev != before.SettingsRev+1 {
			t.Fatalf("settings revision %d after a policy change from %d: %v", after.SettingsRev, before.SettingsRev, err)
		}
		waitReadyz(t, srv, true, "ready")
		inLog(t, must(evKey.SettingsMarker("villa", after.SettingsRev)))
		policy := func(k store.Key) any {
			if k.Policy == nil {
				return nil
			}
			return string(k.Policy)
		}
		// The row as it was before the change: an older value whose fact
		// the log really holds.
		db.exec(t, `UPDATE keys SET policy = ?, settings_rev = ? WHERE name = 'villa'`, policy(before), before.SettingsRev)
		want := fmt.Sprintf("key villa: the transparency log records settings revision %d, but key history holds revision %d", after.SettingsRev, before.SettingsRev)
		out, errOut, code := runCLI(t, e.env, "anchor", "check", "--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", logSrv.URL)
		if code != 1 || !strings.Contains(out, "NOT BACKED: "+want) {
			t.Fatalf("anchor check after the rollback: %d %s%s", code, out, errOut)
		}
		for _, fresh := range []bool{false, true} {
			if fresh {
				restart(t)
			}
			body := waitReadyz(t, srv, false, want)
			if publishedAnywhere(t, c, "villa", v2) {
				t.Fatalf("a key with rolled-back settings is published (fresh process %v): %s", fresh, body)
			}
		}
		var ce *client.Error
		if _, err := c.Sign(ctx, "villa", map[string]any{"n": 4}, ""); !errors.As(err, &ce) || ce.Status != 409 || ce.Code != "key_history_not_backed" {
			t.Fatalf("sign with rolled-back key settings: %v", err)
		}
		db.exec(t, `UPDATE keys SET policy = ?, settings_rev = ? WHERE name = 'villa'`, policy(after), after.SettingsRev)
		waitReadyz(t, srv, true, "ready")
	})

	t.Run("un-revoked version", func(t *testing.T) {
		time.Sleep(1100 * time.Millisecond)
		if _, _, err := c.Revoke(ctx, v1, time.Now().UTC().Add(-time.Second).Format(time.RFC3339Nano), "anchor test: compromised"); err != nil {
			t.Fatal(err)
		}
		waitReadyz(t, srv, true, "ready")
		inLog(t, must(evKey.StateMarker(v1, "revoked")))
		orig := db.version(t, v1)
		db.exec(t, `UPDATE key_versions SET state = 'retired', revoked_at = NULL, compromised_at = NULL, revocation_reason = '' WHERE kid = ?`, v1)
		out, errOut, code := runCLI(t, e.env, "anchor", "check", "--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", logSrv.URL)
		if code != 1 || !strings.Contains(out, "NOT BACKED: version "+v1+": the transparency log records state revoked") {
			t.Fatalf("anchor check after the un-revoke: %d %s%s", code, out, errOut)
		}
		for _, fresh := range []bool{false, true} {
			if fresh {
				restart(t)
			}
			body := waitReadyz(t, srv, false, v1)
			if !strings.Contains(body, "records state revoked") {
				t.Fatalf("/readyz (fresh process %v): %s", fresh, body)
			}
			if publishedAnywhere(t, c, "villa", v1) {
				t.Fatalf("the un-revoked version %s is published (fresh process %v)", v1, fresh)
			}
		}
		db.exec(t, `UPDATE key_versions SET state = 'revoked', revoked_at = ?, compromised_at = ?, revocation_reason = ? WHERE kid = ?`,
			db.ts(orig.RevokedAt), db.ts(orig.CompromisedAt), orig.RevocationReason, v1)
		waitReadyz(t, srv, true, "ready")
	})

	t.Run("deleted and re-minted version", func(t *testing.T) {
		orig1, orig2 := db.version(t, v1), db.version(t, v2)
		inLog(t, must(evKey.OrdinalMarker("villa", 2)))
		inLog(t, must(evKey.KIDMarker(v2)))
		db.exec(t, `DELETE FROM key_versions WHERE kid = ?`, v2)
		var body string
		for _, fresh := range []bool{false, true} {
			if fresh {
				restart(t)
			}
			body = waitReadyz(t, srv, false, "key villa")
			if !strings.Contains(body, "records a version number 2, but key history holds 1 versions") {
				t.Fatalf("/readyz (fresh process %v): %s", fresh, body)
			}
		}
		// The database writer mints v2 again with a key of their own.
		forged := orig2
		forged.PublicJWK = forgedJWK(v2)
		db.insertVersion(t, forged)
		waitReadyz(t, srv, false, "version "+v2)
		if publishedAnywhere(t, c, "villa", v2) {
			t.Fatalf("the re-minted version %s is published", v2)
		}
		var ce *client.Error
		if _, err := c.Sign(ctx, "villa", map[string]any{"n": 2}, ""); !errors.As(err, &ce) || ce.Status != 409 || ce.Code != "key_history_not_backed" {
			t.Fatalf("sign with the re-minted version: %v", err)
		}
		// Key history as an older backup holds it (v1 active, no v2): v1 is
		// rolled back, and the node mints no kid while the log knows more.
		db.exec(t, `DELETE FROM key_versions WHERE kid IN (?, ?)`, v1, v2)
		db.insertVersion(t, v1Active)
		body = waitReadyz(t, srv, false, "version "+v1)
		if !strings.Contains(body, "rolled back") {
			t.Fatalf("/readyz: %s", body)
		}
		if _, _, err := c.Rotate(ctx, "villa", "after the restore"); !errors.As(err, &ce) || ce.Status != 409 || ce.Code != "key_history_not_backed" {
			t.Fatalf("rotate after the restore: %v", err)
		}
		if vs, err := st.ListVersions(ctx, "villa"); err != nil || len(vs) != 1 || vs[0].KID != v1 {
			t.Fatalf("versions after the refused rotation: %v %v", vs, err)
		}
		db.exec(t, `DELETE FROM key_versions WHERE kid = ?`, v1)
		db.insertVersion(t, orig1)
		db.insertVersion(t, orig2)
		waitReadyz(t, srv, true, "ready")
		if _, err := c.Sign(ctx, "villa", map[string]any{"n": 3}, ""); err != nil {
			t.Fatal(err)
		}
	})

	srv.stop(t)
	rows, err := st.ListAudit(ctx, 0, 0)
	if err != nil || len(rows) < 6 {
		t.Fatalf("audit rows: %d %v", len(rows), err)
	}
	if out, code := auditVerify(); code != 0 || !strings.Contains(out, fmt.Sprintf("%d of %d rows anchored", len(rows), len(rows))) {
		t.Fatalf("audit verify before tampering: %d %s", code, out)
	}

	t.Run("pinned log keys", func(t *testing.T) {
		// The database writer deletes anchor_events, so that every fact
		// and audit row must be found in the log, its proofs verified
		// under --tlog-log-keys: the log's own keys back all of it; a key
		// set with the log's kid and another public key backs none of it,
		// for anchor check and audit verify alike.
		_, logJWKS := httpGet(t, logSrv.URL+tlogclient.PathPrefix+"jwks.json")
		var logKeys struct {
			Keys []struct {
				KID string `json:"kid"`
			} `json:"keys"`
		}
		if err := json.Unmarshal([]byte(logJWKS), &logKeys); err != nil || len(logKeys.Keys) == 0 {
			t.Fatalf("log jwks.json: %v %s", err, logJWKS)
		}
		pinned, wrong := filepath.Join(e.dir, "log-keys.json"), filepath.Join(e.dir, "wrong-log-keys.json")
		if err := os.WriteFile(pinned, []byte(logJWKS), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(wrong, []byte(`{"keys":[`+string(forgedJWK(logKeys.Keys[0].KID))+`]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		db.exec(t, `DELETE FROM anchor_events`)
		check := func(keys string) (string, int, string, int) {
			t.Helper()
			checkOut, checkErr, checkCode := runCLI(t, e.env, "anchor", "check", "--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", logSrv.URL, "--tlog-log-keys", keys)
			auditOut, auditErr, auditCode := runCLI(t, e.env, "audit", "verify", "--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", logSrv.URL, "--tlog-log-keys", keys)
			return checkOut + checkErr, checkCode, auditOut + auditErr, auditCode
		}
		checkOut, checkCode, auditOut, auditCode := check(pinned)
		if checkCode != 0 || !strings.Contains(checkOut, "key history backed by the transparency log: 1 keys, ") ||
			auditCode != 0 || !strings.Contains(auditOut, fmt.Sprintf("%d of %d rows anchored", len(rows), len(rows))) {
			t.Fatalf("with the log's keys pinned: anchor check %d %s; audit verify %d %s", checkCode, checkOut, auditCode, auditOut)
		}
		checkOut, checkCode, auditOut, auditCode = check(wrong)
		if checkCode != 1 || !strings.Contains(checkOut, "NOT BACKED: ") || strings.Contains(checkOut, "key history backed") ||
			auditCode == 0 || strings.Contains(auditOut, "rows anchored") {
			t.Fatalf("with other log keys pinned: anchor check %d %s; audit verify %d %s", checkCode, checkOut, auditCode, auditOut)
		}
	})
	t.Run("marker hidden by the log's answers", func(t *testing.T) {
		// Whoever answers for the log (the log itself, or anyone on a
		// plain-HTTP path) answers "not found" for v1's revoked marker, and
		// the database writer un-revokes v1 (anchor_events is gone): look-ups
		// see nothing wrong, for pinned keys cannot sign an absence. --scan
		// reads every entry against the signed tree and finds the marker; a
		// log that also drops it from its entry bundles no longer hashes to
		// the root it signed.
		pinned := filepath.Join(e.dir, "log-keys.json")
		revoked := must(evKey.StateMarker(v1, "revoked"))
		hidden := tlogclient.FormatHash(revoked.Hash)
		hiddenHex := strings.TrimPrefix(hidden, "sha256:")
		otherHex := strings.Repeat("0", len(hiddenHex))
		var tamperBundles atomic.Bool
		var bundlesTampered atomic.Int64
		target, err := url.Parse(logSrv.URL)
		if err != nil {
			t.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(target)
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case strings.HasSuffix(r.URL.Path, "/proof") && r.URL.Query().Get("hash") == hidden:
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, `{"error":{"code":"not_found","message":"the hash is not in a signed tree"}}`)
			case tamperBundles.Load() && strings.HasPrefix(r.URL.Path, "/tile/entries/"):
				rec := httptest.NewRecorder()
				rp.ServeHTTP(rec, r)
				body := rec.Body.Bytes()
				if bytes.Contains(body, []byte(hiddenHex)) {
					body = bytes.Replace(body, []byte(hiddenHex), []byte(otherHex), 1)
					bundlesTampered.Add(1)
				}
				w.WriteHeader(rec.Code)
				w.Write(body)
			default:
				rp.ServeHTTP(w, r)
			}
		}))
		defer proxy.Close()
		orig := db.version(t, v1)
		db.exec(t, `UPDATE key_versions SET state = 'retired', revoked_at = NULL, compromised_at = NULL, revocation_reason = '' WHERE kid = ?`, v1)
		defer db.exec(t, `UPDATE key_versions SET state = 'revoked', revoked_at = ?, compromised_at = ?, revocation_reason = ? WHERE kid = ?`,
			db.ts(orig.RevokedAt), db.ts(orig.CompromisedAt), orig.RevocationReason, v1)
		run := func(args ...string) (string, int) {
			t.Helper()
			out, errOut, code := runCLI(t, e.env, append(args, "--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", proxy.URL, "--tlog-log-keys", pinned)...)
			return out + errOut, code
		}
		if out, code := run("anchor", "check"); code != 0 || !strings.Contains(out, "key history backed by the transparency log: 1 keys, 2 versions") {
			t.Fatalf("look-ups through the hiding log should see nothing (the attack this test is about): %d %s", code, out)
		}
		scanned := regexp.MustCompile(`scanned ` + regexp.QuoteMeta(proxy.URL) + `: log \S+, tree size [1-9][0-9]* \(STH of 20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ\), [1-9][0-9]* status events, every entry hashed to the signed root`)
		out, code := run("anchor", "check", "--scan")
		if code != 1 || !scanned.MatchString(out) || !strings.Contains(out, "NOT BACKED: version "+v1+": the transparency log records state revoked") {
			t.Fatalf("anchor check --scan through the hiding log: %d %s", code, out)
		}
		if out, code := run("audit", "verify", "--scan"); code != 0 || !scanned.MatchString(out) || !strings.Contains(out, fmt.Sprintf("%d of %d rows anchored", len(rows), len(rows))) {
			t.Fatalf("audit verify --scan: %d %s", code, out)
		}
		// A tree older than --max-tree-age (here any tree: 1 ms) is not
		// read: the log could be serving one from before the marker. (An
		// STH's time is whole seconds rounded up: let it age past that.)
		time.Sleep(1500 * time.Millisecond)
		out, code = run("anchor", "check", "--scan", "--max-tree-age", "1ms")
		if code != 1 || !strings.Contains(out, "--scan "+proxy.URL+": tlogaudit: the tree is stale: log ") || !strings.Contains(out, "over the 1ms allowed") ||
			strings.Contains(out, "key history backed") {
			t.Fatalf("anchor check --scan --max-tree-age 1ms: %d %s", code, out)
		}
		// A witness required that never cosigned this log's trees: the
		// scan reads no tree at all.
		_, witnessVKey, err := note.GenerateKey(rand.Reader, "witness.example.test/never")
		if err != nil {
			t.Fatal(err)
		}
		witnesses := filepath.Join(e.dir, "witnesses.txt")
		if err := os.WriteFile(witnesses, []byte("# a witness this log never asked\n"+witnessVKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, code = run("anchor", "check", "--scan", "--witness-keys", witnesses)
		if code != 1 || !strings.Contains(out, "the checkpoint carries 0 of the 1 witness cosignatures required") || strings.Contains(out, "key history backed") {
			t.Fatalf("anchor check --scan requiring a witness that never cosigned: %d %s", code, out)
		}
		// The same log behind two URLs: its tree could stand in for
		// another log's, whose markers the joined answers would then lack.
		out, code = run("anchor", "check", "--scan", "--tlog-url", logSrv.URL)
		if code != 1 || !strings.Contains(out, "both serve log ") || strings.Contains(out, "key history backed") {
			t.Fatalf("anchor check --scan with one log behind two URLs: %d %s", code, out)
		}
		tamperBundles.Store(true)
		out, code = run("anchor", "check", "--scan")
		if code != 1 || bundlesTampered.Load() == 0 || !strings.Contains(out, "--scan "+proxy.URL+": ") || !strings.Contains(out, ": the entries hash to root ") ||
			strings.Contains(out, "key history backed") {
			t.Fatalf("anchor check --scan with the marker dropped from the entry bundles (%d bundles changed): %d %s", bundlesTampered.Load(), code, out)
		}
	})
	t.Run("an event the log never received", func(t *testing.T) {
		// A row of anchor_events signed two hours before the newest tree
		// that no scanned tree holds: the node's own record of an event
		// without the log's (never logged, or dropped by the log). --scan
		// names it; without the row the check passes again.
		pinned := filepath.Join(e.dir, "log-keys.json")
		never := sha256.Sum256([]byte("an anchoring event no log received"))
		signed := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
		db.exec(t, `INSERT INTO anchor_events (artifact_hash, kind, subject, jws, created_at) VALUES (?, ?, ?, ?, ?)`,
			never[:], "version", "villa-never-logged", "e30.e30.AA", db.ts(&signed))
		// One signed 5 minutes ago is within --max-log-delay (15m): not named.
		recent, recentAt := sha256.Sum256([]byte("an anchoring event still on its way")), time.Now().Add(-5*time.Minute)
		db.exec(t, `INSERT INTO anchor_events (artifact_hash, kind, subject, jws, created_at) VALUES (?, ?, ?, ?, ?)`,
			recent[:], "version", "villa-on-its-way", "e30.e30.AB", db.ts(&recentAt))
		defer db.exec(t, `DELETE FROM anchor_events WHERE artifact_hash = ?`, recent[:])
		run := func() (string, int) {
			t.Helper()
			out, errOut, code := runCLI(t, e.env, "anchor", "check", "--scan", "--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", logSrv.URL, "--tlog-log-keys", pinned)
			return out + errOut, code
		}
		want := fmt.Sprintf("NOT LOGGED: version villa-never-logged (%s), signed %s: in anchor_events, but in none of the scanned trees (current at ",
			tlogclient.FormatHash(never), signed.UTC().Format(time.RFC3339))
		if out, code := run(); code != 1 || !strings.Contains(out, want) || strings.Count(out, "NOT LOGGED") != 1 || strings.Contains(out, "NOT BACKED") || strings.Contains(out, "key history backed") {
			t.Fatalf("anchor check --scan with an event no log received: %d %s", code, out)
		}
		// audit verify --scan names it too.
		if out, errOut, code := runCLI(t, e.env, "audit", "verify", "--scan", "--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", logSrv.URL, "--tlog-log-keys", pinned); code != 1 || !strings.Contains(out, want) {
			t.Fatalf("audit verify --scan with an event no log received: %d %s%s", code, out, errOut)
		}
		db.exec(t, `DELETE FROM anchor_events WHERE artifact_hash = ?`, never[:])
		if out, code := run(); code != 0 || strings.Contains(out, "NOT LOGGED") || !strings.Contains(out, "key history backed by the transparency log") {
			t.Fatalf("anchor check --scan once the row is gone: %d %s", code, out)
		}
	})
	if db.pg {
		db.exec(t, `ALTER TABLE audit_events DISABLE TRIGGER USER`)
	} else {
		db.exec(t, `DROP TRIGGER audit_events_no_update`)
		db.exec(t, `DROP TRIGGER audit_events_no_delete`)
	}

	t.Run("truncated audit chain", func(t *testing.T) {
		n := int64(len(rows))
		db.exec(t, `DELETE FROM audit_events WHERE seq >= ?`, n-1)
		if out, _, code := runCLI(t, e.env, "audit", "verify", "--data-dir", e.dir); code != 0 {
			t.Fatalf("the chain alone should look intact after truncation: %d %s", code, out)
		}
		out, code := auditVerify()
		if code != 1 || !strings.Contains(out, fmt.Sprintf("DIVERGES from the transparency log at row %d", n-1)) || !strings.Contains(out, "truncated") {
			t.Fatalf("audit verify after truncation: %d %s", code, out)
		}
	})

	t.Run("rewritten audit chain", func(t *testing.T) {
		kept, err := st.ListAudit(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		prev := kept[1].PrevHash
		for i := 1; i < len(kept); i++ {
			r := kept[i]
			if i == 1 {
				r.Reason = "nothing happened here"
			}
			r.PrevHash = prev
			h, err := store.AuditHash(r)
			if err != nil {
				t.Fatal(err)
			}
			db.exec(t, `UPDATE audit_events SET reason = ?, prev_hash = ?, hash = ? WHERE seq = ?`, r.Reason, r.PrevHash, h, r.Seq)
			prev = h
		}
		if out, _, code := runCLI(t, e.env, "audit", "verify", "--data-dir", e.dir); code != 0 {
			t.Fatalf("the recomputed chain alone should look intact: %d %s", code, out)
		}
		out, code := auditVerify()
		if code != 1 || !strings.Contains(out, "DIVERGES from the transparency log at row 2") {
			t.Fatalf("audit verify after the rewrite: %d %s", code, out)
		}
	})
}

// TestAnchorReplicasRotate: two replicas on one PostgreSQL key history,
// anchored in a log, rotate a key every 3 s under signing load: anchoring
// adds no gap at the switches (a new version's facts are committed with
// it, so every replica finds them backed at once), every signature
// verifies against the published history, both replicas stay ready, and
// fsck passes on the log.
func TestAnchorReplicasRotate(t *testing.T) {
	logDir := t.TempDir()
	logSrv := startTlogServer(t, logDir)
	t.Cleanup(func() {
		logSrv.stop(t)
		tlogtest.Fsck(t, logDir, logSrv.VKey)
	})
	keyFile := filepath.Join(t.TempDir(), "anchor-key.json")
	if _, errOut, code := runCLI(t, nil, "anchor", "keygen", "--out", keyFile); code != 0 {
		t.Fatalf("anchor keygen: %s", errOut)
	}
	rs := newReplicaSet(t, pgtest.URL(t), 2, "--tlog-url", logSrv.URL, "--anchor-key-file", keyFile, "--anchor-check-interval", "500ms")
	rs.createKey("anch", "--rotation-period", "3s", "--prepublish", "1500ms")
	sg := rs.startSigners(40*time.Millisecond, 0)
	time.Sleep(12 * time.Second)
	rep := assertWindows(t, rs, sg.halt())
	if rep.Refused != 0 {
		t.Errorf("%d signing requests refused %v: anchoring must leave no gap at a rotation", rep.Refused, rep.RefusedByCode)
	}
	if rep.Retired < 2 {
		t.Errorf("%d rotations completed, want at least 2", rep.Retired)
	}
	for i := range rs.srvs {
		if code, body := httpGetQuiet(rs.url(i) + "/readyz"); code != 200 {
			t.Errorf("replica %d: /readyz %d %s", i, code, body)
		}
		if s := rs.srvs[i].stderr.String(); strings.Contains(s, "not backed") {
			t.Errorf("replica %d logged key history not backed:\n%s", i, s)
		}
	}
}

// TestAnchorLogOutage: with the log stopped, an anchored replica keeps
// signing and stays ready (what it checked stays checked; no log round
// trip on the signing path or in its reloads), a rotation — which must
// mint a kid the log has never seen — is refused with 503 tlog_unavailable
// and changes nothing, and once the log is back the rotation succeeds.
func TestAnchorLogOutage(t *testing.T) {
	ctx := context.Background()
	logDir := t.TempDir()
	const logAddr = "127.0.0.1:27031"
	logSrv := startTlogServer(t, logDir, "--listen", logAddr)
	t.Cleanup(func() {
		logSrv.stop(t)
		tlogtest.Fsck(t, logDir, logSrv.VKey)
	})
	e := newLifecycleEnv(t, "")
	keyFile := filepath.Join(e.dir, "anchor-key.json")
	srv := startServer(t, e.env, "--data-dir", e.dir, "--kek-file", e.kek, "--jwks-max-age", "0s",
		"--scheduler-interval", "100ms", "--reload-interval", "300ms", "--dev",
		"--tlog-url", logSrv.URL, "--anchor-key-file", keyFile, "--anchor-check-interval", "300ms")
	c := client.New(srv.URL, e.token)
	if _, _, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, srv, true, "ready")
	logSrv.stop(t)
	deadline := time.Now().Add(3 * time.Second) // ten reloads and background checks
	for n := 0; time.Now().Before(deadline); n++ {
		if _, err := c.Sign(ctx, "villa", map[string]any{"n": n}, ""); err != nil {
			t.Fatalf("sign %d with the log down: %v", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := httpGet(t, srv.URL+"/readyz"); code != 200 {
		t.Fatalf("/readyz with the log down: %d %s", code, body)
	}
	var ce *client.Error
	if _, _, err := c.Rotate(ctx, "villa", "during the outage"); !errors.As(err, &ce) || ce.Status != 503 || ce.Code != "tlog_unavailable" {
		t.Fatalf("rotate with the log down: %v", err)
	}
	if vs, err := c.Versions(ctx, "villa"); err != nil || len(vs) != 1 {
		t.Fatalf("versions after the refused rotation: %v %v", vs, err)
	}
	logSrv = startTlogServer(t, logDir, "--listen", logAddr)
	waitFor(t, 20*time.Second, "a rotation once the log is back", func() bool {
		_, _, err := c.Rotate(ctx, "villa", "after the outage")
		return err == nil
	})
	waitReadyz(t, srv, true, "ready")
	if _, err := c.Sign(ctx, "villa", map[string]any{"after": true}, ""); err != nil {
		t.Fatal(err)
	}
}

// TestAnchorOfflineTokens: on anchored key history, tokens create and
// tokens revoke (which write key history directly, not through serve)
// anchor their audit rows with --anchor-key-file, so audit verify finds
// every row anchored; without the event key, create is refused (with
// --unanchored too, once API tokens are anchored: ADR 0053) and revoke
// goes on with a warning — serve then anchors that revocation on sight —
// and audit verify counts exactly those rows as not anchored.
func TestAnchorOfflineTokens(t *testing.T) {
	logDir := t.TempDir()
	logSrv := startTlogServer(t, logDir)
	t.Cleanup(func() {
		logSrv.stop(t)
		tlogtest.Fsck(t, logDir, logSrv.VKey)
	})
	e := newLifecycleEnv(t, "")
	keyFile := filepath.Join(e.dir, "anchor-key.json")
	if _, errOut, code := runCLI(t, nil, "anchor", "keygen", "--out", keyFile); code != 0 {
		t.Fatalf("anchor keygen: %d %s", code, errOut)
	}
	// A first start anchors key history as it stands (the officer's token).
	srv := startServer(t, e.env, "--data-dir", e.dir, "--kek-file", e.kek, "--tlog-url", logSrv.URL, "--anchor-key-file", keyFile)
	waitReadyz(t, srv, true, "ready")
	evKey, err := anchor.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	inLog := func(ev anchor.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "the log has "+ev.Kind+" "+ev.Subject, func() bool {
			code, _ := proofFor(logSrv.URL, tlogclient.FormatHash(ev.Hash))
			return code == 200
		})
	}
	// The bootstrap is in the log after the first start, not only in
	// anchor_events (deleting those must not make a later start bootstrap
	// again).
	inLog(evKey.BootstrapMarker())
	srv.stop(t)

	anchored := []string{"--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", logSrv.URL}
	auditVerify := func(t *testing.T, want string) {
		t.Helper()
		out, errOut, code := runCLI(t, e.env, append([]string{"audit", "verify"}, anchored...)...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("audit verify: %d %s%s\nwant %q", code, out, errOut, want)
		}
	}
	auditVerify(t, "audit chain anchored: 1 of 1 rows anchored in the transparency log\n")

	_, errOut, code := runCLI(t, e.env, "tokens", "create", "--name", "node-1", "--scope", "sign:*", "--data-dir", e.dir)
	if code == 0 || !strings.Contains(errOut, "API tokens are anchored in a transparency log (ADR 0053): serve accepts a token only with its fact") {
		t.Fatalf("tokens create without the event key: %d %s", code, errOut)
	}
	auditVerify(t, "1 of 1 rows anchored") // refused: nothing written

	out, errOut, code := runCLI(t, e.env, append([]string{"tokens", "create", "--name", "node-1", "--scope", "sign:*", "--reason", "node one"}, anchored...)...)
	if code != 0 || !strings.HasPrefix(out, "ksv_") {
		t.Fatalf("tokens create with the event key: %d %s%s", code, out, errOut)
	}
	auditVerify(t, "audit chain anchored: 2 of 2 rows anchored in the transparency log\n")

	// Once API tokens are anchored (the first start did), a token written
	// without the event key would never be accepted (ADR 0053):
	// --unanchored is refused too.
	_, errOut, code = runCLI(t, e.env, "tokens", "create", "--name", "node-2", "--scope", "sign:*", "--data-dir", e.dir, "--unanchored")
	if code == 0 || !strings.Contains(errOut, "API tokens are anchored in a transparency log (ADR 0053)") {
		t.Fatalf("tokens create --unanchored once tokens are anchored: %d %s", code, errOut)
	}
	auditVerify(t, "2 of 2 rows anchored") // refused: nothing written
	if out, errOut, code = runCLI(t, e.env, append([]string{"tokens", "create", "--name", "node-2", "--scope", "sign:*"}, anchored...)...); code != 0 {
		t.Fatalf("tokens create node-2: %d %s%s", code, out, errOut)
	}
	auditVerify(t, "audit chain anchored: 3 of 3 rows anchored in the transparency log\n")

	ids := tokenIDs(t, e)
	_, errOut, code = runCLI(t, e.env, "tokens", "revoke", ids["node-2"], "--data-dir", e.dir, "--reason", "gone")
	if code != 0 || !strings.Contains(errOut, "keysvc: warning: key history is anchored in a transparency log, but no --anchor-key-file was given") {
		t.Fatalf("tokens revoke without the event key: %d %s", code, errOut)
	}
	auditVerify(t, "3 of 4 rows anchored in the transparency log (1 written without the event key")
	if _, errOut, code = runCLI(t, e.env, append([]string{"tokens", "revoke", ids["node-1"], "--reason", "rotated"}, anchored...)...); code != 0 {
		t.Fatalf("tokens revoke with the event key: %d %s", code, errOut)
	}
	auditVerify(t, "4 of 5 rows anchored in the transparency log (1 written without the event key")
	// The anchored rows are in the log itself, not only in anchor_events: a
	// verifier without the database's events finds their markers.
	inLog(evKey.AuditSeqMarker(5))
	inLog(evKey.TokenRevokedMarker(ids["node-1"]))

	// Another node's event key is refused: its facts would be rows that
	// node's own audit trail lacks.
	otherKey := filepath.Join(t.TempDir(), "other-key.json")
	if _, errOut, code := runCLI(t, nil, "anchor", "keygen", "--out", otherKey); code != 0 {
		t.Fatalf("anchor keygen: %d %s", code, errOut)
	}
	_, errOut, code = runCLI(t, e.env, "tokens", "create", "--name", "node-3", "--scope", "sign:*", "--data-dir", e.dir, "--anchor-key-file", otherKey, "--tlog-url", logSrv.URL)
	if code == 0 || !strings.Contains(errOut, "key history was not anchored with the event key in "+otherKey) {
		t.Fatalf("tokens create with another node's event key: %d %s", code, errOut)
	}
	auditVerify(t, "4 of 5 rows anchored")

	// A log that does not take the row: committed, the operator warned, and
	// a running replica submits it from anchor_events at its next check.
	srv = startServer(t, e.env, "--data-dir", e.dir, "--kek-file", e.kek, "--tlog-url", logSrv.URL, "--anchor-key-file", keyFile, "--anchor-check-interval", "300ms")
	waitReadyz(t, srv, true, "ready")
	out, errOut, code = runCLI(t, e.env, "tokens", "create", "--name", "node-3", "--scope", "admin:keys", "--data-dir", e.dir, "--anchor-key-file", keyFile, "--tlog-url", "http://127.0.0.1:1")
	if code != 0 || !strings.HasPrefix(out, "ksv_") || !strings.Contains(errOut, "keysvc: warning: the change is committed and its audit row anchored in anchor_events, but not every transparency log took it yet") {
		t.Fatalf("tokens create with the log unreachable: %d %s%s", code, out, errOut)
	}
	inLog(evKey.AuditSeqMarker(6))
	// The token's fact is in anchor_events: serve accepts it, and records
	// it for the log.
	node3 := client.New(srv.URL, strings.TrimSpace(out))
	waitFor(t, 10*time.Second, "node-3's token accepted", func() bool {
		_, err := node3.ListKeys(context.Background())
		return err == nil
	})
	if rec, err := tokenRecord(t, e, "node-3"); err != nil {
		t.Fatal(err)
	} else {
		inLog(evKey.TokenFact(rec))
	}
	// The revocation made without the event key is anchored by serve on
	// sight: clearing it in the database later is caught.
	inLog(evKey.TokenRevokedMarker(ids["node-2"]))
	srv.stop(t)
	auditVerify(t, "5 of 6 rows anchored in the transparency log (1 written without the event key")
}

// tokenRecord reads the stored token named name.
func tokenRecord(t *testing.T, e *lifecycleEnv, name string) (store.APIToken, error) {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{SQLitePath: filepath.Join(e.dir, "keysvc.db")})
	if err != nil {
		return store.APIToken{}, err
	}
	defer st.Close()
	list, err := st.ListTokens(context.Background())
	if err != nil {
		return store.APIToken{}, err
	}
	for _, tk := range list {
		if tk.Name == name {
			return tk, nil
		}
	}
	return store.APIToken{}, fmt.Errorf("no token named %s", name)
}

// tokenIDs maps token names to ids (keysvc tokens list).
func tokenIDs(t *testing.T, e *lifecycleEnv) map[string]string {
	t.Helper()
	out, errOut, code := runCLI(t, e.env, "tokens", "list", "--data-dir", e.dir)
	if code != 0 {
		t.Fatalf("tokens list: %d %s", code, errOut)
	}
	ids := map[string]string{}
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 2 {
			ids[f[1]] = f[0]
		}
	}
	return ids
}
