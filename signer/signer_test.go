package signer

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/internal/testvectors"
)

func TestJCSVectors(t *testing.T) {
	dir := testvectors.Dir(t)
	inputs, err := filepath.Glob(filepath.Join(dir, "jcs", "input", "*.json"))
	if err != nil || len(inputs) != 6 {
		t.Fatalf("want 6 JCS inputs, got %d (%v)", len(inputs), err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			raw, _ := os.ReadFile(in)
			want, err := os.ReadFile(filepath.Join(dir, "jcs", "output", filepath.Base(in)))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Canonicalize(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("canonical bytes differ\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestTransportVectors(t *testing.T) {
	raw := testvectors.Read(t, "vrp-mcp-transport.json")
	// The vector file uses snake_case members; map them explicitly.
	var loose struct {
		Cases []map[string]json.RawMessage `json:"cases"`
	}
	if err := json.Unmarshal(raw, &loose); err != nil {
		t.Fatal(err)
	}
	if len(loose.Cases) != 3 {
		t.Fatalf("want 3 cases, got %d", len(loose.Cases))
	}
	str := func(m map[string]json.RawMessage, k string) string {
		var s string
		if v, ok := m[k]; ok {
			if err := json.Unmarshal(v, &s); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	for _, c := range loose.Cases {
		t.Run(str(c, "name"), func(t *testing.T) {
			canon, err := NormalizeArguments(c["arguments"])
			if err != nil {
				t.Fatal(err)
			}
			if string(canon) != str(c, "expected_arguments_jcs") {
				t.Fatalf("arguments JCS\n got %s\nwant %s", canon, str(c, "expected_arguments_jcs"))
			}
			digest, _, err := ArgumentsSHA256(c["arguments"])
			if err != nil || digest != str(c, "expected_arguments_sha256") {
				t.Fatalf("arguments_sha256 = %s, %v; want %s", digest, err, str(c, "expected_arguments_sha256"))
			}
			served, err := time.Parse(time.RFC3339, str(c, "served_at"))
			if err != nil {
				t.Fatal(err)
			}
			_, assertion, err := BuildTransportAssertion(TransportCall{
				Tool: str(c, "tool"), Arguments: c["arguments"], ServedAt: served,
				Issuer: str(c, "issuer"), OfferRef: str(c, "offer_ref"), SessionID: str(c, "session_id"),
			})
			if err != nil {
				t.Fatal(err)
			}
			if string(assertion) != str(c, "expected_assertion_jcs") {
				t.Fatalf("assertion JCS\n got %s\nwant %s", assertion, str(c, "expected_assertion_jcs"))
			}
		})
	}
}

func TestSEP2828Vectors(t *testing.T) {
	var doc struct {
		Cases []struct {
			Name                  string          `json:"name"`
			Params                json.RawMessage `json:"params"`
			ExpectedProjectionJCS string          `json:"expected_projection_jcs"`
			ExpectedDigest        string          `json:"expected_digest"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(testvectors.Read(t, "sep2828-fallback-projection.json"), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) != 7 {
		t.Fatalf("want 7 cases, got %d", len(doc.Cases))
	}
	for _, c := range doc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			canon, digest, err := ProjectSEP2828(c.Params)
			if err != nil {
				t.Fatal(err)
			}
			if string(canon) != c.ExpectedProjectionJCS {
				t.Fatalf("projection\n got %s\nwant %s", canon, c.ExpectedProjectionJCS)
			}
			if digest != c.ExpectedDigest {
				t.Fatalf("digest %s, want %s", digest, c.ExpectedDigest)
			}
		})
	}
}

func rfc8037Key(t testing.TB) (ed25519.PrivateKey, map[string]string) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(testvectors.Read(t, "rfc8037-ed25519-jws.json"), &v); err != nil {
		t.Fatal(err)
	}
	var jwk struct{ D, X string }
	if err := json.Unmarshal(v["jwk_private"], &jwk); err != nil {
		t.Fatal(err)
	}
	seed, err := base64.RawURLEncoding.DecodeString(jwk.D)
	if err != nil || len(seed) != ed25519.SeedSize {
		t.Fatalf("bad seed: %v", err)
	}
	strs := map[string]string{}
	for _, k := range []string{"protected_header", "payload", "compact_jws", "jwk_thumbprint_sha256"} {
		var s string
		if err := json.Unmarshal(v[k], &s); err != nil {
			t.Fatal(err)
		}
		strs[k] = s
	}
	strs["x"] = jwk.X
	return ed25519.NewKeyFromSeed(seed), strs
}

func TestRFC8037Vector(t *testing.T) {
	key, v := rfc8037Key(t)
	if got := base64.RawURLEncoding.EncodeToString(key.Public().(ed25519.PublicKey)); got != v["x"] {
		t.Fatalf("public x %s, want %s", got, v["x"])
	}
	h, err := EncodeHeader(ProtectedHeader{Alg: AlgEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	if want := base64.RawURLEncoding.EncodeToString([]byte(v["protected_header"])); h != want {
		t.Fatalf("header %s, want %s", h, want)
	}
	jws, err := SignCompact(h, []byte(v["payload"]), AlgEdDSA, key)
	if err != nil {
		t.Fatal(err)
	}
	if jws != v["compact_jws"] {
		t.Fatalf("JWS\n got %s\nwant %s", jws, v["compact_jws"])
	}
	jwk := jose.JSONWebKey{Key: key.Public()}
	tp, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	if got := base64.RawURLEncoding.EncodeToString(tp); got != v["jwk_thumbprint_sha256"] {
		t.Fatalf("thumbprint %s, want %s", got, v["jwk_thumbprint_sha256"])
	}
}

func TestJWSSignerHeaderAndGoJoseVerify(t *testing.T) {
	key, _ := rfc8037Key(t)
	s, err := NewJWSSigner("villaakerlyckan.se-2026-05-18-01", AlgEdDSA, key)
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"a":1}`)
	jws, err := s.Sign(payload, "JWT")
	if err != nil {
		t.Fatal(err)
	}
	// Deterministic Ed25519: the exact bytes are fixed by key, header and payload.
	const want = "eyJhbGciOiJFZERTQSIsImtpZCI6InZpbGxhYWtlcmx5Y2thbi5zZS0yMDI2LTA1LTE4LTAxIiwidHlwIjoiSldUIn0.eyJhIjoxfQ."
	if jws[:len(want)] != want {
		t.Fatalf("JWS prefix\n got %s\nwant %s", jws, want)
	}
	if again, _ := s.Sign(payload, "JWT"); again != jws {
		t.Fatalf("Ed25519 JWS must be deterministic")
	}
	parsed, err := jose.ParseSignedCompact(jws, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Signatures[0].Header.KeyID != s.KID() {
		t.Fatalf("kid %q", parsed.Signatures[0].Header.KeyID)
	}
	out, err := parsed.Verify(key.Public())
	if err != nil || !bytes.Equal(out, payload) {
		t.Fatalf("go-jose verify: %v %q", err, out)
	}
	if _, err := s.Sign(payload, "bad\ntyp"); err == nil {
		t.Fatal("control character in typ must be refused")
	}
	quoted, err := s.Sign([]byte(`{"a":"\"<\\>"}`), `x"y\z`)
	if err != nil {
		t.Fatal(err)
	}
	compactAlphabet(t, jws)
	compactAlphabet(t, quoted)
}

// compactAlphabet fails unless jws holds only the base64url alphabet and
// '.' (RFC 7515 §7.1, RFC 4648 §5), whatever its typ and payload: the API
// writes keysvc's JWS into JSON answers without escaping
// (api.appendJWSMember).
func compactAlphabet(t *testing.T, jws string) {
	t.Helper()
	for i := 0; i < len(jws); i++ {
		c := jws[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			t.Fatalf("JWS byte %d is %q, outside base64url and '.': %s", i, c, jws)
		}
	}
}

func TestES256(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewJWSSigner("k-1", AlgES256, k)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign([]byte(`{"x":true}`), "")
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := jose.ParseSignedCompact(jws, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed.Signatures[0].Signature) != ES256SignatureSize {
		t.Fatalf("signature size %d", len(parsed.Signatures[0].Signature))
	}
	compactAlphabet(t, jws)
	if _, err := parsed.Verify(&k.PublicKey); err != nil {
		t.Fatal(err)
	}
	if _, err := NewJWSSigner("k", AlgEdDSA, k); err == nil {
		t.Fatal("alg/key mismatch must be refused")
	}
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"checkIn": "check_in", "checkOut": "check_out", "guests": "guests", "check_in": "check_in",
		"offerID": "offer_id", "HTTPServer": "http_server", "CheckIn": "check_in", "a1B": "a1_b",
		"already_snake_Case": "already_snake_case", "": "",
	} {
		if got := SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestArgumentErrors(t *testing.T) {
	_, _, err := ArgumentsSHA256([]byte(`{"checkIn":"2026-09-02","check_in":"2026-09-03"}`))
	if !errors.Is(err, ErrArgumentKeyCollision) {
		t.Fatalf("collision: %v", err)
	}
	if want := `"checkIn" and "check_in" both become "check_in"`; err == nil || !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Fatalf("message %q should contain %q", err, want)
	}
	if _, _, err := ArgumentsSHA256([]byte(`[1,2]`)); !errors.Is(err, ErrArgumentsNotObject) {
		t.Fatalf("array: %v", err)
	}
	var se *strictjson.Error
	if _, _, err := ArgumentsSHA256([]byte(`{"a":1,"a":2}`)); !errors.As(err, &se) || se.Code != strictjson.CodeDuplicateKey {
		t.Fatalf("duplicate: %v", err)
	}
	if _, _, err := ArgumentsSHA256([]byte(`{"n":12345678901234567890}`)); !errors.As(err, &se) || se.Code != strictjson.CodeNumberTooLarge {
		t.Fatalf("big number: %v", err)
	}
	// Nested keys are not renamed: only top-level keys are normalized.
	canon, err := NormalizeArguments([]byte(`{"stayInfo":{"checkIn":"x"}}`))
	if err != nil || string(canon) != `{"stay_info":{"checkIn":"x"}}` {
		t.Fatalf("nested: %s %v", canon, err)
	}
}

// TestSignDetached (ADR 0028): Ed25519 is deterministic, so the RFC 8037
// key's detached signature over a fixed object is exact; ES256 is r||s
// over SHA-256 in low-S form; only bytes beginning with '{' are signed, so
// no JWS signing input (base64url, never '{') can ever be.
func TestSignDetached(t *testing.T) {
	key, _ := rfc8037Key(t)
	s, err := NewJWSSigner("villaakerlyckan.se-2026-05-18-01", AlgEdDSA, key)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte(`{"alg":"EdDSA","version":1}`)
	sig, err := s.SignDetached(msg)
	if err != nil {
		t.Fatal(err)
	}
	if want := ed25519.Sign(key, msg); !bytes.Equal(sig, want) {
		t.Fatalf("Ed25519 detached = %x, want %x", sig, want)
	}
	for _, bad := range [][]byte{nil, {}, []byte(`eyJhbGciOiJFZERTQSJ9.e30`), []byte(` {"a":1}`), []byte(`[1]`)} {
		if _, err := s.SignDetached(bad); !errors.Is(err, ErrNotDetachedInput) {
			t.Errorf("SignDetached(%q) = %v, want ErrNotDetachedInput", bad, err)
		}
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	es, err := NewJWSSigner("k-1", AlgES256, k)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		rs, err := es.SignDetached(msg)
		if err != nil || len(rs) != 64 {
			t.Fatalf("ES256 detached: %x, %v", rs, err)
		}
		r, sv := new(big.Int).SetBytes(rs[:32]), new(big.Int).SetBytes(rs[32:])
		sum := sha256.Sum256(msg)
		if !ecdsa.Verify(&k.PublicKey, sum[:], r, sv) || sv.Cmp(p256HalfN) > 0 {
			t.Fatalf("ES256 detached signature %x does not verify or is high-S", rs)
		}
	}
}

// TestAlreadyCanonical: the formatter is skipped exactly for bytes it
// would leave as they are, within the conservative subset the scan knows.
func TestAlreadyCanonical(t *testing.T) {
	for _, c := range []struct {
		in   string
		want bool
	}{
		{`{"alg":"EdDSA","i":7,"offer_id":"offer:villaakerlyckan.se:2026-09-02/05"}`, true},
		{`{"":0,"a":[true,false,null,-12,"x",{}],"b":{"c":123456789012345,"d":[]}}`, true},
		{`"plain"`, true},
		{`0`, true},
		{`{"b":1,"a":2}`, false},                    // member order
		{`{"a":1,"a":2}`, false},                    // not strictly increasing
		{`{"a": 1}`, false},                         // whitespace
		{`{"a":1.5}`, false},                        // fractions go to the formatter
		{`{"a":1e3}`, false},                        // so do exponents
		{`{"a":-0}`, false},                         // RFC 8785 prints 0
		{`{"a":1234567890123456}`, false},           // 16 digits
		{`{"a":"\u00e9"}`, false},                   // escape
		{"{\"a\":\"\u00e9\"}", false},               // non-ASCII
		{"{\"a\":\"\u2028\"}", false},               // U+2028
		{`{"a":{"b":1,"a":1}}`, false},              // nested order
		{`[{"b":1},{"a":1}]`, true},                 // order is per object
		{`{"a":[{"b":1,"a":2}]}`, false},            // inside an array
		{`{"a":"x","b":{"z":1},"c":{"a":1}}`, true}, // each object has its own order
	} {
		if got := alreadyCanonical([]byte(c.in)); got != c.want {
			t.Errorf("alreadyCanonical(%s) = %v, want %v", c.in, got, c.want)
		}
		if c.want {
			out, err := Canonicalize([]byte(c.in))
			if err != nil || string(out) != c.in {
				t.Errorf("Canonicalize(%s) = %s, %v; want it unchanged", c.in, out, err)
			}
		}
	}
}

// TestTransportAssertionCanonicalPlain: an assertion whose values are all
// plain ASCII is written as it is and must be exactly what the RFC 8785
// formatter makes of it; values that need quoting (non-ASCII, '"', '\',
// control characters, DEL) take the formatter and give the same bytes as
// formatting a naive encoding of the same members.
func TestTransportAssertionCanonicalPlain(t *testing.T) {
	base := TransportAssertion{
		ProfileVersion: MCPProfileVersion, Type: MCPAssertionType, Tool: "get_verified_stay_offer",
		ArgumentsSHA256: "2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050",
		ServedAt:        "2026-09-01T12:00:00Z", Issuer: "villaakerlyckan.se",
	}
	got, err := base.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"arguments_sha256":"2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050","issuer":"villaakerlyckan.se",` +
		`"served_at":"2026-09-01T12:00:00Z","tool":"get_verified_stay_offer","type":"` + MCPAssertionType + `","vrp_mcp_profile_version":"` + MCPProfileVersion + `"}`
	if string(got) != want {
		t.Fatalf("Canonical() =\n%s\nwant\n%s", got, want)
	}
	for _, v := range []string{"", "x", "offer:a b~c", "é", "a\"b", `a\b`, "a\x7fb", "a\x01b", "\u2028", "日本", "A<>&'"} {
		for _, a := range []TransportAssertion{
			func() TransportAssertion { a := base; a.OfferRef = v; return a }(),
			func() TransportAssertion { a := base; a.SessionID = v; a.OfferRef = "o"; return a }(),
			func() TransportAssertion { a := base; a.Tool = v + "t"; return a }(),
		} {
			got, err := a.Canonical()
			if err != nil {
				t.Fatalf("%q: %v", v, err)
			}
			m := map[string]string{"arguments_sha256": a.ArgumentsSHA256, "issuer": a.Issuer, "served_at": a.ServedAt,
				"tool": a.Tool, "type": a.Type, "vrp_mcp_profile_version": a.ProfileVersion}
			if a.OfferRef != "" {
				m["offer_ref"] = a.OfferRef
			}
			if a.SessionID != "" {
				m["session_id"] = a.SessionID
			}
			raw, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := Canonicalize(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, ref) {
				t.Errorf("%q: Canonical() =\n%s\nformatter\n%s", v, got, ref)
			}
		}
	}
}

// TestSnakeCaseASCII: the byte-wise renaming of canonical argument names
// is SnakeCase, for the profile's examples and for random names over the
// characters its rule distinguishes.
func TestSnakeCaseASCII(t *testing.T) {
	for _, n := range []string{"", "checkIn", "offerID", "HTTPServer", "a_B", "A", "aB1c", "x9Y", "ABc", "_A", "__aBC_dE", "check_in", "URLs", "a-B", "a B"} {
		if got, want := string(appendSnakeCaseASCII(nil, []byte(n))), SnakeCase(n); got != want {
			t.Errorf("appendSnakeCaseASCII(%q) = %q, SnakeCase %q", n, got, want)
		}
	}
	const alphabet = "aBzZ09_-. ~"
	r := mrand.New(mrand.NewPCG(7, 8))
	for range 200_000 {
		b := make([]byte, r.IntN(10))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		if got, want := string(appendSnakeCaseASCII(nil, b)), SnakeCase(string(b)); got != want {
			t.Fatalf("appendSnakeCaseASCII(%q) = %q, SnakeCase %q", b, got, want)
		}
	}
}

// TestNormalizeArgumentsPaths: canonical arguments take the decoder-free
// path and give the general path's bytes; arguments whose renamed names
// reorder or collide, or that are not canonical, are left to the general
// path, whose errors are unchanged.
func TestNormalizeArgumentsPaths(t *testing.T) {
	for _, c := range []struct {
		in, want string
		fast     bool
		err      error
	}{
		{`{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}`, `{"check_in":"2026-09-02","check_out":"2026-09-05","guests":2}`, true, nil},
		{`{}`, `{}`, true, nil},
		{`{"a":{"aA":[true],"zZ":1}}`, `{"a":{"aA":[true],"zZ":1}}`, true, nil}, // nested names are not renamed
		{`{"aB":1,"a_c":2}`, `{"a_b":1,"a_c":2}`, true, nil},
		{`{"aZ":1,"a_b":2}`, `{"a_b":2,"a_z":1}`, false, nil}, // renaming reorders: the formatter sorts
		{`{"aB":1,"a_b":2}`, "", false, ErrArgumentKeyCollision},
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`, false, nil},
		{`{"a":1.50}`, `{"a":1.5}`, false, nil},
		{`{"a":9007199254740993}`, "", false, nil}, // beyond I-JSON: the strict check refuses it
		{`[1]`, "", false, ErrArgumentsNotObject},
	} {
		_, fast := normalizeCanonicalArguments([]byte(c.in))
		if fast != c.fast {
			t.Errorf("%s: decoder-free path %v, want %v", c.in, fast, c.fast)
		}
		got, err := NormalizeArguments([]byte(c.in))
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s: NormalizeArguments = %s, want an error", c.in, got)
		case c.err != nil && !errors.Is(err, c.err):
			t.Errorf("%s: error %v, want %v", c.in, err, c.err)
		case c.want != "" && (err != nil || string(got) != c.want):
			t.Errorf("%s: NormalizeArguments = %s (%v), want %s", c.in, got, err, c.want)
		}
		if slow, err2 := normalizeArguments([]byte(c.in)); string(slow) != string(got) || (err == nil) != (err2 == nil) {
			t.Errorf("%s: NormalizeArguments %s (%v), general path %s (%v)", c.in, got, err, slow, err2)
		}
	}
}
