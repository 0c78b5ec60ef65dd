package jwksserve

import (
	"crypto"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/keysvc/keysvc/store"
)

// History is the key-history document (VRP K2, K4): every version of a key
// (or, for the issuer's document, of every key of an issuer) ever made,
// oldest first, each with its lifecycle members, RFC 7638 thumbprint,
// revocation reason and backend kind.
//
// Pending, active and retired versions are under "keys", so that a JOSE
// library reading the document as a JWKS (RFC 7517 §5) finds them; revoked
// versions are under "vrp_revoked_keys" only (ADR 0027), a member no
// lifecycle-unaware JOSE library reads, so none of them can verify a
// signature of a revoked version with it. A lifecycle-aware verifier
// (package verifier, ParseKeyHistory) reads both.
type History struct {
	Issuer  string  `json:"issuer"`
	Key     string  `json:"key,omitempty"` // "" in the issuer's document
	Keys    []Entry `json:"keys"`
	Revoked []Entry `json:"vrp_revoked_keys"`
}

// KeyVersions is one key with its versions (oldest first), an input of
// BuildIssuerHistory.
type KeyVersions struct {
	Key      store.Key
	Versions []store.KeyVersion
}

// BuildHistory returns the key-history document of one key.
func BuildHistory(k store.Key, versions []store.KeyVersion) (Document, error) {
	h := History{Issuer: k.Issuer, Key: k.Name, Keys: []Entry{}, Revoked: []Entry{}}
	if err := h.add(k, versions, false); err != nil {
		return Document{}, err
	}
	return NewDocument(h)
}

// BuildIssuerHistory returns the key-history document of an issuer: the
// versions of every key of that issuer (in the order given, each key's
// oldest first), each entry naming its key (vrp_key).
func BuildIssuerHistory(issuer string, keys []KeyVersions) (Document, error) {
	h := History{Issuer: issuer, Keys: []Entry{}, Revoked: []Entry{}}
	for _, kv := range keys {
		if err := h.add(kv.Key, kv.Versions, true); err != nil {
			return Document{}, err
		}
	}
	return NewDocument(h)
}

func (h *History) add(k store.Key, versions []store.KeyVersion, named bool) error {
	for _, v := range versions {
		e, err := EntryFor(v)
		if err != nil {
			return err
		}
		if e.Thumbprint, err = Thumbprint(v.PublicJWK); err != nil {
			return fmt.Errorf("jwksserve: %s: %w", v.KID, err)
		}
		e.RevocationReason = v.RevocationReason
		e.Backend = v.BackendKind(k.Backend)
		if named {
			e.KeyName = k.Name
		}
		if v.State == store.StateRevoked {
			h.Revoked = append(h.Revoked, e)
		} else {
			h.Keys = append(h.Keys, e)
		}
	}
	return nil
}

// Thumbprint returns the RFC 7638 SHA-256 thumbprint (base64url) of a
// stored public JWK, read through DecodePublicJWK's strict parse: the one
// thumbprint keysvc computes, published as vrp_jwk_thumbprint and anchored
// in the transparency log as a version fact's jkt (anchor.VersionFact).
// A JWK another decoder could read differently, or one holding private
// members, has none.
func Thumbprint(publicJWK []byte) (string, error) {
	if _, err := DecodePublicJWK(publicJWK); err != nil {
		return "", err
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(publicJWK); err != nil {
		return "", fmt.Errorf("public JWK: %w", err)
	}
	if !jwk.IsPublic() {
		return "", errors.New("public JWK holds private members")
	}
	tp, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
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
	// Service points DID tooling at the issuer's key-history document,
	// where revoked versions are listed with their compromise instant;
	// they are never verification methods here (ADR 0029).
	Service []DIDService `json:"service"`
}

// DIDService is a DID Core §5.4 service entry.
type DIDService struct {
	ID              string `json:"id"`
	Type            string `json:"type"`
	ServiceEndpoint string `json:"serviceEndpoint"`
}

// DIDKeyHistoryService is the type of the did.json service entry naming
// the issuer's key-history document (ADR 0029).
const DIDKeyHistoryService = "VrpKeyHistory"

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
// filtered by Published). Revoked versions are never verification methods
// (DID tooling such as did-jwt trusts every listed method and reads no
// revocation member); the document's one service entry,
// "<did>#vrp-key-history" of type VrpKeyHistory, names
// https://<issuer>/.well-known/vrp-key-history.json, where they are
// (ADR 0029).
func BuildDID(issuer string, entries []Entry) (Document, error) {
	did := DIDWeb(issuer)
	doc := DIDDocument{
		Context:            []string{"https://www.w3.org/ns/did/v1", "https://w3id.org/security/suites/jws-2020/v1"},
		ID:                 did,
		VerificationMethod: []VerificationMethod{},
		AssertionMethod:    []string{},
		Service: []DIDService{{ID: did + "#vrp-key-history", Type: DIDKeyHistoryService,
			ServiceEndpoint: "https://" + issuer + "/.well-known/vrp-key-history.json"}},
	}
	for _, e := range entries {
		if e.Status == string(store.StateRevoked) {
			continue // never a verification method, whatever the caller passed
		}
		id := did + "#" + e.KID
		doc.VerificationMethod = append(doc.VerificationMethod, VerificationMethod{
			ID: id, Type: "JsonWebKey2020", Controller: did,
			PublicKeyJwk: DIDPublicJWK{Kty: e.Kty, Crv: e.Crv, X: e.X, Y: e.Y, KID: e.KID, Alg: e.Alg},
		})
		doc.AssertionMethod = append(doc.AssertionMethod, id)
	}
	return NewDocument(doc)
}
