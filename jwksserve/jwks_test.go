package jwksserve_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/store"
)

var b64u = base64.RawURLEncoding

// RFC 8037 Appendix A.1 / A.2: the Ed25519 test key.
const (
	rfc8037SeedHex = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
	rfc8037X       = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
)

// RFC 7515 Appendix A.3: the P-256 test key (public part).
const (
	rfc7515X = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"
	rfc7515Y = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
)

func rfc8037Key(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	seed, err := hex.DecodeString(rfc8037SeedHex)
	if err != nil {
		t.Fatal(err)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func rfc7515Public(t *testing.T) *ecdsa.PublicKey {
	t.Helper()
	x, err := b64u.DecodeString(rfc7515X)
	if err != nil {
		t.Fatal(err)
	}
	y, err := b64u.DecodeString(rfc7515Y)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func decodeMap(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, raw)
	}
	return m
}

func TestPublicJWKEd25519(t *testing.T) {
	priv := rfc8037Key(t)
	const kid = "villaakerlyckan.se-2026-05-18-01"
	raw, err := jwksserve.PublicJWK(priv.Public(), kid, "EdDSA")
	if err != nil {
		t.Fatalf("PublicJWK: %v", err)
	}
	got := decodeMap(t, raw)
	want := map[string]any{"kty": "OKP", "crv": "Ed25519", "x": rfc8037X, "kid": kid, "alg": "EdDSA", "use": "sig"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PublicJWK = %s\nwant members %v", raw, want)
	}
	if _, ok := got["d"]; ok {
		t.Fatal("public JWK has a private member d")
	}
	// The JWK parses back to the same key.
	pub, err := jwksserve.ParsePublicJWK(raw)
	if err != nil {
		t.Fatalf("ParsePublicJWK: %v", err)
	}
	if p, ok := pub.(ed25519.PublicKey); !ok || !p.Equal(priv.Public()) {
		t.Fatalf("ParsePublicJWK = %T %x, want the RFC 8037 public key", pub, pub)
	}
}

func TestPublicJWKP256(t *testing.T) {
	const kid = "example.com-2026-05-18-02"
	pub := rfc7515Public(t)
	raw, err := jwksserve.PublicJWK(pub, kid, "ES256")
	if err != nil {
		t.Fatalf("PublicJWK: %v", err)
	}
	got := decodeMap(t, raw)
	want := map[string]any{"kty": "EC", "crv": "P-256", "x": rfc7515X, "y": rfc7515Y, "kid": kid, "alg": "ES256", "use": "sig"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PublicJWK = %s\nwant members %v", raw, want)
	}
	back, err := jwksserve.ParsePublicJWK(raw)
	if err != nil {
		t.Fatalf("ParsePublicJWK: %v", err)
	}
	if p, ok := back.(*ecdsa.PublicKey); !ok || !p.Equal(pub) {
		t.Fatalf("ParsePublicJWK = %T, want the RFC 7515 A.3 public key", back)
	}

	// Coordinates are always 32 bytes (RFC 7518 §6.2.1.2), even when the
	// integer is shorter: find a key whose x has a leading zero byte.
	for i := 0; ; i++ {
		if i > 20000 {
			t.Fatal("no P-256 key with a short x found")
		}
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if k.X.BitLen() > 248 {
			continue
		}
		raw, err := jwksserve.PublicJWK(&k.PublicKey, kid, "ES256")
		if err != nil {
			t.Fatal(err)
		}
		m := decodeMap(t, raw)
		x, err := b64u.DecodeString(m["x"].(string))
		if err != nil || len(x) != 32 || x[0] != 0 {
			t.Fatalf("x = %q (%d bytes, %v), want 32 bytes with a leading zero", m["x"], len(x), err)
		}
		want := make([]byte, 32)
		k.X.FillBytes(want)
		if !bytes.Equal(x, want) {
			t.Fatalf("x = %x, want %x", x, want)
		}
		break
	}
}

func TestPublicJWKRefusesPrivateAndInvalid(t *testing.T) {
	priv := rfc8037Key(t)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]any{
		"ed25519 private": priv,
		"ecdsa private":   ec,
		"symmetric":       []byte("0123456789abcdef0123456789abcdef"),
		"nil":             nil,
		"short ed25519":   ed25519.PublicKey(make([]byte, 31)),
	} {
		if raw, err := jwksserve.PublicJWK(k, "kid", "EdDSA"); err == nil {
			t.Errorf("PublicJWK(%s) = %s, want an error", name, raw)
		}
	}
}

func TestParsePublicJWKRefusesPrivate(t *testing.T) {
	priv := rfc8037Key(t)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]any{"Ed25519": priv, "P-256": ec} {
		raw, err := (&jose.JSONWebKey{Key: k, KeyID: "k", Algorithm: "EdDSA", Use: "sig"}).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(raw, []byte(`"d":`)) {
			t.Fatalf("fixture %s is not a private JWK: %s", name, raw)
		}
		if pub, err := jwksserve.ParsePublicJWK(raw); err == nil {
			t.Errorf("ParsePublicJWK accepted a private %s JWK (returned %T)", name, pub)
		}
	}
	for name, raw := range map[string]string{
		"garbage":   `not json`,
		"empty":     ``,
		"symmetric": `{"kty":"oct","k":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"}`,
		"bad x":     `{"kty":"OKP","crv":"Ed25519","x":"AAAA"}`,
	} {
		if pub, err := jwksserve.ParsePublicJWK([]byte(raw)); err == nil {
			t.Errorf("ParsePublicJWK(%s) = %T, want an error", name, pub)
		}
	}
}

func ptr(t time.Time) *time.Time { return &t }

var (
	t0 = time.Date(2026, 5, 18, 10, 0, 0, 0, time.UTC)
	t1 = time.Date(2026, 6, 1, 0, 0, 0, 123456000, time.UTC) // µs fraction
	t2 = time.Date(2026, 7, 2, 3, 4, 5, 500000000, time.UTC) // .5
	// t3 is 2026-08-01T12:00:00Z given in another zone.
	t3 = time.Date(2026, 8, 1, 14, 0, 0, 0, time.FixedZone("CEST", 2*3600))
)

func edJWK(t *testing.T, kid string) []byte {
	t.Helper()
	raw, err := jwksserve.PublicJWK(rfc8037Key(t).Public(), kid, "EdDSA")
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestEntryFor(t *testing.T) {
	const kid = "villaakerlyckan.se-2026-05-18-01"
	jwk := edJWK(t, kid)
	base := func(state store.KeyState) store.KeyVersion {
		return store.KeyVersion{KID: kid, KeyName: "villa", Algorithm: "EdDSA", PublicJWK: jwk, State: state,
			CreatedAt: t0, PublishedAt: ptr(t0)}
	}
	common := jwksserve.Entry{Kty: "OKP", Crv: "Ed25519", X: rfc8037X, KID: kid, Alg: "EdDSA", Use: "sig"}
	with := func(status, nb, na, comp string) jwksserve.Entry {
		e := common
		e.Status, e.NotBefore, e.NotAfter, e.CompromisedAt = status, nb, na, comp
		return e
	}
	cases := []struct {
		name string
		v    store.KeyVersion
		want jwksserve.Entry
	}{
		{"pending, unscheduled", base(store.StatePending), with("pending", "", "", "")},
		{"pending, scheduled", func() store.KeyVersion {
			v := base(store.StatePending)
			v.ActivatesAt = ptr(t1)
			return v
		}(), with("pending", "2026-06-01T00:00:00.123456Z", "", "")},
		{"active", func() store.KeyVersion {
			v := base(store.StateActive)
			v.ActivatedAt = ptr(t0)
			return v
		}(), with("active", "2026-05-18T10:00:00Z", "", "")},
		{"active, activation overrides schedule", func() store.KeyVersion {
			v := base(store.StateActive)
			v.ActivatesAt, v.ActivatedAt = ptr(t0), ptr(t2)
			return v
		}(), with("active", "2026-07-02T03:04:05.5Z", "", "")},
		{"retired", func() store.KeyVersion {
			v := base(store.StateRetired)
			v.ActivatedAt, v.RetiredAt = ptr(t0), ptr(t1)
			return v
		}(), with("retired", "2026-05-18T10:00:00Z", "2026-06-01T00:00:00.123456Z", "")},
		{"retired, non-UTC instants", func() store.KeyVersion {
			v := base(store.StateRetired)
			v.ActivatedAt, v.RetiredAt = ptr(t2.In(time.FixedZone("X", -5*3600))), ptr(t3)
			return v
		}(), with("retired", "2026-07-02T03:04:05.5Z", "2026-08-01T12:00:00Z", "")},
		{"retired with a stray compromise instant", func() store.KeyVersion {
			v := base(store.StateRetired)
			v.ActivatedAt, v.RetiredAt, v.CompromisedAt = ptr(t0), ptr(t1), ptr(t2)
			return v
		}(), with("retired", "2026-05-18T10:00:00Z", "2026-06-01T00:00:00.123456Z", "")},
		{"revoked while active", func() store.KeyVersion {
			v := base(store.StateRevoked)
			v.ActivatedAt, v.RevokedAt, v.CompromisedAt = ptr(t0), ptr(t2), ptr(t1)
			return v
		}(), with("revoked", "2026-05-18T10:00:00Z", "2026-07-02T03:04:05.5Z", "2026-06-01T00:00:00.123456Z")},
		{"revoked after retirement", func() store.KeyVersion {
			v := base(store.StateRevoked)
			v.ActivatedAt, v.RetiredAt, v.RevokedAt, v.CompromisedAt = ptr(t0), ptr(t1), ptr(t3), ptr(t2)
			return v
		}(), with("revoked", "2026-05-18T10:00:00Z", "2026-06-01T00:00:00.123456Z", "2026-07-02T03:04:05.5Z")},
		{"revoked before it ever signed", func() store.KeyVersion {
			v := base(store.StateRevoked)
			v.RevokedAt, v.CompromisedAt = ptr(t1), ptr(t0)
			return v
		}(), with("revoked", "", "", "2026-05-18T10:00:00Z")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := jwksserve.EntryFor(c.v)
			if err != nil {
				t.Fatalf("EntryFor: %v", err)
			}
			if got != c.want {
				t.Fatalf("EntryFor =\n %+v\nwant\n %+v", got, c.want)
			}
		})
	}

	t.Run("P-256", func(t *testing.T) {
		raw, err := jwksserve.PublicJWK(rfc7515Public(t), "example.com-2026-05-18-01", "ES256")
		if err != nil {
			t.Fatal(err)
		}
		got, err := jwksserve.EntryFor(store.KeyVersion{KID: "example.com-2026-05-18-01", Algorithm: "ES256", PublicJWK: raw,
			State: store.StateActive, ActivatedAt: ptr(t0)})
		if err != nil {
			t.Fatal(err)
		}
		want := jwksserve.Entry{Kty: "EC", Crv: "P-256", X: rfc7515X, Y: rfc7515Y, KID: "example.com-2026-05-18-01",
			Alg: "ES256", Use: "sig", Status: "active", NotBefore: "2026-05-18T10:00:00Z"}
		if got != want {
			t.Fatalf("EntryFor = %+v, want %+v", got, want)
		}
	})
	t.Run("bad JWK", func(t *testing.T) {
		if e, err := jwksserve.EntryFor(store.KeyVersion{KID: kid, PublicJWK: []byte("{"), State: store.StateActive}); err == nil {
			t.Fatalf("EntryFor with a broken JWK = %+v, want an error", e)
		}
	})
	t.Run("wire names", func(t *testing.T) {
		v := base(store.StateRevoked)
		v.ActivatedAt, v.RevokedAt, v.CompromisedAt = ptr(t0), ptr(t2), ptr(t1)
		e, err := jwksserve.EntryFor(v)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"kty":"OKP","crv":"Ed25519","x":"` + rfc8037X + `","kid":"` + kid + `","alg":"EdDSA","use":"sig",` +
			`"vrp_key_status":"revoked","vrp_not_before":"2026-05-18T10:00:00Z","vrp_not_after":"2026-07-02T03:04:05.5Z",` +
			`"vrp_compromised_at":"2026-06-01T00:00:00.123456Z"}`
		if string(raw) != want {
			t.Fatalf("entry JSON\n %s\nwant\n %s", raw, want)
		}
	})
}

// history returns five versions of one key, oldest first:
// -01 retired, -02 revoked, -03 retired, -04 active, -05 pending.
func history(t *testing.T) []store.KeyVersion {
	t.Helper()
	var vs []store.KeyVersion
	day := func(d int) time.Time { return t0.AddDate(0, 0, d) }
	for i, st := range []store.KeyState{store.StateRetired, store.StateRevoked, store.StateRetired, store.StateActive, store.StatePending} {
		kid := "villaakerlyckan.se-2026-05-18-0" + strconv.Itoa(i+1)
		v := store.KeyVersion{KID: kid, KeyName: "villa", Algorithm: "EdDSA", PublicJWK: edJWK(t, kid), State: st,
			CreatedAt: day(i), PublishedAt: ptr(day(i))}
		switch st {
		case store.StateRetired:
			v.ActivatedAt, v.RetiredAt = ptr(day(i)), ptr(day(i+1))
		case store.StateRevoked:
			v.ActivatedAt, v.RevokedAt, v.CompromisedAt = ptr(day(i)), ptr(day(i+1)), ptr(day(i).Add(time.Hour))
		case store.StateActive:
			v.ActivatedAt = ptr(day(i))
		case store.StatePending:
			v.ActivatesAt = ptr(day(i + 1))
		}
		vs = append(vs, v)
	}
	return vs
}

func TestBuildJWKS(t *testing.T) {
	vs := history(t)
	d, err := jwksserve.BuildJWKS(vs)
	if err != nil {
		t.Fatalf("BuildJWKS: %v", err)
	}
	var set jwksserve.JWKS
	if err := json.Unmarshal(d.Body, &set); err != nil {
		t.Fatal(err)
	}
	var kids, states []string
	for _, e := range set.Keys {
		kids = append(kids, e.KID)
		states = append(states, e.Status)
	}
	wantKIDs := []string{
		"villaakerlyckan.se-2026-05-18-05", "villaakerlyckan.se-2026-05-18-04",
		"villaakerlyckan.se-2026-05-18-03", "villaakerlyckan.se-2026-05-18-01",
	}
	if !reflect.DeepEqual(kids, wantKIDs) {
		t.Fatalf("JWKS kids = %v, want %v (newest first, revoked -02 left out)", kids, wantKIDs)
	}
	if want := []string{"pending", "active", "retired", "retired"}; !reflect.DeepEqual(states, want) {
		t.Fatalf("JWKS states = %v, want %v", states, want)
	}
	if bytes.Contains(d.Body, []byte("2026-05-18-02")) || bytes.Contains(d.Body, []byte("revoked")) ||
		bytes.Contains(d.Body, []byte("vrp_compromised_at")) {
		t.Fatalf("JWKS mentions the revoked version:\n%s", d.Body)
	}
	// Each entry is exactly EntryFor of its version.
	for i, idx := range []int{4, 3, 2, 0} {
		want, err := jwksserve.EntryFor(vs[idx])
		if err != nil {
			t.Fatal(err)
		}
		if set.Keys[i] != want {
			t.Errorf("entry %d = %+v, want %+v", i, set.Keys[i], want)
		}
	}
	if got := set.Keys[1].NotBefore; got != "2026-05-21T10:00:00Z" {
		t.Errorf("active entry vrp_not_before = %q, want 2026-05-21T10:00:00Z", got)
	}
	if got := set.Keys[2].NotAfter; got != "2026-05-21T10:00:00Z" {
		t.Errorf("retired -03 vrp_not_after = %q, want 2026-05-21T10:00:00Z", got)
	}

	// Format: indented JSON with a trailing newline; strong ETag over the bytes.
	if !bytes.HasPrefix(d.Body, []byte("{\n  \"keys\": [\n    {\n")) || !bytes.HasSuffix(d.Body, []byte("}\n")) {
		t.Errorf("body is not indented JSON with a trailing newline:\n%s", d.Body)
	}
	sum := sha256.Sum256(d.Body)
	if want := `"` + b64u.EncodeToString(sum[:16]) + `"`; d.ETag != want {
		t.Errorf("ETag = %s, want %s", d.ETag, want)
	}

	// Deterministic: identical input (even a deep copy) gives identical bytes.
	for i := 0; i < 5; i++ {
		d2, err := jwksserve.BuildJWKS(history(t))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(d.Body, d2.Body) || d.ETag != d2.ETag {
			t.Fatalf("BuildJWKS is not deterministic:\n%s\n---\n%s", d.Body, d2.Body)
		}
	}

	// Any lifecycle change changes the ETag.
	changed := history(t)
	changed[4].State, changed[4].ActivatedAt = store.StateActive, ptr(t3)
	changed[3].State, changed[3].RetiredAt = store.StateRetired, ptr(t3)
	d3, err := jwksserve.BuildJWKS(changed)
	if err != nil {
		t.Fatal(err)
	}
	if d3.ETag == d.ETag {
		t.Fatal("ETag did not change after a rotation")
	}

	t.Run("empty", func(t *testing.T) {
		for _, in := range [][]store.KeyVersion{nil, {}} {
			d, err := jwksserve.BuildJWKS(in)
			if err != nil {
				t.Fatal(err)
			}
			if want := "{\n  \"keys\": []\n}\n"; string(d.Body) != want {
				t.Fatalf("empty JWKS = %q, want %q", d.Body, want)
			}
		}
	})
	t.Run("only revoked", func(t *testing.T) {
		d, err := jwksserve.BuildJWKS(vs[1:2])
		if err != nil {
			t.Fatal(err)
		}
		if want := "{\n  \"keys\": []\n}\n"; string(d.Body) != want {
			t.Fatalf("JWKS of a revoked version = %q, want %q", d.Body, want)
		}
	})
	t.Run("bad JWK", func(t *testing.T) {
		bad := history(t)
		bad[0].PublicJWK = []byte("nope")
		if _, err := jwksserve.BuildJWKS(bad); err == nil {
			t.Fatal("BuildJWKS accepted a version with a broken public JWK")
		}
	})
	t.Run("a plain JOSE consumer reads it", func(t *testing.T) {
		var ks jose.JSONWebKeySet
		if err := json.Unmarshal(d.Body, &ks); err != nil {
			t.Fatalf("go-jose cannot read the JWKS: %v", err)
		}
		if len(ks.Keys) != 4 {
			t.Fatalf("go-jose read %d keys, want 4", len(ks.Keys))
		}
		got := ks.Key("villaakerlyckan.se-2026-05-18-04")
		if len(got) != 1 || !got[0].IsPublic() {
			t.Fatalf("go-jose lookup of -04: %v", got)
		}
		if p, ok := got[0].Key.(ed25519.PublicKey); !ok || !p.Equal(rfc8037Key(t).Public()) {
			t.Fatalf("go-jose key -04 = %T", got[0].Key)
		}
		if len(ks.Key("villaakerlyckan.se-2026-05-18-02")) != 0 {
			t.Fatal("go-jose finds the revoked kid")
		}
	})
}

func TestServe(t *testing.T) {
	d, err := jwksserve.BuildJWKS(history(t))
	if err != nil {
		t.Fatal(err)
	}
	if jwksserve.MaxAge != 300 {
		t.Fatalf("MaxAge = %d, want 300 (VRP §3.1 caps JWKS caching at 5 minutes)", jwksserve.MaxAge)
	}
	etag := d.ETag
	bare := strings.Trim(etag, `"`)
	do := func(method, inm string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/.well-known/jwks.json", nil)
		if inm != "" {
			r.Header.Set("If-None-Match", inm)
		}
		w := httptest.NewRecorder()
		jwksserve.Serve(w, r, d)
		return w
	}
	checkCommon := func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		h := w.Result().Header
		if got := h.Get("Cache-Control"); got != "public, max-age=300" {
			t.Errorf("Cache-Control = %q, want %q", got, "public, max-age=300")
		}
		if got := h.Get("ETag"); got != etag {
			t.Errorf("ETag = %q, want %q", got, etag)
		}
	}

	t.Run("GET", func(t *testing.T) {
		w := do(http.MethodGet, "")
		if w.Code != http.StatusOK {
			t.Fatalf("status %d, want 200", w.Code)
		}
		checkCommon(t, w)
		h := w.Result().Header
		if got := h.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", got)
		}
		if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
		}
		if got := h.Get("Content-Length"); got != strconv.Itoa(len(d.Body)) {
			t.Errorf("Content-Length = %q, want %d", got, len(d.Body))
		}
		if !bytes.Equal(w.Body.Bytes(), d.Body) {
			t.Errorf("body differs from the document")
		}
	})
	t.Run("HEAD", func(t *testing.T) {
		w := do(http.MethodHead, "")
		if w.Code != http.StatusOK {
			t.Fatalf("status %d, want 200", w.Code)
		}
		checkCommon(t, w)
		if got := w.Result().Header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", got)
		}
		if got := w.Result().Header.Get("Content-Length"); got != strconv.Itoa(len(d.Body)) {
			t.Errorf("Content-Length = %q, want %d", got, len(d.Body))
		}
		if w.Body.Len() != 0 {
			t.Errorf("HEAD wrote a %d-byte body", w.Body.Len())
		}
	})

	notModified := map[string]string{
		"exact":               etag,
		"weak":                "W/" + etag,
		"star":                "*",
		"list, last":          `"AAAA", ` + etag,
		"list, first":         etag + `, "AAAA"`,
		"list, weak, no ws":   `W/"AAAA",W/` + etag,
		"surrounding spaces":  "  " + etag + "  ",
		"list with star":      `"AAAA", *`,
		"list, tabs":          "\"AAAA\",\t" + etag,
		"list, weak and star": `W/"x", W/` + etag + `, "y"`,
	}
	for name, inm := range notModified {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			t.Run("304 "+method+" "+name, func(t *testing.T) {
				w := do(method, inm)
				if w.Code != http.StatusNotModified {
					t.Fatalf("If-None-Match %q: status %d, want 304", inm, w.Code)
				}
				checkCommon(t, w)
				if w.Body.Len() != 0 {
					t.Errorf("304 carried a %d-byte body", w.Body.Len())
				}
				// RFC 9110 §15.4.5: no representation metadata on a 304.
				for _, name := range []string{"Content-Type", "Content-Length", "X-Content-Type-Options"} {
					if v, ok := w.Result().Header[name]; ok {
						t.Errorf("304 carries %s: %q", name, v)
					}
				}
			})
		}
	}

	modified := map[string]string{
		"other":              `"AAAA"`,
		"weak other":         `W/"AAAA"`,
		"unquoted":           bare,
		"prefix":             `"` + bare[:len(bare)-1] + `"`,
		"longer":             `"` + bare + `x"`,
		"list of others":     `"AAAA", W/"BBBB"`,
		"etag inside other":  `"x` + bare + `"`,
		"lowercase weak tag": "w/" + etag,
	}
	for name, inm := range modified {
		t.Run("200 "+name, func(t *testing.T) {
			w := do(http.MethodGet, inm)
			if w.Code != http.StatusOK {
				t.Fatalf("If-None-Match %q: status %d, want 200", inm, w.Code)
			}
			checkCommon(t, w)
			if !bytes.Equal(w.Body.Bytes(), d.Body) {
				t.Errorf("body differs from the document")
			}
		})
	}

	t.Run("real server", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { jwksserve.Serve(w, r, d) }))
		defer srv.Close()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body := new(bytes.Buffer)
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(body.Bytes(), d.Body) || resp.Header.Get("ETag") != etag {
			t.Fatalf("GET: %d, ETag %q, %d bytes", resp.StatusCode, resp.Header.Get("ETag"), body.Len())
		}
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
		resp2, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body.Reset()
		_, _ = body.ReadFrom(resp2.Body)
		resp2.Body.Close()
		if resp2.StatusCode != http.StatusNotModified || body.Len() != 0 {
			t.Fatalf("conditional GET: %d with %d bytes, want 304 and none", resp2.StatusCode, body.Len())
		}
	})
}

// TestServeIfNoneMatchSplitAcrossFields: If-None-Match may arrive as several
// field lines, which together form one list (RFC 9110 §5.3); a match in any
// of them is a match (§13.1.2: the server MUST answer 304 to GET/HEAD).
func TestServeIfNoneMatchSplitAcrossFields(t *testing.T) {
	d, err := jwksserve.BuildJWKS(history(t))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/.well-known/jwks.json", nil)
	r.Header.Add("If-None-Match", `"AAAA"`)
	r.Header.Add("If-None-Match", d.ETag)
	w := httptest.NewRecorder()
	jwksserve.Serve(w, r, d)
	if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Fatalf("status %d with %d bytes, want 304 and no body", w.Code, w.Body.Len())
	}
}

// TestThumbprint: RFC 8037 Appendix A.3 gives the RFC 7638 thumbprint of
// the RFC 8037 Ed25519 key.
func TestThumbprint(t *testing.T) {
	tp, err := jwksserve.Thumbprint(edJWK(t, "villaakerlyckan.se-2026-05-18-01"))
	if err != nil || tp != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" {
		t.Fatalf("Thumbprint = %q, %v; want RFC 8037 A.3's kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k", tp, err)
	}
	if _, err := jwksserve.Thumbprint([]byte(`{"kty":"OKP"}`)); err == nil {
		t.Fatal("a broken JWK has a thumbprint")
	}
}

// TestHistoryShape (ADR 0027): revoked versions are only under
// vrp_revoked_keys, the rest under keys, oldest first, each with its
// thumbprint; the issuer's document names each entry's key and has no key
// member; a JOSE library reading either as a JWKS finds no revoked kid.
func TestHistoryShape(t *testing.T) {
	vs := history(t) // -01 retired, -02 revoked, -03 retired, -04 active, -05 pending
	k := store.Key{Name: "villa", Issuer: "villaakerlyckan.se", Backend: "software"}
	d, err := jwksserve.BuildHistory(k, vs)
	if err != nil {
		t.Fatal(err)
	}
	var h jwksserve.History
	if err := json.Unmarshal(d.Body, &h); err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, e := range h.Keys {
		kids = append(kids, e.KID[len(e.KID)-2:]+":"+e.Status)
		if e.Thumbprint != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" || e.KeyName != "" || e.Backend != "software" {
			t.Errorf("entry %+v", e)
		}
	}
	if want := []string{"01:retired", "03:retired", "04:active", "05:pending"}; !reflect.DeepEqual(kids, want) {
		t.Errorf("keys %v, want %v", kids, want)
	}
	if len(h.Revoked) != 1 || h.Revoked[0].KID != "villaakerlyckan.se-2026-05-18-02" || h.Revoked[0].CompromisedAt == "" || h.Key != "villa" {
		t.Errorf("history %s", d.Body)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(d.Body, &set); err != nil || len(set.Keys) != 4 || len(set.Key("villaakerlyckan.se-2026-05-18-02")) != 0 {
		t.Fatalf("as a JWKS: %d keys, %v", len(set.Keys), err)
	}

	other := store.Key{Name: "transport", Issuer: "villaakerlyckan.se", Backend: "pkcs11"}
	id, err := jwksserve.BuildIssuerHistory("villaakerlyckan.se", []jwksserve.KeyVersions{{Key: k, Versions: vs[:2]}, {Key: other, Versions: vs[3:4]}})
	if err != nil {
		t.Fatal(err)
	}
	var ih map[string]any
	if err := json.Unmarshal(id.Body, &ih); err != nil {
		t.Fatal(err)
	}
	if _, ok := ih["key"]; ok {
		t.Errorf("issuer history has a key member: %s", id.Body)
	}
	keys, revoked := ih["keys"].([]any), ih["vrp_revoked_keys"].([]any)
	if len(keys) != 2 || len(revoked) != 1 || keys[0].(map[string]any)["vrp_key"] != "villa" || keys[1].(map[string]any)["vrp_key"] != "transport" ||
		keys[1].(map[string]any)["vrp_backend"] != "pkcs11" || revoked[0].(map[string]any)["vrp_key"] != "villa" {
		t.Errorf("issuer history %s", id.Body)
	}
}

// TestBuildDIDService (ADR 0029): did.json names the key history in one
// service entry and never lists a revoked version.
func TestBuildDIDService(t *testing.T) {
	var entries []jwksserve.Entry
	for _, v := range history(t) {
		e, err := jwksserve.EntryFor(v)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	d, err := jwksserve.BuildDID("villaakerlyckan.se", entries)
	if err != nil {
		t.Fatal(err)
	}
	var doc jwksserve.DIDDocument
	if err := json.Unmarshal(d.Body, &doc); err != nil {
		t.Fatal(err)
	}
	want := []jwksserve.DIDService{{ID: "did:web:villaakerlyckan.se#vrp-key-history", Type: "VrpKeyHistory",
		ServiceEndpoint: "https://villaakerlyckan.se/.well-known/vrp-key-history.json"}}
	if !reflect.DeepEqual(doc.Service, want) {
		t.Errorf("service %+v, want %+v", doc.Service, want)
	}
	for _, vm := range doc.VerificationMethod {
		if strings.HasSuffix(vm.ID, "-02") {
			t.Errorf("did.json lists the revoked %s", vm.ID)
		}
	}
}
