package tlogfmt_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"golang.org/x/mod/sumdb/note"

	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
	"github.com/keysvc/keysvc/tlog/tlogtest"
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

// TestSEPDigestExactBytes: the digest promise of ADR 0038 signs the JCS
// object {"body_sha256","count","log_id","mmd_seconds","timestamp"}; it
// verifies only as its own typ, and VerifySEPDigest refuses a malformed
// payload and an echoing SEP.
func TestSEPDigestExactBytes(t *testing.T) {
	_, lk, js := key(t)
	body := `{"entries":[{"artifact_type":"vrp_attestation","artifact_hash":"sha256:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"}]}`
	d := tlogfmt.SEPDigest{LogID: lk.Origin, MMDSeconds: 60, Count: 1, BodySHA256: sha256.Sum256([]byte(body)), Timestamp: time.Date(2026, 12, 1, 9, 12, 31, 500e6, time.UTC)}
	sep, err := tlogfmt.SignSEPDigest(js, d)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(sep, ".")
	header, _ := base64.RawURLEncoding.DecodeString(parts[0])
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if string(header) != `{"alg":"EdDSA","kid":"`+lk.KID+`","typ":"vrp-tlog-sep-digest+jwt"}` {
		t.Fatalf("header %s", header)
	}
	const wantPayload = `{"body_sha256":"sha256:f5a715ff46f3b496d471cd19392951334aad9f151801545235848e9995439de1","count":1,"log_id":"log.example.test/vrp","mmd_seconds":60,"timestamp":"2026-12-01T09:12:32Z"}`
	if string(payload) != wantPayload {
		t.Fatalf("payload\n%s\nwant\n%s", payload, wantPayload)
	}
	if j, _ := jcs.Transform(payload); string(j) != string(payload) {
		t.Fatalf("payload is not JCS: %s", payload)
	}
	// Computed outside Go (Python cryptography, RFC 8032 seed above).
	const want = "eyJhbGciOiJFZERTQSIsImtpZCI6ImtQcktfcW14VldhWVZBOXd3QkY2SXVvM3ZWeno3VHhIQ1R3WEJ5Z3JTNGsiLCJ0eXAiOiJ2cnAtdGxvZy1zZXAtZGlnZXN0K2p3dCJ9.eyJib2R5X3NoYTI1NiI6InNoYTI1NjpmNWE3MTVmZjQ2ZjNiNDk2ZDQ3MWNkMTkzOTI5NTEzMzRhYWQ5ZjE1MTgwMTU0NTIzNTg0OGU5OTk1NDM5ZGUxIiwiY291bnQiOjEsImxvZ19pZCI6ImxvZy5leGFtcGxlLnRlc3QvdnJwIiwibW1kX3NlY29uZHMiOjYwLCJ0aW1lc3RhbXAiOiIyMDI2LTEyLTAxVDA5OjEyOjMyWiJ9.7kpSNikLETIYD3t9vs6IjFuwrmWnewswZqnU7ZBDU9G14FXVhU9-OvSpzvDHQcfSyHWFfa7kSCk8qYlT_4UkDQ"
	if sep != want {
		t.Fatalf("digest SEP\n%s\nwant\n%s", sep, want)
	}
	got, k, err := tlogfmt.VerifySEPDigest(sep, []tlogfmt.LogKey{lk})
	if err != nil || got.Count != 1 || got.BodySHA256 != d.BodySHA256 || got.MMDSeconds != 60 || k.KID != lk.KID ||
		!got.Timestamp.Equal(time.Date(2026, 12, 1, 9, 12, 32, 0, time.UTC)) {
		t.Fatalf("VerifySEPDigest: %+v %v", got, err)
	}
	// An echoing SEP is not a digest promise, nor the reverse.
	echo, _ := tlogfmt.SignSEP(js, tlogfmt.SEP{LogID: lk.Origin, Timestamp: time.Now()})
	if _, _, err := tlogfmt.VerifySEPDigest(echo, []tlogfmt.LogKey{lk}); !errors.Is(err, tlogfmt.ErrSignature) {
		t.Errorf("an echoing SEP accepted as a digest: %v", err)
	}
	if _, _, err := tlogfmt.VerifySEP(sep, []tlogfmt.LogKey{lk}); !errors.Is(err, tlogfmt.ErrSignature) {
		t.Errorf("a digest SEP accepted as an echoing one: %v", err)
	}
	for name, c := range map[string]struct{ payload, want string }{
		"count 0":        {strings.Replace(wantPayload, `"count":1`, `"count":0`, 1), "count, log_id"},
		"count too big":  {strings.Replace(wantPayload, `"count":1`, `"count":10001`, 1), "count, log_id"},
		"no count":       {strings.Replace(wantPayload, `"count":1,`, ``, 1), "count, log_id"},
		"short hash":     {strings.Replace(wantPayload, `"sha256:`, `"sha256:00`, 1), "body_sha256 is not"},
		"unknown member": {strings.Replace(wantPayload, `{`, `{"a":1,`, 1), "unknown"},
		"duplicate":      {strings.Replace(wantPayload, `"count":1`, `"count":1,"count":2`, 1), "duplicate"},
	} {
		if _, err := tlogfmt.ParseSEPDigestPayload([]byte(c.payload)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	if _, err := (tlogfmt.SEPDigest{LogID: lk.Origin}).Payload(); err == nil {
		t.Error("a digest of 0 entries was written")
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

// TestVerifyCosignaturesCountsWitnessesNotNames: a witness is its public
// key. A cosignature/v1 line signs the timestamp and the body, not the
// name, so whoever answers for a log can copy one witness's line under
// another name: a list with that public key under two names is refused
// (ErrWitnessKey) instead of counting one witness twice, as is the same
// key listed twice (which x/mod's note used to refuse as "ambiguous",
// reported as the log's fault). A trusted witness's line that does not
// verify is left out, and the others still count.
func TestVerifyCosignaturesCountsWitnessesNotNames(t *testing.T) {
	priv, lk, _ := key(t)
	ns, err := tlogfmt.NewNoteSigner(lk, priv)
	if err != nil {
		t.Fatal(err)
	}
	body := lk.Origin + "\n3\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n"
	signed, err := note.Sign(&note.Note{Text: body}, ns)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	w1, w2 := tlogtest.NewCosigner("witness.one", 1), tlogtest.NewCosigner("witness.two", 2)
	alias := w1.As("witness.alias")
	cp := string(signed) + w1.Line(body, ts) + alias.Line(body, ts)

	// One witness, one cosignature, under either name.
	for _, w := range []tlogtest.Cosigner{w1, alias} {
		got, err := tlogfmt.VerifyCosignatures(cp, []string{w.VKey()})
		if err != nil || len(got) != 1 || got[0].Name != w.Name() || got[0].VKey != w.VKey() || !got[0].Timestamp.Equal(ts) {
			t.Fatalf("VerifyCosignatures under %s: %+v %v", w.Name(), got, err)
		}
	}
	for name, keys := range map[string][]string{
		"one public key under two names": {w1.VKey(), alias.VKey()},
		"one key listed twice":           {w1.VKey(), w2.VKey(), w1.VKey()},
	} {
		_, err := tlogfmt.VerifyCosignatures(cp, keys)
		if !errors.Is(err, tlogfmt.ErrWitnessKey) || !strings.Contains(err.Error(), "are one public key, one witness, listed twice") {
			t.Fatalf("%s: %v, want ErrWitnessKey", name, err)
		}
	}
	if _, err := tlogfmt.VerifyCosignatures(cp, []string{"witness.bad+00000000+AAAA"}); !errors.Is(err, tlogfmt.ErrWitnessKey) {
		t.Fatalf("a malformed witness key: %v, want ErrWitnessKey", err)
	}

	// w2's line over another body does not verify: left out, w1 counts.
	bad := string(signed) + w1.Line(body, ts) + w2.Line(body+"x", ts)
	got, err := tlogfmt.VerifyCosignatures(bad, []string{w1.VKey(), w2.VKey()})
	if err != nil || len(got) != 1 || got[0].Name != w1.Name() {
		t.Fatalf("one invalid cosignature beside a valid one: %+v %v, want witness.one's alone", got, err)
	}
	if _, err := tlogfmt.VerifyCosignatures(bad, []string{w2.VKey()}); !errors.Is(err, tlogfmt.ErrSignature) {
		t.Fatalf("only an invalid cosignature: %v, want ErrSignature", err)
	}
	// A cosignature dated 2^63 seconds or later (here 2^64-1, signed as
	// such) reads as 1969 through the library: left out, w1 counts.
	wrapped := string(signed) + w1.Line(body, ts) + w2.Line(body, time.Unix(-1, 0))
	got, err = tlogfmt.VerifyCosignatures(wrapped, []string{w1.VKey(), w2.VKey()})
	if err != nil || len(got) != 1 || got[0].Name != w1.Name() {
		t.Fatalf("a cosignature dated 2^64-1 beside a valid one: %+v %v, want witness.one's alone", got, err)
	}
	if _, err := tlogfmt.VerifyCosignatures(wrapped, []string{w2.VKey()}); !errors.Is(err, tlogfmt.ErrSignature) {
		t.Fatalf("only a cosignature dated 2^64-1: %v, want ErrSignature", err)
	}
	// The key's base64 may hold '+', the separator of the name and hash.
	plus := tlogtest.NewCosigner("witness.plus", 8)
	if strings.Count(plus.VKey(), "+") < 3 {
		t.Fatalf("%s: want a key whose base64 holds '+'", plus.VKey())
	}
	if pub, err := tlogfmt.WitnessPublicKey(plus.VKey()); err != nil || !pub.Equal(plus.Public()) {
		t.Fatalf("WitnessPublicKey(%s): %x %v", plus.VKey(), pub, err)
	}
	good := string(signed) + w1.Line(body, ts) + w2.Line(body, ts.Add(time.Second))
	if got, err := tlogfmt.VerifyCosignatures(good, []string{w1.VKey(), w2.VKey()}); err != nil || len(got) != 2 || !got[1].Timestamp.Equal(ts.Add(time.Second)) {
		t.Fatalf("two witnesses: %+v %v", got, err)
	}
}

// TestSmallOrderKeysRefused: a witness or log key that is a point of
// small order is refused where it is read (WitnessPublicKey, and so
// VerifyCosignatures and verifier.ParseWitnessKey; NewLogKey, and so
// ParseJWKS and ParseVKey): under the identity point, the signature
// R = identity, S = 0 verifies for any message with crypto/ed25519, so
// such a witness's cosignature could be made by anyone. A real key is
// accepted.
func TestSmallOrderKeysRefused(t *testing.T) {
	identity := append([]byte{1}, make([]byte, 31)...)
	forged := append(append([]byte{}, identity...), make([]byte, 32)...) // R = identity, S = 0
	if !ed25519.Verify(identity, []byte("any message at all"), forged) {
		t.Fatal("the forged signature does not verify under the identity key: the premise of this test is gone")
	}
	order2, _ := hex.DecodeString("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f") // y = -1
	order4 := make([]byte, 32)                                                                        // y = 0
	for name, pub := range map[string][]byte{"identity": identity, "order 2": order2, "order 4": order4} {
		for _, typ := range []byte{0x01, 0x04} {
			kh := sha256.Sum256(append([]byte("witness.weak\n"+string(typ)), pub...))
			vkey := "witness.weak+" + hex.EncodeToString(kh[:4]) + "+" + base64.StdEncoding.EncodeToString(append([]byte{typ}, pub...))
			if _, err := tlogfmt.WitnessPublicKey(vkey); !errors.Is(err, tlogfmt.ErrWitnessKey) || !strings.Contains(err.Error(), "small order") {
				t.Errorf("%s, type %#x: WitnessPublicKey: %v, want ErrWitnessKey for a small-order point", name, typ, err)
			}
			if _, err := tlogfmt.VerifyCosignatures("log.example.test/vrp\n1\nAAAA\n", []string{vkey}); !errors.Is(err, tlogfmt.ErrWitnessKey) {
				t.Errorf("%s, type %#x: VerifyCosignatures: %v, want ErrWitnessKey", name, typ, err)
			}
		}
		if _, err := tlogfmt.NewLogKey("log.example.test/vrp", ed25519.PublicKey(pub)); err == nil || !strings.Contains(err.Error(), "small order") {
			t.Errorf("%s: NewLogKey: %v, want a small-order refusal", name, err)
		}
	}
	w := tlogtest.NewCosigner("witness.good", 1)
	if pub, err := tlogfmt.WitnessPublicKey(w.VKey()); err != nil || !pub.Equal(w.Public()) {
		t.Fatalf("a real witness key: %x %v", pub, err)
	}
}
