package main

// The lifecycle-aware verifier (keysvc verify --history --log-keys
// [--log-url]) on revoked versions, against keysvc's own key-history
// documents: three ways an attack review (session 46) had it accept a
// signature it must refuse, each now refused.

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
	"github.com/keysvc/keysvc/verifier"
)

// rvRevokedMarch is a key history of one version, active from 2026-03-01,
// compromised 2026-03-20 and revoked 2026-04-01: its key, the log's key,
// the history and the trusted log keys.
func rvRevokedMarch(t *testing.T) (lcKey, lcKey, *verifier.KeyHistory, *verifier.JWKS) {
	t.Helper()
	revoked := newLCKey(t, "villa.test-2026-03-01-01")
	logKey := newLCKey(t, "log.test-2026-01-01-01")
	h, lk := rvSetup(t, []lcKey{revoked}, []store.KeyVersion{{State: store.StateRevoked,
		ActivatedAt: lcInstant(t, "2026-03-01T00:00:00Z"), RevokedAt: lcInstant(t, "2026-04-01T00:00:00Z"),
		CompromisedAt: lcInstant(t, "2026-03-20T00:00:00Z"), RevocationReason: "key_compromise"}}, logKey)
	return revoked, logKey, h, lk
}

// rvSetup builds keysvc's own key-history document (jwksserve.BuildHistory)
// for versions, each signed by the matching key, and the trusted log keys.
func rvSetup(t *testing.T, keys []lcKey, versions []store.KeyVersion, logKey lcKey) (*verifier.KeyHistory, *verifier.JWKS) {
	t.Helper()
	for i, k := range keys {
		versions[i].KID, versions[i].Algorithm, versions[i].KeyName, versions[i].PublicJWK = k.kid, "EdDSA", "main", k.publicJWK(t)
	}
	doc, err := jwksserve.BuildHistory(store.Key{Name: "main", Issuer: "villa.test", Algorithm: "EdDSA", Backend: "software"}, versions)
	if err != nil {
		t.Fatal(err)
	}
	h, err := verifier.ParseKeyHistory(doc.Body)
	if err != nil || len(h.Skipped) != 0 {
		t.Fatalf("history: %v %v\n%s", err, h.Skipped, doc.Body)
	}
	logJWK, _ := json.Marshal(map[string]any{"keys": []any{map[string]any{"kty": "OKP", "crv": "Ed25519",
		"x": lcB64(logKey.priv.Public().(ed25519.PublicKey)), "kid": logKey.kid, "alg": "EdDSA", "use": "sig"}}})
	lk, err := parseLogKeys(logJWK)
	if err != nil {
		t.Fatal(err)
	}
	return h, lk
}

func rvAtt(sig, from string, tlog any) map[string]any {
	start, _ := verifier.ParseInstant(from)
	a := map[string]any{"layer": "offer", "source": "https://villa.test/.well-known/jwks.json", "signature": sig,
		"valid_from": from, "valid_until": start.Add(time.Hour).UTC().Format(time.RFC3339)}
	if tlog != nil {
		a["tlog"] = tlog
	}
	return a
}

func rvReceipt(t *testing.T, atts ...map[string]any) []byte {
	t.Helper()
	list := []any{}
	for _, a := range atts {
		list = append(list, a)
	}
	b, err := json.Marshal(map[string]any{"vrp_receipt_version": "1.0", "subject": map[string]any{"property": "villa.test"},
		"issuer": map[string]any{"node": "villa.test"}, "attestations": list})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rvCode(a verifier.AttestationResult) string {
	if a.Error == nil {
		return a.Status
	}
	return a.Status + "/" + *a.Error
}

// TestVerifyConsistencyVerdictPerRoot: keysvc verify --log-url caches the
// consistency verdict per anchor (consistencyChecker.done); it cached it
// per "log_id/tree_size", without the root hash. A log-key holder who signs a forked tree of size
// N (backdated STH, containing a signature made with the stolen key after
// the compromise) gets it accepted by putting, before it in the same
// receipt, any honest pre-compromise attestation of a revoked version
// anchored at size N: the honest anchor passes the consistency check, and
// the forked one was answered from the cache. Alone, the forked anchor
// was rejected. The cache is now keyed by the root too.
func TestVerifyConsistencyVerdictPerRoot(t *testing.T) {
	revoked, logKey, h, lk := rvRevokedMarch(t)
	const logID = "did:web:log.test"

	// The honest receipt: signed 2026-03-10, logged, leaf 5 of the log's
	// real tree of 8 leaves, which is also the log's newest tree.
	honestSig := revoked.signJWS(`{"offer_id":"o1"}`)
	honest := rvAtt(honestSig, "2026-03-10T10:00:00Z", tlogLoggedAt(logKey, logID, honestSig, 5, 8, "2026-03-10T10:00:01Z", "2026-03-10T10:05:00Z"))
	newestSTH := honest["tlog"].(map[string]any)["sth"].(string)

	// The forgery: signed with the stolen key in May (after the compromise),
	// valid_from claimed in the window, in a forked tree of the same size
	// whose STH the log key dates before the compromise.
	forgedSig := revoked.signJWS(`{"offer_id":"attacker","served_at":"2026-05-01T00:00:00Z"}`)
	forged := rvAtt(forgedSig, "2026-03-10T10:30:00Z", tlogLoggedAt(logKey, logID, forgedSig, 5, 8, "2026-03-10T10:00:01Z", "2026-03-10T10:05:00Z"))

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != tlogclient.PathPrefix+"sth" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"sth": newestSTH, "checkpoint": ""})
	}))
	defer srv.Close()

	verify := func(t *testing.T, atts ...map[string]any) []verifier.AttestationResult {
		cc, err := newConsistencyChecker([]string{srv.URL}, lk, func(string, ...any) {})
		if err != nil {
			t.Fatal(err)
		}
		opts := verifier.Options{Now: *lcInstant(t, "2026-03-10T10:45:00Z"), History: h, LogKeys: lk, Consistency: cc.check}
		return verifier.VerifyReceipt(context.Background(), rvReceipt(t, atts...), opts).Attestations
	}

	if got := rvCode(verify(t, forged)[0]); got != "invalid/key_revoked" {
		t.Fatalf("control: the forged anchor alone is %s, want invalid/key_revoked", got)
	}
	res := verify(t, honest, forged)
	if got := rvCode(res[0]); got != "verified" {
		t.Fatalf("honest attestation: %s, want verified", got)
	}
	if got := rvCode(res[1]); got != "invalid/key_revoked" {
		t.Errorf("forked-tree anchor after an honest one of the same tree size: %s, want invalid/key_revoked "+
			"(the consistency verdict was reused for another root)", got)
	}
}

// TestVerifyRevokedWhilePending: a version revoked while pending never
// signed legitimately (K3; the verifier rejects every signature of a
// pending version). keysvc published it as "revoked" with no
// vrp_not_after (and vrp_not_before = the scheduled activation, or
// nothing), and the verifier accepted any signature of it that a log
// anchored before vrp_compromised_at, whatever valid_from claimed. Now the
// entry carries neither bound, and a revoked entry without both is
// key_revoked.
func TestVerifyRevokedWhilePending(t *testing.T) {
	logKey := newLCKey(t, "log.test-2026-01-01-01")
	const logID = "did:web:log.test"
	for _, c := range []struct {
		name        string
		activatesAt *time.Time
		from        string
	}{
		{"unscheduled pending version", nil, "2026-06-10T10:00:00Z"},
		{"scheduled pending version", lcInstant(t, "2026-06-15T00:00:00Z"), "2026-06-16T10:00:00Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := newLCKey(t, "villa.test-2026-06-01-02")
			h, lk := rvSetup(t, []lcKey{k}, []store.KeyVersion{{State: store.StateRevoked, ActivatesAt: c.activatesAt,
				RevokedAt: lcInstant(t, "2026-06-30T00:00:00Z"), CompromisedAt: lcInstant(t, "2026-06-30T00:00:00Z"),
				RevocationReason: "key_compromise"}}, logKey)
			sig := k.signJWS(`{"offer_id":"o1"}`)
			a := rvAtt(sig, c.from, tlogLoggedAt(logKey, logID, sig, 2, 4, "2026-06-20T10:00:00Z", "2026-06-20T10:05:00Z"))
			res := verifier.VerifyReceipt(context.Background(), rvReceipt(t, a),
				verifier.Options{Now: lcInstant(t, c.from).Add(30 * time.Minute), History: h, LogKeys: lk})
			if got := rvCode(res.Attestations[0]); got != "invalid/key_revoked" {
				t.Errorf("signature of a version that was revoked without ever being active: %s, want invalid/key_revoked", got)
			}
			e := h.Versions[0]
			if e.NotBefore != nil || e.NotAfter != nil {
				t.Errorf("the key-history entry of a version revoked while pending has a window: %v .. %v", e.NotBefore, e.NotAfter)
			}
		})
	}
}

// TestVerifyRevokedLoggedBeforeWindow: for a revoked version the log is
// the independent evidence, yet the verifier checked only the unsigned,
// holder-chosen valid_from against [vrp_not_before, vrp_not_after]. A
// signature whose leaf was logged (and whose STH was signed) weeks before
// the version's vrp_not_before was provably made outside the window, and
// was accepted because valid_from was set inside it. Now the leaf's
// logged_at (never after the STH timestamp) may precede vrp_not_before by
// at most verifier.LogClockAllowance (1 minute).
func TestVerifyRevokedLoggedBeforeWindow(t *testing.T) {
	revoked, logKey, h, lk := rvRevokedMarch(t)
	const logID = "did:web:log.test"
	sig := revoked.signJWS(`{"offer_id":"o1","served_at":"2026-02-10T10:00:00Z"}`)
	// Logged 2026-02-10, STH 2026-02-10: three weeks before the version's
	// vrp_not_before (2026-03-01); valid_from claims 2026-03-10.
	a := rvAtt(sig, "2026-03-10T10:00:00Z", tlogLoggedAt(logKey, logID, sig, 1, 4, "2026-02-10T10:00:01Z", "2026-02-10T10:05:00Z"))
	res := verifier.VerifyReceipt(context.Background(), rvReceipt(t, a),
		verifier.Options{Now: *lcInstant(t, "2026-03-10T10:30:00Z"), History: h, LogKeys: lk})
	if got := rvCode(res.Attestations[0]); got != "invalid/key_revoked" {
		t.Errorf("revoked version's signature that the log shows existed before vrp_not_before: %s, want invalid/key_revoked", got)
	}
	// At the allowance: the log's clock may be behind the signer's by up to
	// a minute. logged_at decides (it is never after the STH timestamp);
	// the STH alone would pass.
	for _, c := range []struct {
		loggedAt, sthAt, want string
	}{
		{"2026-02-28T23:59:00Z", "2026-03-01T00:00:05Z", "verified"},            // 60 s before: allowed
		{"2026-02-28T23:58:59Z", "2026-03-01T00:00:05Z", "invalid/key_revoked"}, // 61 s before
		{"2026-03-10T10:00:01Z", "2026-03-10T10:05:00Z", "verified"},            // inside the window
	} {
		sig := revoked.signJWS(`{"offer_id":"o2"}`)
		a := rvAtt(sig, "2026-03-01T00:00:00Z", tlogLoggedAt(logKey, logID, sig, 1, 4, c.loggedAt, c.sthAt))
		res := verifier.VerifyReceipt(context.Background(), rvReceipt(t, a),
			verifier.Options{Now: *lcInstant(t, "2026-03-01T00:30:00Z"), History: h, LogKeys: lk})
		if got := rvCode(res.Attestations[0]); got != c.want {
			t.Errorf("logged_at %s, STH %s, vrp_not_before 2026-03-01T00:00:00Z: %s, want %s", c.loggedAt, c.sthAt, got, c.want)
		}
	}
}
