package anchor

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/store"
)

func testKey(t *testing.T) *EventKey {
	t.Helper()
	k, err := NewEventKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestEventJWS: an event is an EdDSA compact JWS with a fixed protected
// header over the JCS bytes of its payload, the same bytes every time
// (Ed25519 is deterministic), and its hash is SHA-256 of those bytes.
func TestEventJWS(t *testing.T) {
	k := testKey(t)
	ev, err := k.AuditFact(store.AuditEvent{Seq: 3, Hash: "ab12"})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(ev.JWS, ".")
	if len(parts) != 3 {
		t.Fatalf("not compact: %s", ev.JWS)
	}
	dec := func(s string) string {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got, want := dec(parts[0]), `{"alg":"EdDSA","kid":"`+k.KID()+`","typ":"vrp-status-event+jwt"}`; got != want {
		t.Fatalf("header %s, want %s", got, want)
	}
	if got, want := dec(parts[1]), `{"event":"audit_head","hash":"ab12","seq":3}`; got != want {
		t.Fatalf("payload %s, want %s", got, want)
	}
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	if !ed25519.Verify(k.priv.Public().(ed25519.PublicKey), []byte(parts[0]+"."+parts[1]), sig) {
		t.Fatal("signature does not verify")
	}
	if ev.Hash != sha256.Sum256([]byte(ev.JWS)) || ev.Kind != FactAudit || ev.Subject != "3" {
		t.Fatalf("event %+v", ev)
	}
	again, _ := testKey(t).AuditFact(store.AuditEvent{Seq: 3, Hash: "ab12"}) // a fresh key: no memo
	if again != ev {
		t.Fatal("the same fact signed twice differs")
	}
	pub := base64.RawURLEncoding.EncodeToString(k.priv.Public().(ed25519.PublicKey))
	if want := rfc7638(pub); k.KID() != want {
		t.Fatalf("event key thumbprint %s, want %s", k.KID(), want)
	}
}

// TestVersionFact: the fact covers the public key (RFC 7638 thumbprint),
// the state and every instant; anything else changed gives another hash.
func TestVersionFact(t *testing.T) {
	k := testKey(t)
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	v := store.KeyVersion{KID: "x.se-2026-12-01-01", KeyName: "x", Algorithm: "EdDSA", State: store.StateRetired, CreatedAt: at, ActivatedAt: &at,
		PublicJWK: []byte(`{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"x.se-2026-12-01-01"}`)}
	base, err := k.VersionFact(v)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(base.JWS, ".")[1])
	want := `{"alg":"EdDSA","created_at":"2026-12-01T12:00:00.000000Z","event":"key_version","jkt":"` + rfc7638("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo") + `","key":"x","kid":"x.se-2026-12-01-01","state":"retired","vrp_not_before":"2026-12-01T12:00:00.000000Z"}`
	if string(payload) != want {
		t.Fatalf("payload\n%s\nwant\n%s", payload, want)
	}
	later := at.Add(time.Hour)
	for name, change := range map[string]func(v *store.KeyVersion){
		"public key": func(v *store.KeyVersion) {
			v.PublicJWK = []byte(`{"kty":"OKP","crv":"Ed25519","x":"PUAXw-hDiVqStwqnTRt-vJyYLM8uxJaMwM1V8Sr0Zgw"}`)
		},
		"state":      func(v *store.KeyVersion) { v.State = store.StateActive },
		"not_after":  func(v *store.KeyVersion) { v.RetiredAt = &later },
		"compromise": func(v *store.KeyVersion) { v.CompromisedAt = &later },
		"destroyed":  func(v *store.KeyVersion) { v.MaterialDestroyedAt = &later },
	} {
		w := v
		change(&w)
		ev, err := k.VersionFact(w)
		if err != nil || ev.Hash == base.Hash {
			t.Errorf("%s changed: same hash (err %v)", name, err)
		}
	}
	// Members that are not public facts leave it unchanged.
	w := v
	w.BackendRef, w.SealedPrivateKey = "software:kid=other", []byte{1, 2}
	if ev, _ := k.VersionFact(w); ev.Hash != base.Hash {
		t.Error("backend reference or sealed blob changed the fact")
	}
}

// TestKeyFile: keygen writes a 0600 private JWK and refuses to overwrite;
// a file readable by others is refused.
func TestKeyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "anchor-key.json")
	k, err := GenerateKeyFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateKeyFile(p); err == nil {
		t.Fatal("overwrote an event key")
	}
	got, err := LoadKeyFile(p)
	if err != nil || got.KID() != k.KID() {
		t.Fatalf("load: %v %v", got, err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(p); err == nil || !strings.Contains(err.Error(), "want 0600") {
		t.Fatalf("mode 0644 accepted: %v", err)
	}
}

// rfc7638 is the SHA-256 thumbprint of an Ed25519 public JWK, computed by
// hand (RFC 7638 §3.2 members in order; RFC 8037 §2).
func rfc7638(x string) string {
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + x + `"}`))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// TestKeyFactSettingsRev: a key whose settings never changed (revision 0)
// signs to the fact earlier releases signed, without a settings_rev
// member, so anchored history stays backed across the upgrade; a later
// revision is in the fact, and its marker names the key and revision
// (ADR 0036).
func TestKeyFactSettingsRev(t *testing.T) {
	k := testKey(t)
	key := store.Key{Name: "villa", Issuer: "villaakerlyckan.se", Algorithm: "EdDSA", Backend: "software", JWKSURL: "https://villaakerlyckan.se/jwks.json",
		Policy: []byte(`{"rotation_period":"720h"}`), CreatedAt: time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC), CreatedBy: "alice"}
	payload := func(ev Event) string {
		b, err := base64.RawURLEncoding.DecodeString(strings.Split(ev.JWS, ".")[1])
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	const legacy = `{"alg":"EdDSA","backend":"software","created_at":"2026-12-01T23:00:00.000000Z","created_by":"alice","event":"key","issuer":"villaakerlyckan.se","jwks_url":"https://villaakerlyckan.se/jwks.json","key":"villa","policy_sha256":"`
	ph := sha256.Sum256(key.Policy)
	f0, err := k.KeyFact(key)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := payload(f0), legacy+hex.EncodeToString(ph[:])+`"}`; got != want {
		t.Fatalf("revision 0:\n got %s\nwant %s", got, want)
	}
	key.SettingsRev = 2
	f2, _ := k.KeyFact(key)
	if got, want := payload(f2), legacy+hex.EncodeToString(ph[:])+`","settings_rev":2}`; got != want {
		t.Fatalf("revision 2:\n got %s\nwant %s", got, want)
	}
	m, err := k.SettingsMarker("villa", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := payload(m); got != `{"key":"villa","marker":"key_settings","n":2}` || m.Kind != MarkerSettings || m.Subject != "villa#2" {
		t.Fatalf("settings marker %+v: %s", m, got)
	}
	if m3, err := k.SettingsMarker("villa", 3); err != nil || m3.Hash == m.Hash {
		t.Fatalf("the marker of revision 3: %v, or the same hash as revision 2's", err)
	}
}
