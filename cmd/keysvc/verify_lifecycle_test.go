package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/store"
)

// lcKey is an Ed25519 test key with its kid.
type lcKey struct {
	kid  string
	priv ed25519.PrivateKey
}

func newLCKey(t *testing.T, kid string) lcKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return lcKey{kid: kid, priv: priv}
}

func lcB64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// sign returns a compact EdDSA JWS with the key's kid.
func (k lcKey) sign(header, payload string) string {
	input := lcB64([]byte(header)) + "." + lcB64([]byte(payload))
	return input + "." + lcB64(ed25519.Sign(k.priv, []byte(input)))
}

func (k lcKey) signJWS(payload string) string {
	return k.sign(`{"alg":"EdDSA","kid":"`+k.kid+`","typ":"JWT"}`, payload)
}

// publicJWK is the key's public JWK as keysvc records it.
func (k lcKey) publicJWK(t *testing.T) []byte {
	t.Helper()
	b, err := jwksserve.PublicJWK(k.priv.Public(), k.kid, "EdDSA")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func lcInstant(t *testing.T, s string) *time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return &tm
}

// RFC 6962 §2.1 Merkle tree hash and audit path over leaf data.
func rfc6962Root(d [][]byte) []byte {
	if len(d) == 1 {
		h := sha256.Sum256(append([]byte{0}, d[0]...))
		return h[:]
	}
	k := 1
	for k<<1 < len(d) {
		k <<= 1
	}
	h := sha256.Sum256(append(append([]byte{1}, rfc6962Root(d[:k])...), rfc6962Root(d[k:])...))
	return h[:]
}

func rfc6962Path(m int, d [][]byte) [][]byte {
	if len(d) == 1 {
		return nil
	}
	k := 1
	for k<<1 < len(d) {
		k <<= 1
	}
	if m < k {
		return append(rfc6962Path(m, d[:k]), rfc6962Root(d[k:]))
	}
	return append(rfc6962Path(m-k, d[k:]), rfc6962Root(d[:k]))
}

// tlogFor logs signature as leaf index of a tree of size leaves and returns
// the attestation's tlog member, its STH signed by logKey at sthAt.
func tlogFor(logKey lcKey, logID, signature string, index, size int, sthAt string) map[string]any {
	return tlogLoggedAt(logKey, logID, signature, index, size, "2026-03-10T10:00:01Z", sthAt)
}

// tlogLoggedAt is tlogFor with the leaf's logged_at chosen by the caller.
func tlogLoggedAt(logKey lcKey, logID, signature string, index, size int, loggedAt, sthAt string) map[string]any {
	leaf := func(sig string) []byte {
		sum := sha256.Sum256([]byte(sig))
		return fmt.Appendf(nil, `{"artifact_hash":"sha256:%s","artifact_type":"vrp_attestation","leaf_version":"vrp-tlog-v0.1","logged_at":"%s"}`,
			hex.EncodeToString(sum[:]), loggedAt)
	}
	leaves := make([][]byte, size)
	for i := range leaves {
		leaves[i] = leaf(fmt.Sprintf("another.jws.%d", i))
	}
	leaves[index] = leaf(signature)
	root := rfc6962Root(leaves)
	path := []any{}
	for _, h := range rfc6962Path(index, leaves) {
		path = append(path, lcB64(h))
	}
	sum := sha256.Sum256([]byte(signature))
	return map[string]any{
		"log_id": logID,
		"leaf": map[string]any{"leaf_version": "vrp-tlog-v0.1", "logged_at": loggedAt, "artifact_type": "vrp_attestation",
			"artifact_hash": "sha256:" + hex.EncodeToString(sum[:])},
		"leaf_index":      index,
		"tree_size":       size,
		"inclusion_proof": path,
		"sth": logKey.sign(`{"alg":"EdDSA","kid":"`+logKey.kid+`"}`,
			fmt.Sprintf(`{"log_id":%q,"root_hash":%q,"timestamp":%q,"tree_size":%d}`, logID, lcB64(root), sthAt, size)),
	}
}

// TestVerifyLifecycleCommand runs `keysvc verify --history` from the built
// binary against a key-history document made by jwksserve (the document
// keysvc publishes) for a key with a revoked, a retired, an active and a
// pending version, and a trusted transparency-log key.
func TestVerifyLifecycleCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, v any) string {
		t.Helper()
		b, ok := v.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	revoked := newLCKey(t, "villa.test-2026-03-01-01")
	retired := newLCKey(t, "villa.test-2026-04-01-01")
	active := newLCKey(t, "villa.test-2026-06-01-01")
	pending := newLCKey(t, "villa.test-2026-06-20-01")
	logKey := newLCKey(t, "log.test-2026-01-01-01")
	rogue := newLCKey(t, "log.test-2026-01-01-01")
	const logID = "did:web:log.test"

	versions := []store.KeyVersion{
		{KID: revoked.kid, State: store.StateRevoked, ActivatedAt: lcInstant(t, "2026-03-01T00:00:00Z"),
			RevokedAt: lcInstant(t, "2026-04-01T00:00:00Z"), CompromisedAt: lcInstant(t, "2026-03-20T00:00:00Z"), RevocationReason: "key_compromise"},
		{KID: retired.kid, State: store.StateRetired, ActivatedAt: lcInstant(t, "2026-04-01T00:00:00Z"), RetiredAt: lcInstant(t, "2026-06-01T00:00:00.250Z")},
		{KID: active.kid, State: store.StateActive, ActivatedAt: lcInstant(t, "2026-06-01T00:00:00.250Z")},
		{KID: pending.kid, State: store.StatePending, ActivatesAt: lcInstant(t, "2026-07-01T00:00:00Z")},
	}
	for i, k := range []lcKey{revoked, retired, active, pending} {
		versions[i].Algorithm, versions[i].KeyName, versions[i].PublicJWK = "EdDSA", "main", k.publicJWK(t)
	}
	historyDoc, err := jwksserve.BuildHistory(store.Key{Name: "main", Issuer: "villa.test", Algorithm: "EdDSA", Backend: "software"}, versions)
	if err != nil {
		t.Fatal(err)
	}
	plainDoc, err := jwksserve.BuildJWKS(versions)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plainDoc.Body), revoked.kid) || !strings.Contains(string(historyDoc.Body), `"vrp_compromised_at": "2026-03-20T00:00:00Z"`) {
		t.Fatalf("unexpected documents:\n%s\n%s", plainDoc.Body, historyDoc.Body)
	}
	history := write("history.json", historyDoc.Body)
	plain := write("jwks.json", plainDoc.Body)
	logJWK := map[string]any{"kty": "OKP", "crv": "Ed25519", "x": lcB64(logKey.priv.Public().(ed25519.PublicKey)), "kid": logKey.kid, "alg": "EdDSA", "use": "sig"}
	logKeys := write("log-keys.json", map[string]any{"keys": []any{logJWK}})

	// receipt writes a one-attestation receipt whose window starts at from
	// (the claimed signing time) and lasts an hour; freshAt is inside it.
	receipt := func(name, sig, from string, tlog any) (path, freshAt string) {
		t.Helper()
		start := *lcInstant(t, from)
		a := map[string]any{
			"layer": "offer", "source": "https://villa.test/.well-known/jwks.json", "signature": sig,
			"valid_from": from, "valid_until": start.Add(time.Hour).Format(time.RFC3339),
		}
		if tlog != nil {
			a["tlog"] = tlog
		}
		return write(name, map[string]any{
			"vrp_receipt_version": "1.0", "subject": map[string]any{"property": "villa.test"},
			"issuer": map[string]any{"node": "villa.test"}, "attestations": []any{a},
		}), start.Add(30 * time.Minute).Format(time.RFC3339)
	}
	result := func(status, code, kid string) string {
		null := func(s string) string {
			if s == "" {
				return "null"
			}
			return `"` + s + `"`
		}
		return fmt.Sprintf(`{"receipt_valid":true,"fully_verified":%t,"errors":[],"attestations":[{"index":0,"layer":"offer","status":%q,"error":%s,"kid":%s}]}`,
			status == "verified", status, null(code), null(kid))
	}
	sameJSON := func(t *testing.T, got, want string) {
		t.Helper()
		var g, w any
		if err := json.Unmarshal([]byte(got), &g); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, got)
		}
		if err := json.Unmarshal([]byte(want), &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("stdout:\n%s\nwant %s", got, want)
		}
	}

	revSig := revoked.signJWS(`{"offer_id":"o1"}`)
	const revFrom = "2026-03-10T10:00:00Z"
	goodTlog := tlogFor(logKey, logID, revSig, 5, 8, "2026-03-10T10:05:00Z")
	tampered := tlogFor(logKey, logID, revSig, 5, 8, "2026-03-10T10:05:00Z")
	tampered["inclusion_proof"].([]any)[0] = lcB64(make([]byte, 32))
	wrongIndex := tlogFor(logKey, logID, revSig, 5, 8, "2026-03-10T10:05:00Z")
	wrongIndex["leaf_index"] = 6
	wrongLogID := tlogFor(logKey, logID, revSig, 5, 8, "2026-03-10T10:05:00Z")
	wrongLogID["log_id"] = "did:web:other.test"

	cases := []struct {
		name     string
		sig      string
		from     string
		tlog     any
		extra    []string
		status   string
		code     string
		kid      string
		wantExit int
	}{
		{"retired inside window", retired.signJWS(`{}`), "2026-05-15T10:00:00Z", nil, nil, "verified", "", retired.kid, 0},
		{"retired before not_before", retired.signJWS(`{}`), "2026-03-31T23:59:59Z", nil, nil, "invalid", "key_retired_out_of_window", retired.kid, 2},
		{"retired after not_after", retired.signJWS(`{}`), "2026-06-01T00:00:02Z", nil, nil, "invalid", "key_retired_out_of_window", retired.kid, 2},
		{"active inside", active.signJWS(`{}`), "2026-06-24T11:00:00Z", nil, nil, "verified", "", active.kid, 0},
		{"active in its first second", active.signJWS(`{}`), "2026-06-01T00:00:00Z", nil, nil, "verified", "", active.kid, 0},
		{"active before not_before", active.signJWS(`{}`), "2026-05-31T23:59:59Z", nil, nil, "invalid", "key_retired_out_of_window", active.kid, 2},
		{"pending", pending.signJWS(`{}`), "2026-06-24T11:00:00Z", nil, nil, "invalid", "key_retired_out_of_window", pending.kid, 2},
		{"revoked without tlog", revSig, revFrom, nil, nil, "invalid", "tlog_required", revoked.kid, 2},
		{"revoked, tlog before compromise", revSig, revFrom, goodTlog, nil, "verified", "", revoked.kid, 0},
		{"revoked, STH at compromise", revSig, revFrom, tlogFor(logKey, logID, revSig, 5, 8, "2026-03-20T00:00:00Z"), nil, "invalid", "key_revoked", revoked.kid, 2},
		{"revoked, STH after compromise", revSig, revFrom, tlogFor(logKey, logID, revSig, 5, 8, "2026-03-25T00:00:00Z"), nil, "invalid", "key_revoked", revoked.kid, 2},
		{"revoked, tampered proof", revSig, revFrom, tampered, nil, "invalid", "key_revoked", revoked.kid, 2},
		{"revoked, wrong leaf index", revSig, revFrom, wrongIndex, nil, "invalid", "key_revoked", revoked.kid, 2},
		{"revoked, artifact_hash of another JWS", revSig, revFrom, tlogFor(logKey, logID, revoked.signJWS(`{"offer_id":"o2"}`), 5, 8, "2026-03-10T10:05:00Z"), nil, "invalid", "key_revoked", revoked.kid, 2},
		{"revoked, STH by an untrusted key", revSig, revFrom, tlogFor(rogue, logID, revSig, 5, 8, "2026-03-10T10:05:00Z"), nil, "invalid", "key_revoked", revoked.kid, 2},
		{"revoked, STH by the node key", revSig, revFrom, tlogFor(revoked, logID, revSig, 5, 8, "2026-03-10T10:05:00Z"), nil, "invalid", "key_revoked", revoked.kid, 2},
		{"revoked, wrong log_id", revSig, revFrom, wrongLogID, nil, "invalid", "key_revoked", revoked.kid, 2},
		{"revoked, no --log-keys", revSig, revFrom, goodTlog, []string{}, "invalid", "key_revoked", revoked.kid, 2},
		{"revoked, plain JWKS fails closed", revSig, revFrom, goodTlog, []string{"--jwks", plain}, "invalid", "sig_invalid", "", 2},
		{"forged signature", newLCKey(t, active.kid).signJWS(`{}`), "2026-06-24T11:00:00Z", nil, nil, "invalid", "sig_invalid", "", 2},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, freshAt := receipt(fmt.Sprintf("receipt-%d.json", i), c.sig, c.from, c.tlog)
			keys := []string{"--history", history, "--log-keys", logKeys}
			if c.extra != nil {
				keys = c.extra
				if len(keys) == 0 {
					keys = []string{"--history", history}
				}
			}
			args := append([]string{"verify", path, "--at", freshAt, "--json"}, keys...)
			stdout, stderr, code := runCLI(t, nil, args...)
			if code != c.wantExit {
				t.Errorf("exit %d, want %d; stderr %s", code, c.wantExit, stderr)
			}
			sameJSON(t, stdout, result(c.status, c.code, c.kid))
		})
	}

	t.Run("--at judges freshness", func(t *testing.T) {
		path, _ := receipt("june.json", active.signJWS(`{}`), "2026-06-24T11:30:00Z", nil)
		for _, flag := range []string{"--at", "--now"} {
			stdout, stderr, code := runCLI(t, nil, "verify", path, "--history", history, flag, "2026-06-24T12:00:00Z", "--json")
			if code != 0 {
				t.Errorf("%s: exit %d, want 0; stderr %s", flag, code, stderr)
			}
			sameJSON(t, stdout, result("verified", "", active.kid))
		}
		// Judged now, long after the window.
		if time.Now().Before(time.Date(2026, 6, 24, 12, 30, 0, 0, time.UTC)) {
			t.Skip("the clock is before the receipt's window ends")
		}
		stdout, stderr, code := runCLI(t, nil, "verify", path, "--history", history, "--json")
		if code != 2 {
			t.Errorf("now: exit %d, want 2; stderr %s", code, stderr)
		}
		sameJSON(t, stdout, result("expired", "sig_expired", active.kid))
	})

	t.Run("--history from http URL", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/.well-known/vrp-key-history.json":
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(historyDoc.Body)
			case "/log-keys.json":
				_ = json.NewEncoder(w).Encode(map[string]any{"keys": []any{logJWK}})
			default:
				http.NotFound(w, r)
			}
		}))
		defer srv.Close()
		if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
			t.Fatalf("unexpected server URL %s", srv.URL)
		}
		path, freshAt := receipt("url.json", revSig, revFrom, goodTlog)
		stdout, stderr, code := runCLI(t, nil, "verify", path, "--history", srv.URL+"/.well-known/vrp-key-history.json",
			"--log-keys", srv.URL+"/log-keys.json", "--at", freshAt, "--json")
		if code != 0 {
			t.Errorf("exit %d, want 0; stderr %s", code, stderr)
		}
		sameJSON(t, stdout, result("verified", "", revoked.kid))

		_, stderr, code = runCLI(t, nil, "verify", path, "--history", srv.URL+"/missing.json", "--at", freshAt)
		if code != 1 || !strings.Contains(stderr, "404") || !strings.Contains(stderr, "--history") {
			t.Errorf("HTTP 404: exit %d, stderr %q; want exit 1 naming --history and the status", code, stderr)
		}
	})

	t.Run("table output keeps the signing kid", func(t *testing.T) {
		path, freshAt := receipt("table.json", pending.signJWS(`{}`), "2026-06-24T11:00:00Z", nil)
		stdout, _, code := runCLI(t, nil, "verify", path, "--history", history, "--at", freshAt)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if code != 2 || len(lines) != 3 ||
			strings.Join(strings.Fields(lines[1]), " ") != "0 offer invalid key_retired_out_of_window "+pending.kid ||
			lines[2] != "receipt valid, not fully verified: 0 of 1 attestations verified" {
			t.Errorf("exit %d, table:\n%s", code, stdout)
		}
	})

	t.Run("history as --jwks warns about revoked keys", func(t *testing.T) {
		path, freshAt := receipt("warn.json", active.signJWS(`{}`), "2026-06-24T11:00:00Z", nil)
		_, stderr, code := runCLI(t, nil, "verify", path, "--jwks", history, "--at", freshAt, "--json")
		if code != 0 || !strings.Contains(stderr, "warning") || !strings.Contains(stderr, revoked.kid) || !strings.Contains(stderr, "--history") {
			t.Errorf("exit %d, stderr %q; want exit 0 and a warning naming %s", code, stderr, revoked.kid)
		}
	})

	t.Run("skipped history entries warn", func(t *testing.T) {
		var doc map[string]any
		if err := json.Unmarshal(historyDoc.Body, &doc); err != nil {
			t.Fatal(err)
		}
		for _, e := range doc["keys"].([]any) {
			if e := e.(map[string]any); e["kid"] == active.kid {
				e["vrp_not_before"] = "June 1st"
			}
		}
		broken := write("broken-history.json", doc)
		path, freshAt := receipt("skip.json", active.signJWS(`{}`), "2026-06-24T11:00:00Z", nil)
		stdout, stderr, code := runCLI(t, nil, "verify", path, "--history", broken, "--at", freshAt, "--json")
		if code != 2 || !strings.Contains(stderr, "skipped") || !strings.Contains(stderr, active.kid) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
		sameJSON(t, stdout, result("invalid", "sig_invalid", ""))
	})

	t.Run("usage and I/O errors exit 1", func(t *testing.T) {
		path, freshAt := receipt("usage.json", active.signJWS(`{}`), "2026-06-24T11:00:00Z", nil)
		leaked := maps.Clone(logJWK)
		leaked["d"] = lcB64(logKey.priv.Seed())
		privateLogKeys := write("private-log-keys.json", map[string]any{"keys": []any{leaked}})
		emptyLogKeys := write("empty-log-keys.json", map[string]any{"keys": []any{}})
		for _, c := range []struct {
			name string
			args []string
			want string // in stderr, when set
		}{
			{"log-keys with private key material", []string{"verify", path, "--history", history, "--log-keys", privateLogKeys},
				`--log-keys ` + privateLogKeys + `: key 0 holds private key material ("d"): give the logs' public keys only`},
			{"log-keys with no key", []string{"verify", path, "--history", history, "--log-keys", emptyLogKeys},
				`--log-keys ` + emptyLogKeys + `: no usable key (the set is empty)`},
			{"neither --jwks nor --history", []string{"verify", path}, ""},
			{"both --jwks and --history", []string{"verify", path, "--jwks", plain, "--history", history}, ""},
			{"--log-keys with --jwks", []string{"verify", path, "--jwks", plain, "--log-keys", logKeys}, ""},
			{"--log-keys alone", []string{"verify", path, "--log-keys", logKeys}, ""},
			{"both --at and --now", []string{"verify", path, "--history", history, "--at", freshAt, "--now", freshAt}, ""},
			{"bad --at", []string{"verify", path, "--history", history, "--at", "2026-06-24"}, ""},
			{"bad --now", []string{"verify", path, "--history", history, "--now", "noon"}, ""},
			{"missing history file", []string{"verify", path, "--history", filepath.Join(dir, "nope.json")}, ""},
			{"history not a document", []string{"verify", path, "--history", path}, ""},
			{"missing log-keys file", []string{"verify", path, "--history", history, "--log-keys", filepath.Join(dir, "nope.json")}, ""},
			{"log-keys not a JWK Set", []string{"verify", path, "--history", history, "--log-keys", path}, ""},
			{"no receipt", []string{"verify", "--history", history}, ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				stdout, stderr, code := runCLI(t, nil, c.args...)
				if code != 1 || stdout != "" || stderr == "" || !strings.Contains(stderr, c.want) {
					t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 with a message on stderr (%q)", code, stdout, stderr, c.want)
				}
			})
		}
	})
}
