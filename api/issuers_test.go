package api_test

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/signer"
)

// multiIssuer is the deployment of issue 15's acceptance: two issuers and
// four keys in one process, an Ed25519 and an ES256 key per issuer, the
// second key of each issuer sharing it (VRP K5).
var multiIssuerKeys = []struct{ name, issuer, alg string }{
	{"villa", villa, signer.AlgEdDSA}, // oldest: the default key
	{"villa-transport", villa, signer.AlgES256},
	{"shop", "example.com", signer.AlgEdDSA},
	{"shop-es", "example.com", signer.AlgES256},
}

func newMultiIssuer(t *testing.T, postgres bool) *harness {
	t.Helper()
	h := newHarness(t, harnessOpts{Postgres: postgres})
	for _, k := range multiIssuerKeys {
		_, _, err := h.mgr.CreateKey(context.Background(), rotation.CreateKeyRequest{Name: k.name, Issuer: k.issuer, Algorithm: k.alg,
			Backend: software.Kind, ShareIssuer: true}, rotation.Actor{Name: "test", Reason: "setup"})
		if err != nil {
			t.Fatalf("create %s: %v", k.name, err)
		}
	}
	return h
}

// fetchSource GETs an attestation's source URL from the harness, with the
// URL's host as the request's Host (what a verifier resolving it reaches).
func (h *harness) fetchSource(source string) (*http.Response, []byte) {
	h.t.Helper()
	u, err := url.Parse(source)
	if err != nil || u.Scheme != "https" {
		h.t.Fatalf("source %q is not an https URL", source)
	}
	return h.do(request{method: http.MethodGet, path: u.RequestURI(), host: u.Host})
}

// TestEverySourceHoldsItsSigningVersion (issue 15): for every key of a
// multi-key, multi-issuer deployment, the attestation's source — fetched
// as a verifier would, by its URL's host — is a JWKS that holds the
// signing version, and go-jose verifies the attestation's signature with
// it; also after a rotation, with the now retired version.
func TestEverySourceHoldsItsSigningVersion(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) { testEverySource(t, db == "postgres") })
	}
}

func testEverySource(t *testing.T, postgres bool) {
	h := newMultiIssuer(t, postgres)
	tok := h.token("node", tokenOK, api.ScopeSignAll)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	check := func(what string) []string {
		t.Helper()
		var atts []string
		for _, k := range multiIssuerKeys {
			resp, body := h.postJSON("/v1/keys/"+k.name+"/mcp-transport", tok, `{"tool":"get_verified_stay_offer","arguments":{"guests":2}}`)
			wantStatus(t, what+": transport "+k.name, resp, body, http.StatusOK)
			var tr api.TransportResponse
			decode(t, body, &tr)
			if want := "https://" + k.issuer + "/.well-known/jwks.json"; tr.Attestation.Source != want {
				t.Errorf("%s: %s source %q, want %q", what, k.name, tr.Attestation.Source, want)
			}
			atts = append(atts, tr.Attestation.Source+" "+tr.JWS+" "+tr.KID)
		}
		return atts
	}
	verifyAll := func(what string, atts []string) {
		t.Helper()
		for _, a := range atts {
			f := strings.Fields(a)
			source, jws, kid := f[0], f[1], f[2]
			resp, body := h.fetchSource(source)
			wantStatus(t, what+": GET "+source, resp, body, http.StatusOK)
			var set jose.JSONWebKeySet
			if err := json.Unmarshal(body, &set); err != nil {
				t.Fatalf("%s: go-jose cannot read %s: %v", what, source, err)
			}
			if p := verifyJOSE(t, set, jws, kid); !strings.Contains(string(p), `"tool":"get_verified_stay_offer"`) {
				t.Errorf("%s: payload %s", what, p)
			}
		}
	}
	before := check("before rotation")
	verifyAll("before rotation", before)
	for _, k := range multiIssuerKeys {
		resp, b := h.postJSON("/v1/keys/"+k.name+"/rotate", admin, `{"mode":"now","reason":"issue 15 test"}`)
		wantStatus(t, "rotate "+k.name, resp, b, http.StatusOK)
	}
	// The retired versions still verify from the same source, and so do
	// the new ones.
	verifyAll("after rotation, retired", before)
	verifyAll("after rotation, active", check("after rotation"))
}

// TestHostSelectsIssuerDocuments (issue 15): /.well-known/jwks.json,
// did.json and vrp-key-history.json are the Host's issuer's (port and
// case ignored), holding every key of it; an unknown Host gets the
// default key's issuer; per-key documents stay; every public document
// answers CORS GET/HEAD from any origin.
func TestHostSelectsIssuerDocuments(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) { testHostSelects(t, db == "postgres") })
	}
}

func testHostSelects(t *testing.T, postgres bool) {
	h := newMultiIssuer(t, postgres)
	kidsOf := func(name string) []string {
		set, _ := h.jwks(name)
		var out []string
		for _, k := range set.Keys {
			out = append(out, k.KeyID)
		}
		return out
	}
	want := map[string][]string{
		villa:         append(kidsOf("villa"), kidsOf("villa-transport")...),
		"example.com": append(kidsOf("shop"), kidsOf("shop-es")...),
	}
	bodies := map[string]string{}
	for _, host := range []string{villa, "EXAMPLE.com:8443", "unknown.example", ""} {
		issuer := strings.ToLower(strings.TrimSuffix(host, ":8443"))
		if issuer == "unknown.example" || issuer == "" {
			issuer = villa // the default key's
		}
		resp, body := h.do(request{method: http.MethodGet, path: "/.well-known/jwks.json", host: host})
		wantStatus(t, "jwks for Host "+host, resp, body, http.StatusOK)
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "*" {
			t.Errorf("jwks for Host %q: Access-Control-Allow-Origin %q, want *", host, got)
		}
		var set jose.JSONWebKeySet
		decode(t, body, &set)
		var kids []string
		for _, k := range set.Keys {
			kids = append(kids, k.KeyID)
		}
		wantKIDs := want[issuer]
		if strings.Join(sortedCopy(kids), ",") != strings.Join(sortedCopy(wantKIDs), ",") || len(kids) != 2 {
			t.Errorf("jwks for Host %q lists %v, want %v", host, kids, wantKIDs)
		}
		if host != "" {
			bodies[issuer] = string(body)
		}

		resp, body = h.do(request{method: http.MethodGet, path: "/.well-known/did.json", host: host})
		wantStatus(t, "did.json for Host "+host, resp, body, http.StatusOK)
		var did struct {
			ID                 string
			VerificationMethod []struct{ ID string }
		}
		decode(t, body, &did)
		if did.ID != "did:web:"+issuer || len(did.VerificationMethod) != 2 {
			t.Errorf("did.json for Host %q: %s", host, body)
		}
		for _, vm := range did.VerificationMethod {
			kid := strings.TrimPrefix(vm.ID, "did:web:"+issuer+"#")
			if !strings.Contains(strings.Join(wantKIDs, ","), kid) {
				t.Errorf("did.json for Host %q has method %s of another issuer", host, vm.ID)
			}
		}

		resp, body = h.do(request{method: http.MethodGet, path: api.WellKnownHistory, host: host})
		wantStatus(t, "history for Host "+host, resp, body, http.StatusOK)
		var hist struct {
			Issuer  string `json:"issuer"`
			Keys    []map[string]any
			Revoked []map[string]any `json:"vrp_revoked_keys"`
		}
		decode(t, body, &hist)
		if hist.Issuer != issuer || len(hist.Keys) != 2 || hist.Revoked == nil || len(hist.Revoked) != 0 {
			t.Errorf("history for Host %q: %s", host, body)
		}
		for _, e := range hist.Keys {
			if e["vrp_key"] == nil || e["vrp_jwk_thumbprint"] == nil {
				t.Errorf("history for Host %q: entry without vrp_key or thumbprint: %v", host, e)
			}
		}
	}
	if bodies[villa] == bodies["example.com"] {
		t.Errorf("both issuers' JWKS are the same document")
	}
	// Per-key documents stay, whatever the Host.
	resp, body := h.do(request{method: http.MethodGet, path: "/v1/keys/shop-es/jwks.json", host: villa})
	wantStatus(t, "per-key JWKS", resp, body, http.StatusOK)
	var set jose.JSONWebKeySet
	decode(t, body, &set)
	if len(set.Keys) != 1 || set.Keys[0].Algorithm != "ES256" {
		t.Errorf("per-key JWKS of shop-es for Host %s: %s", villa, body)
	}
	// CORS on HEAD and the per-key documents; never on the signing or
	// admin API.
	for _, p := range []string{"/v1/keys/shop/history.json", "/v1/keys/shop/jwks.json", "/.well-known/did.json"} {
		resp, _ := h.do(request{method: http.MethodHead, path: p})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("HEAD %s: status %d, Access-Control-Allow-Origin %q", p, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	resp, _ = h.do(request{method: http.MethodOptions, path: "/.well-known/jwks.json", header: map[string]string{"Origin": "https://agent.example", "Access-Control-Request-Method": "POST"}})
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("OPTIONS on the JWKS: Access-Control-Allow-Origin %q, want none (GET/HEAD only)", got)
	}
	resp, _ = h.get("/v1/keys", "")
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("admin API: Access-Control-Allow-Origin %q, want none", got)
	}
}

// TestThumbprintsInVersions (issue 15): the admin API's versions carry the
// RFC 7638 thumbprint, equal to go-jose's over the published JWK.
func TestThumbprintsInVersions(t *testing.T) {
	h := newMultiIssuer(t, false)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	for _, k := range multiIssuerKeys {
		resp, body := h.get("/v1/keys/"+k.name+"/versions", admin)
		wantStatus(t, "versions "+k.name, resp, body, http.StatusOK)
		var out struct{ Versions []api.VersionInfo }
		decode(t, body, &out)
		set, _ := h.jwks(k.name)
		if len(out.Versions) != 1 || len(set.Keys) != 1 {
			t.Fatalf("%s: %d versions, %d JWKS keys", k.name, len(out.Versions), len(set.Keys))
		}
		tp, err := set.Keys[0].Thumbprint(crypto.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := out.Versions[0].Thumbprint, base64.RawURLEncoding.EncodeToString(tp); got != want || len(got) != 43 {
			t.Errorf("%s: thumbprint %q, want go-jose's %q", k.name, got, want)
		}
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
