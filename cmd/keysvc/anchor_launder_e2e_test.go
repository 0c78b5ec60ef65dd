package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/anchor"
	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// TestAnchorChangesRefuseUnbackedRows: a database writer edits a row of
// key history; the edit is not backed by the log, so serve withholds it.
// A lifecycle change signs every row it touches as it reads it back, so
// the next change to that row used to sign the edit into a backed fact
// and publish it (an attack review, session 46):
//   - an officer rotating away from an active version whose public key
//     was swapped ("the active version is not backed": the natural
//     answer) published the swapped key as a backed retired version;
//   - destroying the material of a revoked version whose
//     vrp_compromised_at was moved a month later published the later
//     instant, which makes a month of forged signatures acceptable;
//   - the scheduler, with no officer acting, retired an armed key's
//     swapped active version, backed.
//
// Now a change to a row whose stored fact is not backed — or to a key one
// of whose versions is not — is refused (409 key_history_not_backed), the
// row stays withheld, and once the row is put back the change goes
// through. A case-variant "X" member added to
// a stored JWK is not backed either (TestStoredJWKReadOneWay).
func TestAnchorChangesRefuseUnbackedRows(t *testing.T) {
	ctx := context.Background()
	logSrv := startTlogServer(t, t.TempDir())
	t.Cleanup(func() { logSrv.stop(t) })
	e := newLifecycleEnv(t, "")
	keyFile := filepath.Join(e.dir, "anchor-key.json")
	if _, errOut, code := runCLI(t, nil, "anchor", "keygen", "--out", keyFile); code != 0 {
		t.Fatalf("anchor keygen: %s", errOut)
	}
	// A second officer, created before the first start anchors history.
	out, errOut, code := runCLI(t, e.env, "tokens", "create", "--name", "bob", "--scope", "admin:revoke", "--scope", "admin:keys", "--data-dir", e.dir)
	if code != 0 {
		t.Fatalf("tokens create bob: %s", errOut)
	}
	bobToken := strings.TrimSpace(out)
	srv := startServer(t, e.env, "--data-dir", e.dir, "--kek-file", e.kek, "--jwks-max-age", "0s",
		"--scheduler-interval", "100ms", "--reload-interval", "300ms",
		"--tlog-url", logSrv.URL, "--anchor-key-file", keyFile, "--anchor-check-interval", "300ms")
	c := client.New(srv.URL, e.token)
	evKey, err := anchor.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, store.Config{SQLitePath: filepath.Join(e.dir, "keysvc.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db := dbWriter{st: st}
	entry := func(name, kid string) map[string]any {
		h, err := c.History(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Keys    []map[string]any `json:"keys"`
			Revoked []map[string]any `json:"vrp_revoked_keys"`
		}
		if err := json.Unmarshal(h, &doc); err != nil {
			t.Fatal(err)
		}
		for _, e := range append(doc.Keys, doc.Revoked...) {
			if e["kid"] == kid {
				return e
			}
		}
		return nil
	}
	notBacked := func(t *testing.T, what string, err error) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 409 || ce.Code != "key_history_not_backed" || !strings.Contains(ce.Message, "as stored is not backed by the transparency log") {
			t.Fatalf("%s of a row the log does not back: %v; want 409 key_history_not_backed", what, err)
		}
	}

	_, first, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"})
	if err != nil {
		t.Fatal(err)
	}
	active, _, err := c.Rotate(ctx, "villa", "second version")
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := first.KID, active.KID
	waitReadyz(t, srv, true, "ready")

	t.Run("rotating away from a swapped active key", func(t *testing.T) {
		orig := db.version(t, v2)
		db.exec(t, `UPDATE key_versions SET public_jwk = ? WHERE kid = ?`, string(forgedJWK(v2)), v2)
		waitReadyz(t, srv, false, v2)
		// The key takes no change while one of its versions is not
		// backed (the lifecycle code decides on all of them; ADR 0050's
		// third review): the rotation is refused, nothing is minted.
		_, _, err := c.Rotate(ctx, "villa", "active version not backed; rotating away")
		notBacked(t, "rotating away from a swapped active key", err)
		if vs, err := st.ListVersions(ctx, "villa"); err != nil || len(vs) != 2 {
			t.Fatalf("versions after the refused rotation: %d, %v", len(vs), err)
		}
		if got := db.version(t, v2); got.State != store.StateActive || string(got.PublicJWK) != string(forgedJWK(v2)) {
			t.Fatalf("the refused rotation changed the swapped active version %s: %+v", v2, got)
		}
		if en := entry("villa", v2); en != nil && en["x"] == forgedJWKX {
			t.Fatalf("the swapped key is published: %v", en)
		}
		// Put back: backed again, and the rotation goes through.
		db.exec(t, `UPDATE key_versions SET public_jwk = ? WHERE kid = ?`, string(orig.PublicJWK), v2)
		waitReadyz(t, srv, true, "ready")
		next, _, err := c.Rotate(ctx, "villa", "rotating once it is put back")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, next.KID+" active once "+v2+" is put back", func() bool {
			return db.version(t, next.KID).State == store.StateActive
		})
		waitReadyz(t, srv, true, "ready")
		if en := entry("villa", v2); en == nil || en["x"] != publicX(t, orig) || en["vrp_key_status"] != "retired" {
			t.Fatalf("%s after the switch: %v", v2, en)
		}
	})

	t.Run("destroying a revoked key whose compromise instant moved", func(t *testing.T) {
		compromised := time.Now().UTC().Add(-time.Second).Truncate(time.Second)
		if _, _, err := c.Revoke(ctx, v1, compromised.Format(time.RFC3339Nano), "compromised"); err != nil {
			t.Fatal(err)
		}
		waitReadyz(t, srv, true, "ready")
		ev, err := evKey.StateMarker(v1, "revoked")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "the revoked marker in the log", func() bool {
			code, _ := proofFor(logSrv.URL, tlogclient.FormatHash(ev.Hash))
			return code == 200
		})
		orig := db.version(t, v1)
		later := compromised.Add(30 * 24 * time.Hour)
		db.exec(t, `UPDATE key_versions SET compromised_at = ? WHERE kid = ?`, db.ts(&later), v1)
		waitReadyz(t, srv, false, v1)
		_, err = c.DestroyVersion(ctx, v1, "destroy the compromised key's material", 0)
		notBacked(t, "destroying", err)
		if en := entry("villa", v1); en != nil {
			t.Fatalf("a revoked version with a moved compromise instant is published: %v", en)
		}
		db.exec(t, `UPDATE key_versions SET compromised_at = ? WHERE kid = ?`, db.ts(orig.CompromisedAt), v1)
		waitReadyz(t, srv, true, "ready")
		if en := entry("villa", v1); en == nil || en["vrp_compromised_at"] != compromised.Format(time.RFC3339) {
			t.Fatalf("%s put back: %v, want vrp_compromised_at %s", v1, en, compromised.Format(time.RFC3339))
		}
	})

	// The backend reference decides what a destroy destroys: pointed at
	// another backend in the database, the log would back "destroyed"
	// while the key it named lived on (ADR 0050).
	t.Run("destroying a version pointed at another backend", func(t *testing.T) {
		orig := db.version(t, v1)
		db.exec(t, `UPDATE key_versions SET backend_ref = ? WHERE kid = ?`, "software:kid="+v2, v1)
		waitReadyz(t, srv, false, v1)
		_, err := c.DestroyVersion(ctx, v1, "destroy what the database names", 0)
		notBacked(t, "destroying", err)
		if got := db.version(t, v1); got.MaterialDestroyedAt != nil {
			t.Fatalf("the material of %s was destroyed: %+v", v1, got)
		}
		if en := entry("villa", v1); en != nil {
			t.Fatalf("a version pointed at another backend is published: %v", en)
		}
		db.exec(t, `UPDATE key_versions SET backend_ref = ? WHERE kid = ?`, orig.BackendRef, v1)
		waitReadyz(t, srv, true, "ready")
		if _, err := c.DestroyVersion(ctx, v1, "destroy the compromised key's material", 0); err != nil {
			t.Fatalf("destroying %s put back: %v", v1, err)
		}
		if got := db.version(t, v1); got.MaterialDestroyedAt == nil || got.SealedPrivateKey != nil {
			t.Fatalf("%s after the destroy: %+v", v1, got)
		}
	})

	// The key row is only read (LockKey), not written, by a destroy; its
	// policy decides whether one officer may act. (A re-review, session
	// 46: one officer destroyed material under a two-person rule removed
	// from the stored policy, and the destruction was backed.)
	t.Run("a two-person rule removed from the stored policy", func(t *testing.T) {
		_, tv1, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "tpr", Issuer: "tpr.example",
			Policy: &client.Policy{TwoPersonRule: true}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Rotate(ctx, "tpr", "second version"); err != nil {
			t.Fatal(err)
		}
		waitReadyz(t, srv, true, "ready")
		k, err := st.GetKey(ctx, "tpr")
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		if err := json.Unmarshal(k.Policy, &p); err != nil || p["two_person_rule"] != true {
			t.Fatalf("stored policy %s: %v", k.Policy, err)
		}
		delete(p, "two_person_rule")
		edited, _ := json.Marshal(p)
		db.exec(t, `UPDATE keys SET policy = ? WHERE name = ?`, string(edited), "tpr")
		waitReadyz(t, srv, false, "tpr")
		_, err = c.DestroyVersion(ctx, tv1.KID, "one officer, no second", 0)
		notBacked(t, "a destroy under the edited policy", err)
		if got := db.version(t, tv1.KID); got.MaterialDestroyedAt != nil {
			t.Fatalf("the material of %s was destroyed by one officer: %+v", tv1.KID, got)
		}
		db.exec(t, `UPDATE keys SET policy = ? WHERE name = ?`, string(k.Policy), "tpr")
		waitReadyz(t, srv, true, "ready")
	})

	// A pending approval is carried out once a second officer approves
	// it, in the requester's name. Approval rows were in no fact: a
	// forged request "by bob" was revoked by alice's approval, and an
	// approved request set back to pending ran twice (ADR 0051).
	t.Run("approvals forged or set back to pending", func(t *testing.T) {
		bob := client.New(srv.URL, bobToken)
		_, ap1, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "tpa", Issuer: "tpa.example",
			Policy: &client.Policy{TwoPersonRule: true}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Rotate(ctx, "tpa", "second version"); err != nil {
			t.Fatal(err)
		}
		waitReadyz(t, srv, true, "ready")
		now := time.Now().UTC()
		later := now.Add(time.Hour)
		db.exec(t, `INSERT INTO approvals (id, key_name, action, kid, params, requested_by, requested_at, expires_at, status, requested_by_name)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, "f0f0f0f0f0f0f0f0", "tpa", "revoke", ap1.KID,
			`{"compromised_at":"`+now.Add(-time.Hour).Format(time.RFC3339Nano)+`","reason":"forged"}`, "principal:bob", db.ts(&now), db.ts(&later), "pending", "bob")
		_, err = c.ApproveAction(ctx, "f0f0f0f0f0f0f0f0")
		notBacked(t, "approving a request inserted in the database", err)
		if got := db.version(t, ap1.KID); got.State == store.StateRevoked {
			t.Fatalf("a forged approval revoked %s: %+v", ap1.KID, got)
		}

		// A real request, approved once; set back to pending, it is not
		// carried out again.
		off := client.Policy{TwoPersonRule: false}
		var pa *client.PendingApproval
		if err := c.SetPolicy(ctx, "tpa", off, "two-person rule off"); !errors.As(err, &pa) {
			t.Fatalf("switching the two-person rule off: %v, want a pending approval", err)
		}
		if _, err := bob.ApproveAction(ctx, pa.Approval.ID); err != nil {
			t.Fatalf("bob approving the real request: %v", err)
		}
		if err := c.SetPolicy(ctx, "tpa", client.Policy{TwoPersonRule: true}, "two-person rule on again"); err != nil {
			t.Fatal(err)
		}
		db.exec(t, `UPDATE approvals SET status = 'pending', decided_by = NULL, decided_at = NULL, decided_by_name = NULL WHERE id = ?`, pa.Approval.ID)
		_, err = bob.ApproveAction(ctx, pa.Approval.ID)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 409 || ce.Code != "key_history_not_backed" || !strings.Contains(ce.Message, "records approval "+pa.Approval.ID+" as decided") {
			t.Fatalf("approving a decided request set back to pending: %v; want 409 key_history_not_backed", err)
		}
		k, err := st.GetKey(ctx, "tpa")
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		if err := json.Unmarshal(k.Policy, &p); err != nil || p["two_person_rule"] != true {
			t.Fatalf("policy after the replay: %s (%v), want the two-person rule on", k.Policy, err)
		}
	})

	// API token rows were in no fact: a database writer could insert a
	// token with any scopes in any officer's name, widen a token's
	// scopes, or clear a revocation (ADR 0053).
	t.Run("API tokens forged, widened or un-revoked", func(t *testing.T) {
		unauthorized := func(t *testing.T, what, secret string) {
			t.Helper()
			// Longer than a few --reload-interval (300 ms) refreshes: a
			// token let in even once would answer here.
			time.Sleep(time.Second)
			_, err := client.New(srv.URL, secret).ListKeys(ctx)
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != 401 {
				t.Fatalf("%s: %v, want 401", what, err)
			}
		}
		works := func(t *testing.T, what, secret string) {
			t.Helper()
			waitFor(t, 10*time.Second, what, func() bool {
				_, err := client.New(srv.URL, secret).ListKeys(ctx)
				return err == nil
			})
		}
		works(t, "bob's token, anchored on trust at the first start", bobToken)

		const forged = "ksv_forgedforgedforgedforgedforgedforgedforge"
		sum := api.TokenHash(forged)
		now := time.Now().UTC()
		db.exec(t, `INSERT INTO api_tokens (id, name, sha256, scopes, created_at) VALUES (?, ?, ?, ?, ?)`,
			"f00dfeedf00d", "bob", sum[:], `["sign:*","admin:keys","admin:revoke","audit:read"]`, db.ts(&now))
		unauthorized(t, "a token inserted in the database", forged)

		db.exec(t, `UPDATE api_tokens SET scopes = '["admin:revoke","admin:keys","sign:*"]' WHERE name = 'bob' AND id <> 'f00dfeedf00d'`)
		unauthorized(t, "bob's token with sign:* added in the database", bobToken)
		db.exec(t, `UPDATE api_tokens SET scopes = '["admin:revoke","admin:keys"]' WHERE name = 'bob' AND id <> 'f00dfeedf00d'`)
		works(t, "bob's token put back", bobToken)

		bobSum := api.TokenHash(bobToken)
		bobID := hex.EncodeToString(bobSum[:6]) // api.NewToken
		if _, errOut, code := runCLI(t, e.env, "tokens", "revoke", bobID, "--data-dir", e.dir, "--reason", "left",
			"--anchor-key-file", keyFile, "--tlog-url", logSrv.URL); code != 0 {
			t.Fatalf("tokens revoke bob: %d %s", code, errOut)
		}
		unauthorized(t, "bob's revoked token", bobToken)
		db.exec(t, `UPDATE api_tokens SET revoked_at = NULL WHERE id = ?`, bobID)
		unauthorized(t, "bob's token, its revocation cleared in the database", bobToken)
		db.exec(t, `DELETE FROM anchor_events WHERE kind = ?`, anchor.MarkerTokenRevoked)
		unauthorized(t, "bob's token, its revocation cleared and its marker deleted from anchor_events", bobToken)
		m, err := evKey.TokenRevokedMarker(bobID)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "the revocation marker of bob's token in the log", func() bool {
			code, _ := proofFor(logSrv.URL, tlogclient.FormatHash(m.Hash))
			return code == 200
		})
		if _, err := c.ListKeys(ctx); err != nil {
			t.Fatalf("control: the officer's own token: %v", err)
		}
	})

	t.Run("the scheduler retiring a swapped active key", func(t *testing.T) {
		_, a, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "auto", Issuer: "auto.example",
			Policy: &client.Policy{RotationPeriod: "8s", Prepublish: "3s"}})
		if err != nil {
			t.Fatal(err)
		}
		var pending store.KeyVersion
		waitFor(t, 30*time.Second, "an armed pending version", func() bool {
			vs, err := st.ListVersions(ctx, "auto")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vs {
				if v.State == store.StatePending && v.ArmedAt != nil {
					pending = v
					return true
				}
			}
			return false
		})
		orig := db.version(t, a.KID)
		db.exec(t, `UPDATE key_versions SET public_jwk = ? WHERE kid = ?`, string(forgedJWK(a.KID)), a.KID)
		// Past the armed instant and a few scheduler passes: still active,
		// swapped, withheld; the successor not activated over it.
		time.Sleep(time.Until(*pending.ActivatesAt) + 2*time.Second)
		if got := db.version(t, a.KID); got.State != store.StateActive {
			t.Fatalf("the scheduler changed the swapped active version %s: %+v", a.KID, got)
		}
		if en := entry("auto", a.KID); en != nil && en["x"] == forgedJWKX {
			t.Fatalf("the swapped key is published: %v", en)
		}
		db.exec(t, `UPDATE key_versions SET public_jwk = ? WHERE kid = ?`, string(orig.PublicJWK), a.KID)
		waitFor(t, 30*time.Second, "the pending version active once the row is put back", func() bool {
			return db.version(t, pending.KID).State == store.StateActive
		})
	})
}

// forgedJWKX is the x of forgedJWK.
const forgedJWKX = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"

// publicX is the x member of v's stored public JWK.
func publicX(t *testing.T, v store.KeyVersion) string {
	t.Helper()
	var jwk struct {
		X string `json:"x"`
	}
	if err := json.Unmarshal(v.PublicJWK, &jwk); err != nil {
		t.Fatal(err)
	}
	return jwk.X
}
