package verifier

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// verifyOne runs VerifyReceipt on a receipt that must be envelope-valid
// and returns its single attestation result.
func verifyOne(t *testing.T, receipt []byte, opts Options) AttestationResult {
	t.Helper()
	res := VerifyReceipt(context.Background(), receipt, opts)
	if !res.ReceiptValid || len(res.Attestations) != 1 {
		t.Fatalf("receipt not valid with one attestation: %+v", res)
	}
	return res.Attestations[0]
}

func checkAtt(t *testing.T, got, wantRes AttestationResult) {
	t.Helper()
	if !reflect.DeepEqual(got, wantRes) {
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(wantRes)
		t.Errorf("got %s, want %s", gj, wj)
	}
}

func TestAttestationOutcomes(t *testing.T) {
	k := newEdKey(t, "example.test-2026-06-01-01")
	other := newEdKey(t, "example.test-2026-06-01-02")
	set := jwksOf(t, k.jwk)
	good := k.sign(`{"offer_id":"o1"}`)
	static := Options{Now: testNow, Resolve: StaticJWKS(set)}

	notYet := att("offer", good)
	notYet["valid_from"] = "2026-06-24T12:30:00Z"
	expired := att("offer", good)
	expired["valid_until"] = "2026-06-24T11:59:59.999Z"
	sigNum := att("payment", "")
	sigNum["signature"] = 42
	sigBlank := att("payment", " \t\n\u00a0\ufeff\u2028")
	fromNull := att("offer", good)
	fromNull["valid_from"] = nil
	untilBlank := att("offer", good)
	untilBlank["valid_until"] = "  "
	untilNum := att("offer", good)
	untilNum["valid_until"] = 1782302400000
	untilJSForm := att("offer", good)
	untilJSForm["valid_until"] = "Wed Jun 24 2026 13:00:00 GMT+0000" // Date.parse accepts; RFC 3339 does not
	noSource := att("offer", good)
	delete(noSource, "source")

	cases := []struct {
		name string
		att  map[string]any
		opts Options
		want AttestationResult
	}{
		{"verified", att("offer", good), static, want(0, "offer", StatusVerified, "", k.kid)},
		{"not yet valid keeps kid", notYet, static, want(0, "offer", StatusExpired, CodeNotYetValid, k.kid)},
		{"expired keeps kid", expired, static, want(0, "offer", StatusExpired, CodeSigExpired, k.kid)},
		{"missing signature", att("payment", ""), static, want(0, "payment", StatusUnverifiable, CodeLayerUnverifiable, "")},
		{"signature not a string", sigNum, static, want(0, "payment", StatusUnverifiable, CodeLayerUnverifiable, "")},
		{"blank signature (JS trim set)", sigBlank, static, want(0, "payment", StatusUnverifiable, CodeLayerUnverifiable, "")},
		{"valid_from null", fromNull, static, want(0, "offer", StatusInvalid, CodeMissingValidityWindow, "")},
		{"valid_until blank", untilBlank, static, want(0, "offer", StatusInvalid, CodeMissingValidityWindow, "")},
		{"valid_until number", untilNum, static, want(0, "offer", StatusInvalid, CodeMissingValidityWindow, "")},
		{"valid_until non-RFC 3339", untilJSForm, static, want(0, "offer", StatusInvalid, CodeMissingValidityWindow, "")},
		{"no source still resolves", noSource, static, want(0, "offer", StatusVerified, "", k.kid)},
		{"nil resolver", att("offer", good), Options{Now: testNow}, want(0, "offer", StatusUnverifiable, CodeKeyUnresolvable, "")},
		{"resolver error", att("offer", good), Options{Now: testNow, Resolve: func(context.Context, string, map[string]any) (*JWKS, error) {
			return nil, errors.New("fetch failed")
		}}, want(0, "offer", StatusUnverifiable, CodeKeyUnresolvable, "")},
		{"resolver nil set", att("offer", good), Options{Now: testNow, Resolve: StaticJWKS(nil)}, want(0, "offer", StatusUnverifiable, CodeKeyUnresolvable, "")},
		{"empty JWKS", att("offer", good), Options{Now: testNow, Resolve: StaticJWKS(&JWKS{})}, want(0, "offer", StatusInvalid, CodeSigInvalid, "")},
		{"kid not in JWKS", att("offer", other.sign(`{"a":1}`)), static, want(0, "offer", StatusInvalid, CodeSigInvalid, "")},
		{"right kid wrong key", att("offer", newEdKey(t, k.kid).sign(`{"a":1}`)), static, want(0, "offer", StatusInvalid, CodeSigInvalid, "")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkAtt(t, verifyOne(t, receiptOf(t, c.att), c.opts), c.want)
		})
	}
}

func TestResolverArguments(t *testing.T) {
	k := newEdKey(t, "k1")
	a := att("offer", k.sign(`{}`))
	a["ref"] = "offer:1"
	var gotSource string
	var gotAtt map[string]any
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	res := VerifyReceipt(ctx, receiptOf(t, a), Options{Now: testNow, Resolve: func(c context.Context, source string, att map[string]any) (*JWKS, error) {
		if c.Value(ctxKey{}) != "v" {
			t.Error("resolver did not get the caller's context")
		}
		gotSource, gotAtt = source, att
		return jwksOf(t, k.jwk), nil
	}})
	if !res.FullyVerified {
		t.Fatalf("not verified: %+v", res)
	}
	if gotSource != "https://example.test/.well-known/jwks.json" || gotAtt["ref"] != "offer:1" {
		t.Errorf("resolver got source %q attestation %v", gotSource, gotAtt)
	}
}

func TestFreshnessMillisecondPrecision(t *testing.T) {
	k := newEdKey(t, "k1")
	sig := k.sign(`{}`)
	for _, c := range []struct {
		name, from, until string
		now               time.Time
		want              AttestationResult
	}{
		{"now equals valid_until", testFrom, "2026-06-24T12:00:00Z", testNow, want(0, "offer", StatusVerified, "", "k1")},
		{"now equals valid_from", "2026-06-24T12:00:00Z", testUntil, testNow, want(0, "offer", StatusVerified, "", "k1")},
		{"1 ms after valid_until", testFrom, "2026-06-24T12:00:00Z", testNow.Add(time.Millisecond), want(0, "offer", StatusExpired, CodeSigExpired, "k1")},
		{"sub-ms now truncated", testFrom, "2026-06-24T12:00:00Z", testNow.Add(999 * time.Microsecond), want(0, "offer", StatusVerified, "", "k1")},
		{"sub-ms window truncated", "2026-06-24T12:00:00.0009Z", testUntil, testNow, want(0, "offer", StatusVerified, "", "k1")},
		{"offset window", "2026-06-24T13:30:00+02:00", "2026-06-24T08:00:00-04:00", testNow, want(0, "offer", StatusVerified, "", "k1")},
		{"offset window not yet", "2026-06-24T14:30:00+02:00", testUntil, testNow, want(0, "offer", StatusExpired, CodeNotYetValid, "k1")},
		{"inverted window", testUntil, testFrom, testNow, want(0, "offer", StatusExpired, CodeNotYetValid, "k1")},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := att("offer", sig)
			a["valid_from"], a["valid_until"] = c.from, c.until
			checkAtt(t, verifyOne(t, receiptOf(t, a), Options{Now: c.now, Resolve: StaticJWKS(jwksOf(t, k.jwk))}), c.want)
		})
	}
}

func TestZeroNowIsCurrentTime(t *testing.T) {
	k := newEdKey(t, "k1")
	a := att("offer", k.sign(`{}`))
	now := time.Now().UTC()
	a["valid_from"] = now.Add(-time.Hour).Format(time.RFC3339)
	a["valid_until"] = now.Add(time.Hour).Format(time.RFC3339)
	checkAtt(t, verifyOne(t, receiptOf(t, a), Options{Resolve: StaticJWKS(jwksOf(t, k.jwk))}), want(0, "offer", StatusVerified, "", "k1"))
}

func TestSignatureAttacks(t *testing.T) {
	k := newEdKey(t, "k1")
	set := jwksOf(t, k.jwk)
	payload := `{"offer_id":"o1","price":100}`
	good := k.sign(payload)
	parts := strings.Split(good, ".")
	x, _ := base64.RawURLEncoding.DecodeString(k.jwk["x"].(string))
	hs := func(header string) string {
		input := b64u([]byte(header)) + "." + parts[1]
		m := hmac.New(sha256.New, x) // the public key used as an HMAC secret
		m.Write([]byte(input))
		return input + "." + b64u(m.Sum(nil))
	}
	resigned := func(header string) string { return k.signRaw(header, payload) }

	cases := []struct {
		name string
		jws  string
	}{
		{"alg none, empty signature", b64u([]byte(`{"alg":"none","kid":"k1"}`)) + "." + parts[1] + "."},
		{"alg none, signature kept", b64u([]byte(`{"alg":"none","kid":"k1"}`)) + "." + parts[1] + "." + parts[2]},
		{"alg HS256 keyed with public key", hs(`{"alg":"HS256","kid":"k1"}`)},
		{"alg absent", resigned(`{"kid":"k1"}`)},
		{"alg lower case", resigned(`{"alg":"eddsa","kid":"k1"}`)},
		{"alg Ed25519 (not in allow-list)", resigned(`{"alg":"Ed25519","kid":"k1"}`)},
		{"alg ES256 with an Ed25519 key", resigned(`{"alg":"ES256","kid":"k1"}`)},
		{"crit header", resigned(`{"alg":"EdDSA","kid":"k1","crit":["b64"],"b64":false}`)},
		{"kid not a string", resigned(`{"alg":"EdDSA","kid":1}`)},
		{"kid empty", resigned(`{"alg":"EdDSA","kid":""}`)},
		{"duplicate header member", resigned(`{"alg":"EdDSA","kid":"k1","alg":"EdDSA"}`)},
		{"header not an object", resigned(`["EdDSA"]`)},
		{"payload not an object", k.signRaw(`{"alg":"EdDSA","kid":"k1"}`, `"text"`)},
		{"payload duplicate member", k.signRaw(`{"alg":"EdDSA","kid":"k1"}`, `{"a":1,"a":2}`)},
		{"payload re-encoded with whitespace", parts[0] + "." + b64u([]byte(`{ "offer_id": "o1", "price": 100 }`)) + "." + parts[2]},
		{"payload re-encoded, members reordered", parts[0] + "." + b64u([]byte(`{"price":100,"offer_id":"o1"}`)) + "." + parts[2]},
		{"payload as padded base64url", parts[0] + "." + base64.URLEncoding.EncodeToString([]byte(payload)) + "." + parts[2]},
		{"payload as std base64", parts[0] + "." + base64.StdEncoding.EncodeToString([]byte(payload+"??>")) + "." + parts[2]},
		{"header re-encoded", b64u([]byte(`{"typ":"JWT","kid":"k1","alg":"EdDSA"}`)) + "." + parts[1] + "." + parts[2]},
		{"line break in segment", parts[0] + "." + parts[1][:4] + "\n" + parts[1][4:] + "." + parts[2]},
		{"two segments", parts[0] + "." + parts[1]},
		{"four segments", good + "." + parts[2]},
		{"JSON serialization", `{"payload":"` + parts[1] + `","protected":"` + parts[0] + `","signature":"` + parts[2] + `"}`},
		{"truncated signature", parts[0] + "." + parts[1] + "." + parts[2][:40]},
		{"signature flipped", parts[0] + "." + parts[1] + "." + strings.ToUpper(parts[2][:1]) + strings.ToLower(parts[2][1:])},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := verifyOne(t, receiptOf(t, att("offer", c.jws)), Options{Now: testNow, Resolve: StaticJWKS(set)})
			checkAtt(t, got, want(0, "offer", StatusInvalid, CodeSigInvalid, ""))
		})
	}
	// The unmodified token verifies, so each case above fails for its own reason.
	checkAtt(t, verifyOne(t, receiptOf(t, att("offer", good)), Options{Now: testNow, Resolve: StaticJWKS(set)}),
		want(0, "offer", StatusVerified, "", "k1"))
}

func TestKeySelection(t *testing.T) {
	k := newEdKey(t, "k1")
	noKid := newEdKey(t, "")
	unsignedHeader := noKid.signRaw(`{"alg":"EdDSA"}`, `{}`)

	encKey := newEdKey(t, "k1")
	encKey.jwk["use"] = "enc"
	opsKey := newEdKey(t, "k1")
	opsKey.jwk["key_ops"] = []string{"sign"}
	algKey := newEdKey(t, "k1")
	algKey.jwk["alg"] = "ES256"

	for _, c := range []struct {
		name string
		jws  string
		set  *JWKS
		want AttestationResult
	}{
		{"no header kid: any key of the type, kid null", unsignedHeader, jwksOf(t, k.jwk, noKid.jwk), want(0, "l", StatusVerified, "", "")},
		{"no header kid, key absent", unsignedHeader, jwksOf(t, k.jwk), want(0, "l", StatusInvalid, CodeSigInvalid, "")},
		{"two keys share a kid", k.sign(`{}`), jwksOf(t, newEdKey(t, "k1").jwk, k.jwk), want(0, "l", StatusVerified, "", "k1")},
		{"use enc is not a candidate", encKey.sign(`{}`), jwksOf(t, encKey.jwk), want(0, "l", StatusInvalid, CodeSigInvalid, "")},
		{"key_ops without verify", opsKey.sign(`{}`), jwksOf(t, opsKey.jwk), want(0, "l", StatusInvalid, CodeSigInvalid, "")},
		{"JWK alg mismatch", algKey.sign(`{}`), jwksOf(t, algKey.jwk), want(0, "l", StatusInvalid, CodeSigInvalid, "")},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkAtt(t, verifyOne(t, receiptOf(t, att("l", c.jws)), Options{Now: testNow, Resolve: StaticJWKS(c.set)}), c.want)
		})
	}
}

func TestES256(t *testing.T) {
	ec := newECKey(t, "ec1")
	ed := newEdKey(t, "ec1") // same kid, other type: never a candidate for ES256
	set := jwksOf(t, ed.jwk, ec.jwk)
	opts := Options{Now: testNow, Resolve: StaticJWKS(set)}

	rs := ec.sign(t, `{"tool":"x"}`, false)
	checkAtt(t, verifyOne(t, receiptOf(t, att("transport", rs)), opts), want(0, "transport", StatusVerified, "", "ec1"))

	der := ec.sign(t, `{"tool":"x"}`, true)
	checkAtt(t, verifyOne(t, receiptOf(t, att("transport", der)), opts), want(0, "transport", StatusInvalid, CodeSigInvalid, ""))

	// An EdDSA header naming the EC key's kid only reaches the Ed25519 key.
	checkAtt(t, verifyOne(t, receiptOf(t, att("transport", ed.sign(`{}`))), opts), want(0, "transport", StatusVerified, "", "ec1"))
	onlyEC := Options{Now: testNow, Resolve: StaticJWKS(jwksOf(t, ec.jwk))}
	checkAtt(t, verifyOne(t, receiptOf(t, att("transport", ed.sign(`{}`))), onlyEC), want(0, "transport", StatusInvalid, CodeSigInvalid, ""))

	v, err := VerifyCompactJWS(rs, set)
	if err != nil {
		t.Fatal(err)
	}
	if v.Algorithm != AlgES256 || v.KID != "ec1" || string(v.Payload) != `{"tool":"x"}` || v.Key.KeyType != "EC" {
		t.Errorf("VerifiedJWS = %+v", v)
	}
	if _, err := VerifyCompactJWS(der, set); !errors.Is(err, ErrBadSignature) {
		t.Errorf("DER signature: err = %v, want ErrBadSignature", err)
	}
}

func TestVerifyCompactJWSErrors(t *testing.T) {
	k := newEdKey(t, "k1")
	set := jwksOf(t, k.jwk)
	good := k.sign(`{"a":1}`)
	parts := strings.Split(good, ".")
	for _, c := range []struct {
		name string
		jws  string
		keys *JWKS
		want error
	}{
		{"not compact", "abc", set, ErrMalformedJWS},
		{"alg none", b64u([]byte(`{"alg":"none"}`)) + "." + parts[1] + ".", set, ErrUnsupportedAlgorithm},
		{"unknown kid", newEdKey(t, "k2").sign(`{}`), set, ErrNoMatchingKey},
		{"nil set", good, nil, ErrNoMatchingKey},
		{"bad signature", parts[0] + "." + parts[1] + "." + b64u(make([]byte, 64)), set, ErrBadSignature},
		{"huge", strings.Repeat("A", MaxJWSBytes+1), set, ErrMalformedJWS},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := VerifyCompactJWS(c.jws, c.keys); !errors.Is(err, c.want) {
				t.Errorf("err = %v, want %v", err, c.want)
			}
		})
	}
	v, err := VerifyCompactJWS(good, set)
	if err != nil {
		t.Fatal(err)
	}
	if v.KID != "k1" || v.Header["typ"] != "JWT" || string(v.Payload) != `{"a":1}` || v.Key != set.Keys[0] {
		t.Errorf("VerifiedJWS = %+v", v)
	}
}

func TestEnvelope(t *testing.T) {
	k := newEdKey(t, "k1")
	sig := k.sign(`{}`)
	valid := string(receiptOf(t, att("offer", sig)))
	attJSON := `{"layer":"offer","valid_from":"` + testFrom + `","valid_until":"` + testUntil + `","signature":"` + sig + `"}`
	env := func(body string) string {
		return `{"vrp_receipt_version":"1.0","subject":{},"issuer":{}` + body + `}`
	}
	deep := strings.Repeat(`[`, MaxJSONDepth+1) + strings.Repeat(`]`, MaxJSONDepth+1)
	many := make([]map[string]any, MaxAttestations+1)
	for i := range many {
		many[i] = att("offer", sig)
	}

	cases := []struct {
		name, receipt, code string
	}{
		{"version 0.9", strings.Replace(valid, `"1.0"`, `"0.9"`, 1), CodeUnsupportedVersion},
		{"version missing", `{"subject":{},"issuer":{},"attestations":[` + attJSON + `]}`, CodeUnsupportedVersion},
		{"version number", `{"vrp_receipt_version":1.0,"subject":{},"issuer":{},"attestations":[` + attJSON + `]}`, CodeUnsupportedVersion},
		{"version with space", strings.Replace(valid, `"1.0"`, `"1.0 "`, 1), CodeUnsupportedVersion},
		{"version wins over shape", `{"vrp_receipt_version":"2.0"}`, CodeUnsupportedVersion},
		{"empty input", ``, CodeMalformedReceipt},
		{"not JSON", `receipt`, CodeMalformedReceipt},
		{"array", `[` + valid + `]`, CodeMalformedReceipt},
		{"string", `"1.0"`, CodeMalformedReceipt},
		{"null", `null`, CodeMalformedReceipt},
		{"number", `1`, CodeMalformedReceipt},
		{"trailing data", valid + `{}`, CodeMalformedReceipt},
		{"trailing garbage", valid + `x`, CodeMalformedReceipt},
		{"invalid UTF-8", strings.Replace(valid, `"offer"`, "\"of\xfffer\"", 1), CodeMalformedReceipt},
		{"duplicate version", `{"vrp_receipt_version":"0.9","vrp_receipt_version":"1.0","subject":{},"issuer":{},"attestations":[` + attJSON + `]}`, CodeMalformedReceipt},
		{"duplicate via escape", `{"vrp_receipt_version":"1.0","vrp_receipt_versio\u006e":"1.0","subject":{},"issuer":{},"attestations":[` + attJSON + `]}`, CodeMalformedReceipt},
		{"duplicate in attestation", env(`,"attestations":[{"layer":"offer","layer":"payment","valid_from":"` + testFrom + `","valid_until":"` + testUntil + `"}]`), CodeMalformedReceipt},
		{"duplicate deep in subject", `{"vrp_receipt_version":"1.0","subject":{"a":[{"b":1,"b":2}]},"issuer":{},"attestations":[` + attJSON + `]}`, CodeMalformedReceipt},
		{"subject missing", `{"vrp_receipt_version":"1.0","issuer":{},"attestations":[` + attJSON + `]}`, CodeMalformedReceipt},
		{"issuer not object", `{"vrp_receipt_version":"1.0","subject":{},"issuer":"me","attestations":[` + attJSON + `]}`, CodeMalformedReceipt},
		{"subject array", `{"vrp_receipt_version":"1.0","subject":[],"issuer":{},"attestations":[` + attJSON + `]}`, CodeMalformedReceipt},
		{"attestations missing", env(``), CodeMalformedReceipt},
		{"attestations not array", env(`,"attestations":` + attJSON), CodeMalformedReceipt},
		{"attestations empty", env(`,"attestations":[]`), CodeMalformedReceipt},
		{"attestation not object", env(`,"attestations":[` + attJSON + `,"x"]`), CodeMalformedReceipt},
		{"attestation null", env(`,"attestations":[null]`), CodeMalformedReceipt},
		{"layer empty", env(`,"attestations":[{"layer":"","valid_from":"` + testFrom + `","valid_until":"` + testUntil + `"}]`), CodeMalformedReceipt},
		{"layer not string", env(`,"attestations":[{"layer":7,"valid_from":"` + testFrom + `","valid_until":"` + testUntil + `"}]`), CodeMalformedReceipt},
		{"valid_from key missing", env(`,"attestations":[{"layer":"offer","valid_until":"` + testUntil + `"}]`), CodeMalformedReceipt},
		{"valid_until key missing", env(`,"attestations":[{"layer":"offer","valid_from":"` + testFrom + `"}]`), CodeMalformedReceipt},
		{"too deep", env(`,"attestations":[` + attJSON + `],"x":` + deep), CodeMalformedReceipt},
		{"too large", env(`,"attestations":[` + attJSON + `],"x":"` + strings.Repeat("a", MaxReceiptBytes) + `"`), CodeMalformedReceipt},
		{"too many attestations", string(receiptOf(t, many...)), CodeMalformedReceipt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := VerifyReceipt(context.Background(), []byte(c.receipt), Options{Now: testNow, Resolve: StaticJWKS(jwksOf(t, k.jwk))})
			wantRes := Result{Errors: []string{c.code}, Attestations: []AttestationResult{}}
			if !reflect.DeepEqual(res, wantRes) {
				t.Errorf("got %+v, want %+v", res, wantRes)
			}
		})
	}

	// Present-but-null valid_from passes the shape check (the key exists)
	// and fails the window check; extra members and reserved v2 points are
	// ignored (D1).
	ok := env(`,"attestations":[{"layer":"offer","valid_from":null,"valid_until":"` + testUntil + `"},` +
		`{"layer":"offer","valid_from":"` + testFrom + `","valid_until":"` + testUntil + `","signature":"` + sig + `","sub_receipt":{"vrp_receipt_version":"9"},"disclosure":null,"tlog":{},"x-extra":[1,2]}],"extra":true`)
	res := VerifyReceipt(context.Background(), []byte(ok), Options{Now: testNow, Resolve: StaticJWKS(jwksOf(t, k.jwk))})
	wantRes := Result{ReceiptValid: true, Errors: []string{}, Attestations: []AttestationResult{
		want(0, "offer", StatusInvalid, CodeMissingValidityWindow, ""),
		want(1, "offer", StatusVerified, "", "k1"),
	}}
	if !reflect.DeepEqual(res, wantRes) {
		t.Errorf("got %+v, want %+v", res, wantRes)
	}
}

func TestResultJSONShape(t *testing.T) {
	b, err := json.Marshal(Result{})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"receipt_valid":false,"fully_verified":false,"errors":[],"attestations":[]}` {
		t.Errorf("zero Result = %s", b)
	}
	b, err = json.Marshal(&Result{ReceiptValid: true, Attestations: []AttestationResult{want(0, "offer", StatusExpired, CodeSigExpired, "k")}})
	if err != nil {
		t.Fatal(err)
	}
	const w = `{"receipt_valid":true,"fully_verified":false,"errors":[],"attestations":[{"index":0,"layer":"offer","status":"expired","error":"sig_expired","kid":"k"}]}`
	if string(b) != w {
		t.Errorf("got %s\nwant %s", b, w)
	}
	b, _ = json.Marshal(want(1, "payment", StatusVerified, "", ""))
	if string(b) != `{"index":1,"layer":"payment","status":"verified","error":null,"kid":null}` {
		t.Errorf("nil pointers: %s", b)
	}
}

func TestParseJWKS(t *testing.T) {
	k := newEdKey(t, "k1")
	k.jwk["vrp_key_status"] = "retired"
	k.jwk["vrp_not_before"] = "2026-01-01T00:00:00Z"
	ec := newECKey(t, "ec1")
	offCurve := map[string]any{"kty": "EC", "crv": "P-256", "kid": "bad", "x": ec.jwk["x"], "y": b64u(make([]byte, 32))}
	doc, _ := json.Marshal(map[string]any{"keys": []any{
		k.jwk,
		map[string]any{"kty": "RSA", "kid": "rsa", "n": "AQAB", "e": "AQAB"},
		map[string]any{"kty": "OKP", "crv": "Ed448", "x": b64u(make([]byte, 57))},
		map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b64u(make([]byte, 31))},
		map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b64u(make([]byte, 32)) + "="},
		map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": 5, "x": b64u(make([]byte, 32))},
		offCurve,
		"not a key",
		map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": "leaked", "x": k.jwk["x"], "d": b64u(make([]byte, 32))},
		ec.jwk,
	}})
	set, err := ParseJWKS(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 || set.Keys[0].KeyID != "k1" || set.Keys[1].KeyID != "ec1" || len(set.Skipped) != 8 {
		t.Fatalf("keys %d, skipped %v", len(set.Keys), set.Skipped)
	}
	var raw map[string]any
	if err := json.Unmarshal(set.Keys[0].Raw, &raw); err != nil || raw["vrp_key_status"] != "retired" {
		t.Errorf("Raw lost lifecycle members: %s", set.Keys[0].Raw)
	}
	if !errors.Is(set.Skipped[0], ErrUnsupportedKey) {
		t.Errorf("RSA skip error = %v, want ErrUnsupportedKey", set.Skipped[0])
	}
	if !errors.Is(set.Skipped[7], ErrPrivateKeyMaterial) || set.Skipped[7].Error() != `key 8: JWK holds private key material ("d"): a verifier takes public keys only` {
		t.Errorf("private key skip error = %v, want ErrPrivateKeyMaterial", set.Skipped[7])
	}
	for _, bad := range []string{``, `[]`, `{}`, `{"keys":{}}`, `{"keys":[],"keys":[]}`, `{"keys":[]} x`, `{"keys":[` + strings.Repeat(" ", MaxJWKSBytes) + `]}`} {
		if _, err := ParseJWKS([]byte(bad)); err == nil {
			t.Errorf("ParseJWKS(%.40q) succeeded", bad)
		}
	}
	if set, err := ParseJWKS([]byte(`{"keys":[]}`)); err != nil || len(set.Keys) != 0 {
		t.Errorf("empty set: %v %v", set, err)
	}
}

func TestParseInstant(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // RFC 3339 nano UTC, "" = rejected
	}{
		{"2026-06-24T11:00:00Z", "2026-06-24T11:00:00Z"},
		{"2026-06-24T11:00:00.000Z", "2026-06-24T11:00:00Z"},
		{"2026-06-24t11:00:00.5z", "2026-06-24T11:00:00.5Z"},
		{"2026-06-24T11:00:00.123456789123Z", "2026-06-24T11:00:00.123456789Z"},
		{"2026-06-24T13:00:00+02:00", "2026-06-24T11:00:00Z"},
		{"2026-06-24T06:30:00-04:30", "2026-06-24T11:00:00Z"},
		{"2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"0000-01-01T00:00:00Z", "0000-01-01T00:00:00Z"},
		{"2026-02-29T00:00:00Z", ""},
		{"2026-04-31T00:00:00Z", ""},
		{"2026-13-01T00:00:00Z", ""},
		{"2026-06-24T24:00:00Z", ""},
		{"2026-06-24T23:60:00Z", ""},
		{"2016-12-31T23:59:60Z", ""},
		{"2026-06-24T11:00:00", ""},
		{"2026-06-24 11:00:00Z", ""},
		{"2026-06-24T11:00Z", ""},
		{"2026-06-24", ""},
		{"2026-06-24T11:00:00.Z", ""},
		{"2026-06-24T11:00:00+0200", ""},
		{"2026-06-24T11:00:00+24:00", ""},
		{"2026-06-24T11:00:00UTC", ""},
		{"+02026-06-24T11:00:00Z", ""},
		{" 2026-06-24T11:00:00Z", ""},
		{"2026-06-24T11:00:00Z ", ""},
		{"tisdag", ""},
		{"", ""},
	} {
		got, err := ParseInstant(c.in)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("ParseInstant(%q) = %v, want error", c.in, got)
		case c.want != "" && err != nil:
			t.Errorf("ParseInstant(%q): %v", c.in, err)
		case c.want != "" && got.UTC().Format(time.RFC3339Nano) != c.want:
			t.Errorf("ParseInstant(%q) = %s, want %s", c.in, got.UTC().Format(time.RFC3339Nano), c.want)
		}
	}
}

func TestGarbageNeverPanics(t *testing.T) {
	k := newEdKey(t, "k1")
	opts := Options{Now: testNow, Resolve: StaticJWKS(jwksOf(t, k.jwk))}
	seeds := [][]byte{receiptOf(t, att("offer", k.sign(`{}`)), att("payment", ""))}
	for _, v := range loadReceiptVectors(t) {
		seeds = append(seeds, v.Receipt)
	}
	// Every truncation and a single-byte corruption at every offset of each
	// seed (FuzzVerifyReceipt explores further).
	corrupt := []byte{0, '"', '{', '[', '}', ']', ',', ':', '.', 0xff, 'x'}
	for _, s := range seeds {
		for i := 0; i <= len(s); i++ {
			checkConsistent(t, s[:i], VerifyReceipt(context.Background(), s[:i], opts), false)
		}
		for i := 0; i < len(s); i++ {
			m := append([]byte(nil), s...)
			m[i] = corrupt[i%len(corrupt)]
			checkConsistent(t, m, VerifyReceipt(context.Background(), m, opts), false)
		}
	}
}
