// Package jwksserve builds keysvc's public key documents — the JWKS (RFC
// 7517 §5) with VRP lifecycle members (K2) — as immutable bytes with an
// ETag, computed once per key change and served from memory.
package jwksserve

import (
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/store"
)

// MaxAge is the JWKS Cache-Control max-age in seconds. The VRP
// specification §3.1 caps how long a verifier may cache a JWKS at 5 minutes;
// a new key version must be published (pending) for longer than this
// before it signs.
const MaxAge = 300

// PublicJWK returns the public JWK JSON (RFC 7517 §4; OKP per RFC 8037 §2,
// EC per RFC 7518 §6.2) recorded in key history for a new key version:
// kty, crv, x (and y), kid, alg and use "sig". No private members.
func PublicJWK(pub crypto.PublicKey, kid, alg string) ([]byte, error) {
	jwk := jose.JSONWebKey{Key: pub, KeyID: kid, Algorithm: alg, Use: "sig"}
	if !jwk.Valid() || !jwk.IsPublic() {
		return nil, fmt.Errorf("jwksserve: not a valid public key for %s", kid)
	}
	return jwk.MarshalJSON()
}

// PublicJWKMembers are the members of a stored public JWK (PublicJWK).
type PublicJWKMembers struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	KID string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

// DecodePublicJWK decodes a stored public JWK strictly: exact member names
// (RFC 7517 §4 is case-sensitive), none but PublicJWKMembers', none twice,
// and exactly those of its key type (OKP Ed25519: crv, x; EC P-256: crv,
// x, y).
// Both the published entry (EntryFor) and the anchored RFC 7638
// thumbprint (Thumbprint, computed by go-jose, whose JSON is
// case-sensitive) read the JWK through it. A lenient decoder would
// publish a case-variant "X" added to the stored JWK while the thumbprint,
// and so the transparency log, still backed the real "x" (an attack
// review, session 46). Errors: the JWK is not such an object.
func DecodePublicJWK(b []byte) (PublicJWKMembers, error) {
	var m PublicJWKMembers
	if err := strictjson.Decode(b, &m, strictjson.Limits{}); err != nil {
		return m, fmt.Errorf("public JWK: %w", err)
	}
	// Exactly the members of its key type: a member the RFC 7638
	// thumbprint leaves out (a "y" on an OKP key) would be published
	// without being anchored.
	switch {
	case m.Kty == "OKP" && m.Crv == "Ed25519" && m.X != "" && m.Y == "": // RFC 8037 §2
	case m.Kty == "EC" && m.Crv == "P-256" && m.X != "" && m.Y != "": // RFC 7518 §6.2.1
	default:
		return m, fmt.Errorf("public JWK: not an Ed25519 (OKP: crv, x) or P-256 (EC: crv, x, y) public key: kty %q, crv %q", m.Kty, m.Crv)
	}
	return m, nil
}

// Entry is one JWKS member as published: the public JWK plus the VRP
// lifecycle members (K2). Instants are RFC 3339 UTC, with fractional
// seconds only when non-zero.
type Entry struct {
	Kty              string `json:"kty"`
	Crv              string `json:"crv,omitempty"`
	X                string `json:"x,omitempty"`
	Y                string `json:"y,omitempty"`
	KID              string `json:"kid"`
	Alg              string `json:"alg"`
	Use              string `json:"use"`
	Status           string `json:"vrp_key_status"`
	NotBefore        string `json:"vrp_not_before,omitempty"`
	NotAfter         string `json:"vrp_not_after,omitempty"`
	CompromisedAt    string `json:"vrp_compromised_at,omitempty"`
	RevocationReason string `json:"vrp_revocation_reason,omitempty"`
	Backend          string `json:"vrp_backend,omitempty"`
	// Thumbprint is the RFC 7638 SHA-256 thumbprint (base64url), set in
	// key-history documents only (BuildHistory, BuildIssuerHistory).
	Thumbprint string `json:"vrp_jwk_thumbprint,omitempty"`
	// KeyName names the key the version belongs to, in the issuer's
	// key-history document only.
	KeyName string `json:"vrp_key,omitempty"`
}

// EntryFor builds the published entry of one key version.
//
// vrp_not_before is when the version started signing (for a pending
// version: its scheduled activation, if any). vrp_not_after is when it
// stopped: absent while pending or active. A version revoked while
// pending never signed and carries neither.
func EntryFor(v store.KeyVersion) (Entry, error) {
	jwk, err := DecodePublicJWK(v.PublicJWK)
	if err != nil {
		return Entry{}, fmt.Errorf("jwksserve: %s: %w", v.KID, err)
	}
	e := Entry{Kty: jwk.Kty, Crv: jwk.Crv, X: jwk.X, Y: jwk.Y, KID: v.KID, Alg: v.Algorithm, Use: "sig", Status: string(v.State)}
	switch {
	case v.ActivatedAt != nil:
		e.NotBefore = instant(*v.ActivatedAt)
	case v.ActivatesAt != nil && v.State != store.StateRevoked:
		// A pending version's scheduled activation. A version revoked
		// before it was reached never signed and has no window: its
		// entry carries neither bound, and verifiers refuse its
		// signatures (key_revoked).
		e.NotBefore = instant(*v.ActivatesAt)
	}
	switch {
	case v.RetiredAt != nil:
		e.NotAfter = instant(*v.RetiredAt)
	case v.State == store.StateRevoked && v.RevokedAt != nil && v.ActivatedAt != nil:
		e.NotAfter = instant(*v.RevokedAt)
	}
	if v.State == store.StateRevoked && v.CompromisedAt != nil {
		e.CompromisedAt = instant(*v.CompromisedAt)
	}
	return e, nil
}

func instant(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Document is an immutable public document: its bytes and a strong ETag.
type Document struct {
	Body []byte
	ETag string // quoted: "\"sha256-…\""

	// Header values computed once with the document (NewDocument), so
	// that serving it allocates nothing per request.
	etagHeader, lengthHeader []string
}

// NewDocument marshals v (indented, trailing newline) and derives the ETag
// from a SHA-256 of the bytes.
func NewDocument(v any) (Document, error) {
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return Document{}, err
	}
	body = append(body, '\n')
	sum := sha256.Sum256(body)
	etag := `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`
	return Document{Body: body, ETag: etag, etagHeader: []string{etag}, lengthHeader: []string{strconv.Itoa(len(body))}}, nil
}

// JWKS is the published key set.
type JWKS struct {
	Keys []Entry `json:"keys"`
}

// BuildJWKS returns the plain JWKS of one key: every pending, active and
// retired version, newest first. Revoked versions are left out so that a
// lifecycle-unaware JOSE verifier fails closed on them (they stay in the
// key-history document).
func BuildJWKS(versions []store.KeyVersion) (Document, error) {
	set := JWKS{Keys: []Entry{}}
	for i := len(versions) - 1; i >= 0; i-- {
		v := versions[i]
		if v.State == store.StateRevoked {
			continue
		}
		e, err := EntryFor(v)
		if err != nil {
			return Document{}, err
		}
		set.Keys = append(set.Keys, e)
	}
	return NewDocument(set)
}

// BuildEntriesJWKS returns a JWKS of entries already built and filtered by
// Published (EntryFor), in the order given: the issuer's JWKS, every
// published version of every key of the issuer.
func BuildEntriesJWKS(entries []Entry) (Document, error) {
	set := JWKS{Keys: []Entry{}}
	for _, e := range entries {
		if e.Status == string(store.StateRevoked) {
			continue
		}
		set.Keys = append(set.Keys, e)
	}
	return NewDocument(set)
}

// Serve writes d with Cache-Control public, max-age=MaxAge and its ETag,
// answering 304 Not Modified when If-None-Match names the current ETag
// (RFC 9110 §13.1.2; "*" and weak comparisons included).
func Serve(w http.ResponseWriter, r *http.Request, d Document) { ServeMaxAge(w, r, d, MaxAge) }

// ServeMaxAge is Serve with Cache-Control max-age=maxAge seconds (at most
// MaxAge: the VRP specification §3.1 cap). It returns the status written:
// 200, or 304 (RFC 9110 §15.4.5: Cache-Control and ETag only; no body,
// Content-Type, Content-Length or X-Content-Type-Options).
func ServeMaxAge(w http.ResponseWriter, r *http.Request, d Document, maxAge int) int {
	maxAge = min(max(maxAge, 0), MaxAge)
	h := w.Header()
	// Direct assignment of canonical keys with shared, never-mutated
	// value slices: no per-request allocation.
	h["Cache-Control"] = cacheControl(maxAge)
	h["Etag"] = orNew(d.etagHeader, d.ETag)
	for _, inm := range r.Header["If-None-Match"] {
		if etagMatch(inm, d.ETag) {
			// RFC 9110 §15.4.5: the 304 carries the validator and the
			// caching fields a 200 would, and no representation metadata
			// (Content-Type; nor nosniff, which guards a body).
			w.WriteHeader(http.StatusNotModified)
			return http.StatusNotModified
		}
	}
	h["Content-Type"] = contentTypeJSON
	h["X-Content-Type-Options"] = nosniff
	h["Content-Length"] = orNew(d.lengthHeader, strconv.Itoa(len(d.Body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(d.Body)
	}
	return http.StatusOK
}

var (
	contentTypeJSON = []string{"application/json"}
	nosniff         = []string{"nosniff"}
	cacheControls   [MaxAge + 1][]string // by max-age in seconds
)

func init() {
	for i := range cacheControls {
		cacheControls[i] = []string{"public, max-age=" + strconv.Itoa(i)}
	}
}

func cacheControl(maxAge int) []string { return cacheControls[maxAge] }

// orNew returns the precomputed header value, or a new one for a Document
// built without NewDocument.
func orNew(pre []string, v string) []string {
	if pre != nil {
		return pre
	}
	return []string{v}
}

// etagMatch applies If-None-Match (RFC 9110 §13.1.2): "*", or any listed
// entity tag equal to etag under weak comparison.
func etagMatch(header, etag string) bool {
	for header != "" {
		var part string
		part, header, _ = strings.Cut(header, ",")
		p := strings.TrimSpace(part)
		if p == "*" || strings.TrimPrefix(p, "W/") == etag {
			return true
		}
	}
	return false
}

// ParsePublicJWK parses a public JWK (as written by PublicJWK) back into an
// ed25519.PublicKey or *ecdsa.PublicKey, after DecodePublicJWK's strict
// checks, so that it reads the key the published entry shows. Private
// JWKs are refused.
func ParsePublicJWK(raw []byte) (crypto.PublicKey, error) {
	if _, err := DecodePublicJWK(raw); err != nil {
		return nil, fmt.Errorf("jwksserve: %w", err)
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("jwksserve: public JWK: %w", err)
	}
	if !jwk.IsPublic() || !jwk.Valid() {
		return nil, fmt.Errorf("jwksserve: JWK is not a valid public key")
	}
	return jwk.Key, nil
}
