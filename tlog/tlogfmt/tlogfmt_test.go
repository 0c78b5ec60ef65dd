package tlogfmt_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

// RFC 8032 §7.1 test 1 seed: deterministic Ed25519, so JWS bytes are exact.
func key(t *testing.T) (ed25519.PrivateKey, tlogfmt.LogKey, *signer.JWSSigner) {
	t.Helper()
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	k := ed25519.NewKeyFromSeed(seed)
	lk, err := tlogfmt.NewLogKey("log.example.test/vrp", k.Public())
	if err != nil {
		t.Fatal(err)
	}
	js, err := signer.NewJWSSigner(lk.KID, signer.AlgEdDSA, k)
	if err != nil {
		t.Fatal(err)
	}
	return k, lk, js
}

func TestLogKeyNames(t *testing.T) {
	_, lk, _ := key(t)
	// kid: RFC 7638 thumbprint of {"crv":"Ed25519","kty":"OKP","x":...}.
	if lk.KID != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" {
		t.Errorf("kid %s", lk.KID)
	}
	vk, err := lk.VKey()
	if err != nil || vk != "log.example.test/vrp+326059f7+AddamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea" {
		t.Errorf("vkey %s %v", vk, err)
	}
	back, err := tlogfmt.ParseVKey(vk)
	if err != nil || back.KID != lk.KID || back.Origin != lk.Origin {
		t.Errorf("ParseVKey: %+v %v", back, err)
	}
	for _, bad := range []string{"", "log+1+AAAA", strings.Replace(vk, "326059f7", "326059f8", 1)} {
		if _, err := tlogfmt.ParseVKey(bad); err == nil {
			t.Errorf("ParseVKey(%q) accepted", bad)
		}
	}
	if _, err := tlogfmt.NewLogKey("with space", lk.Public); err == nil {
		t.Error("origin with a space accepted")
	}
}

func TestLeafBytesAreJCS(t *testing.T) {
	l := tlogfmt.Leaf{ArtifactHash: "sha256:" + strings.Repeat("ab", 32), ArtifactType: "vrp_attestation", LeafVersion: tlogfmt.LeafVersion, LoggedAt: "2026-12-01T09:12:32Z"}
	b, err := l.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"artifact_hash":"sha256:` + strings.Repeat("ab", 32) + `","artifact_type":"vrp_attestation","leaf_version":"vrp-tlog-v0.1","logged_at":"2026-12-01T09:12:32Z"}`
	if string(b) != want {
		t.Fatalf("leaf %s", b)
	}
	j, _ := jcs.Transform(b)
	if string(j) != want {
		t.Fatalf("not a JCS fixed point: %s", j)
	}
	if back, err := tlogfmt.ParseLeaf(b); err != nil || back != l {
		t.Fatalf("ParseLeaf: %+v %v", back, err)
	}
	for _, bad := range []string{
		`{"artifact_hash":"sha256:` + strings.Repeat("ab", 32) + `", "artifact_type":"vrp_attestation","leaf_version":"vrp-tlog-v0.1","logged_at":"2026-12-01T09:12:32Z"}`, // not canonical
		strings.Replace(want, "ab", "AB", 1),                                            // upper-case hex
		strings.Replace(want, "vrp_attestation", "other", 1),                            // unknown type
		strings.Replace(want, "09:12:32Z", "09:12:32.5Z", 1),                            // sub-second
		strings.Replace(want, "}", `,"extra":1}`, 1),                                    // unknown member
		strings.Replace(want, `"leaf_version"`, `"leaf_version":"x","leaf_version"`, 1), // duplicate
	} {
		if _, err := tlogfmt.ParseLeaf([]byte(bad)); err == nil {
			t.Errorf("ParseLeaf accepted %s", bad)
		}
	}
}

func TestSTHExactBytes(t *testing.T) {
	_, lk, js := key(t)
	root := make([]byte, 32)
	for i := range root {
		root[i] = byte(i)
	}
	// 09:12:31.5 is written rounded up: 09:12:32.
	sth, err := tlogfmt.SignSTH(js, tlogfmt.STH{LogID: lk.Origin, TreeSize: 12, RootHash: root, Timestamp: time.Date(2026, 12, 1, 9, 12, 31, 500e6, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	const want = "eyJhbGciOiJFZERTQSIsImtpZCI6ImtQcktfcW14VldhWVZBOXd3QkY2SXVvM3ZWeno3VHhIQ1R3WEJ5Z3JTNGsiLCJ0eXAiOiJ2cnAtdGxvZy1zdGgrand0In0.eyJsb2dfaWQiOiJsb2cuZXhhbXBsZS50ZXN0L3ZycCIsInJvb3RfaGFzaCI6IkFBRUNBd1FGQmdjSUNRb0xEQTBPRHhBUkVoTVVGUllYR0JrYUd4d2RIaDgiLCJ0aW1lc3RhbXAiOiIyMDI2LTEyLTAxVDA5OjEyOjMyWiIsInRyZWVfc2l6ZSI6MTJ9.lssR-z_v6NMx9fUCiagONc95yDmg3nCASSYKb-RqtY0SQDxXTTuxI8iXPKBUNw6hg6UmUWUxeaid2NY0GeABCA"
	if sth != want {
		t.Fatalf("STH\n%s\nwant\n%s", sth, want)
	}
	payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(sth, ".")[1])
	if string(payload) != `{"log_id":"log.example.test/vrp","root_hash":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8","timestamp":"2026-12-01T09:12:32Z","tree_size":12}` {
		t.Fatalf("payload %s", payload)
	}
	got, k, err := tlogfmt.VerifySTH(sth, []tlogfmt.LogKey{lk})
	if err != nil || got.TreeSize != 12 || k.KID != lk.KID || !got.Timestamp.Equal(time.Date(2026, 12, 1, 9, 12, 32, 0, time.UTC)) {
		t.Fatalf("VerifySTH: %+v %v", got, err)
	}
	// Tampering: one signature byte, the typ, another key.
	if _, _, err := tlogfmt.VerifySTH(sth[:len(sth)-3]+"AAA", []tlogfmt.LogKey{lk}); !errors.Is(err, tlogfmt.ErrSignature) {
		t.Errorf("bad signature: %v", err)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	ok, _ := tlogfmt.NewLogKey(lk.Origin, other)
	ok.KID = lk.KID // same kid, other key
	if _, _, err := tlogfmt.VerifySTH(sth, []tlogfmt.LogKey{ok}); !errors.Is(err, tlogfmt.ErrSignature) {
		t.Errorf("other key: %v", err)
	}
	sep, _ := tlogfmt.SignSEP(js, tlogfmt.SEP{LogID: lk.Origin, Timestamp: time.Now()})
	if _, _, err := tlogfmt.VerifySTH(sep, []tlogfmt.LogKey{lk}); !errors.Is(err, tlogfmt.ErrSignature) {
		t.Errorf("a SEP accepted as an STH: %v", err)
	}
}

func TestSEPExactBytes(t *testing.T) {
	_, lk, js := key(t)
	idx := uint64(7)
	h := "sha256:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	sep, err := tlogfmt.SignSEP(js, tlogfmt.SEP{LogID: lk.Origin, MMDSeconds: 60, Timestamp: time.Date(2026, 12, 1, 9, 12, 32, 0, time.UTC),
		Entries: []tlogfmt.SEPEntry{{ArtifactHash: h, ArtifactType: "vrp_attestation", LeafIndex: &idx, LoggedAt: "2026-12-01T09:12:32Z"}}})
	if err != nil {
		t.Fatal(err)
	}
	const want = "eyJhbGciOiJFZERTQSIsImtpZCI6ImtQcktfcW14VldhWVZBOXd3QkY2SXVvM3ZWeno3VHhIQ1R3WEJ5Z3JTNGsiLCJ0eXAiOiJ2cnAtdGxvZy1zZXArand0In0.eyJlbnRyaWVzIjpbeyJhcnRpZmFjdF9oYXNoIjoic2hhMjU2OjAwMDEwMjAzMDQwNTA2MDcwODA5MGEwYjBjMGQwZTBmMTAxMTEyMTMxNDE1MTYxNzE4MTkxYTFiMWMxZDFlMWYiLCJhcnRpZmFjdF90eXBlIjoidnJwX2F0dGVzdGF0aW9uIiwibGVhZl9pbmRleCI6NywibG9nZ2VkX2F0IjoiMjAyNi0xMi0wMVQwOToxMjozMloifV0sImxvZ19pZCI6ImxvZy5leGFtcGxlLnRlc3QvdnJwIiwibW1kX3NlY29uZHMiOjYwLCJ0aW1lc3RhbXAiOiIyMDI2LTEyLTAxVDA5OjEyOjMyWiJ9.7P0sbjtK2z37rOoJS9H1OTUGxWghct8Z934Vos5tYHvIYyx3zLb2v1qZqOrSgKM3FGUbF2UCM6vQUs5fMCzVBw"
	if sep != want {
		t.Fatalf("SEP\n%s\nwant\n%s", sep, want)
	}
	payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(sep, ".")[1])
	if j, _ := jcs.Transform(payload); string(j) != string(payload) {
		t.Fatalf("SEP payload is not JCS: %s", payload)
	}
	got, _, err := tlogfmt.VerifySEP(sep, []tlogfmt.LogKey{lk})
	if err != nil || len(got.Entries) != 1 || *got.Entries[0].LeafIndex != 7 || got.MMDSeconds != 60 {
		t.Fatalf("VerifySEP: %+v %v", got, err)
	}
}

func TestInstants(t *testing.T) {
	tm := time.Date(2026, 12, 1, 9, 12, 31, 1, time.UTC)
	if tlogfmt.FormatInstant(tm) != "2026-12-01T09:12:31Z" || tlogfmt.FormatInstantCeil(tm) != "2026-12-01T09:12:32Z" {
		t.Fatal(tlogfmt.FormatInstant(tm), tlogfmt.FormatInstantCeil(tm))
	}
	if tlogfmt.FormatInstantCeil(time.Date(2026, 12, 1, 9, 12, 31, 0, time.UTC)) != "2026-12-01T09:12:31Z" {
		t.Fatal("a whole second must not be rounded up")
	}
	for _, bad := range []string{"2026-12-01T09:12:31+00:00", "2026-12-01T09:12:31.0Z", "2026-12-01 09:12:31Z", "2026-13-01T09:12:31Z"} {
		if _, err := tlogfmt.ParseInstant(bad); err == nil {
			t.Errorf("ParseInstant(%q) accepted", bad)
		}
	}
}

// FuzzParseLeaf: whatever ParseLeaf accepts is a well-formed leaf whose
// RFC 8785 bytes are the input (the fast path and the strict decoder agree).
func FuzzParseLeaf(f *testing.F) {
	f.Add([]byte(`{"artifact_hash":"sha256:` + strings.Repeat("ab", 32) + `","artifact_type":"vrp_attestation","leaf_version":"vrp-tlog-v0.1","logged_at":"2026-12-01T09:12:32Z"}`))
	f.Add([]byte(`{"artifact_hash":"sha256:` + strings.Repeat("ab", 32) + `","artifact_type":"vrp_attestation","leaf_version":"vrp-tlog-v0.1","logged_at":"2026-12-01T09:12:32Z","x":"\","artifact_type":"a"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := tlogfmt.ParseLeaf(data)
		if err != nil {
			return
		}
		b, err := l.Bytes()
		if err != nil || string(b) != string(data) {
			t.Fatalf("accepted %q as %+v", data, l)
		}
		if j, err := jcs.Transform(data); err != nil || string(j) != string(data) {
			t.Fatalf("accepted non-JCS %q", data)
		}
	})
}
