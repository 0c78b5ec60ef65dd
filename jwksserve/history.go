package jwksserve

import (
	"strings"
	"time"

	"github.com/keysvc/keysvc/store"
)

// History is the key-history document (VRP K2, K4): every version of a key
// ever made, oldest first, including revoked ones, each with its lifecycle
// members, revocation reason and backend kind. It has the shape of a JWKS
// ({"keys": [...]}) so JOSE libraries can read it, plus the issuer. A
// lifecycle-aware verifier reads this document; a plain JOSE verifier reads
// the JWKS, from which revoked versions are absent.
type History struct {
	Issuer string  `json:"issuer"`
	Key    string  `json:"key"`
	Keys   []Entry `json:"keys"`
}

// BuildHistory returns the key-history document of one key.
func BuildHistory(k store.Key, versions []store.KeyVersion) (Document, error) {
	h := History{Issuer: k.Issuer, Key: k.Name, Keys: []Entry{}}
	for _, v := range versions {
		e, err := EntryFor(v)
		if err != nil {
			return Document{}, err
		}
		e.RevocationReason = v.RevocationReason
		e.Backend = v.BackendKind(k.Backend)
		h.Keys = append(h.Keys, e)
	}
	return NewDocument(h)
}

// Published reports whether v belongs in the plain JWKS at now: pending,
// active, or retired within the retention horizon (retention <= 0: kept
// forever). Revoked versions are never published there (K4).
func Published(v store.KeyVersion, retention time.Duration, now time.Time) bool {
	switch v.State {
	case store.StatePending, store.StateActive:
		return true
	case store.StateRetired:
		return retention <= 0 || v.RetiredAt == nil || now.Before(v.RetiredAt.Add(retention))
	}
	return false
}

// DIDDocument is a did:web DID document (W3C DID Core 1.0; did:web method
// specification) listing one JsonWebKey2020 verification method per
// published key version, all referenced from assertionMethod.
type DIDDocument struct {
	Context            []string             `json:"@context"`
	ID                 string               `json:"id"`
	VerificationMethod []VerificationMethod `json:"verificationMethod"`
	AssertionMethod    []string             `json:"assertionMethod"`
}

// VerificationMethod is a JsonWebKey2020 verification method.
type VerificationMethod struct {
	ID           string       `json:"id"`
	Type         string       `json:"type"`
	Controller   string       `json:"controller"`
	PublicKeyJwk DIDPublicJWK `json:"publicKeyJwk"`
}

// DIDPublicJWK is the public JWK inside a verification method.
type DIDPublicJWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	Y   string `json:"y,omitempty"`
	KID string `json:"kid"`
	Alg string `json:"alg"`
}

// DIDWeb returns "did:web:<domain>" for an issuer domain; a port would be
// percent-encoded (did:web §3.1), issuers here are plain DNS names.
func DIDWeb(issuer string) string { return "did:web:" + strings.ReplaceAll(issuer, ":", "%3A") }

// BuildDID returns the did:web document for issuer from the published
// entries of every key of that issuer (pass JWKS entries, i.e. already
// filtered by Published).
func BuildDID(issuer string, entries []Entry) (Document, error) {
	did := DIDWeb(issuer)
	doc := DIDDocument{
		Context:            []string{"https://www.w3.org/ns/did/v1", "https://w3id.org/security/suites/jws-2020/v1"},
		ID:                 did,
		VerificationMethod: []VerificationMethod{},
		AssertionMethod:    []string{},
	}
	for _, e := range entries {
		id := did + "#" + e.KID
		doc.VerificationMethod = append(doc.VerificationMethod, VerificationMethod{
			ID: id, Type: "JsonWebKey2020", Controller: did,
			PublicKeyJwk: DIDPublicJWK{Kty: e.Kty, Crv: e.Crv, X: e.X, Y: e.Y, KID: e.KID, Alg: e.Alg},
		})
		doc.AssertionMethod = append(doc.AssertionMethod, id)
	}
	return NewDocument(doc)
}
