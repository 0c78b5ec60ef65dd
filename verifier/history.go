package verifier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Key statuses of the VRP key lifecycle (K2), the vrp_key_status member of
// a key-history entry.
const (
	KeyStatusPending = "pending" // published ahead of use (K3); has never signed
	KeyStatusActive  = "active"  // the version that signs now
	KeyStatusRetired = "retired" // signed inside [vrp_not_before, vrp_not_after]
	KeyStatusRevoked = "revoked" // compromised at vrp_compromised_at (K4)
)

// ErrKeyVersion reports a key-history entry whose lifecycle members make it
// unusable; KeyHistory.Skipped errors about lifecycle members wrap it.
var ErrKeyVersion = errors.New("unusable key version")

// KeyVersion is one entry of a key-history document: a public key (one key
// version, VRP K1) and its lifecycle (K2, K4).
type KeyVersion struct {
	// JWK is the public key; JWK.KeyID is the version's kid.
	JWK *JWK
	// Status is one of the KeyStatus* constants.
	Status string
	// NotBefore is vrp_not_before: when the version started signing (for
	// a pending version, its scheduled activation). nil when absent.
	NotBefore *time.Time
	// NotAfter is vrp_not_after: when the version stopped signing. nil
	// when absent.
	NotAfter *time.Time
	// CompromisedAt is vrp_compromised_at (revoked versions). nil when
	// absent.
	CompromisedAt *time.Time
	// RevocationReason is vrp_revocation_reason, "" when absent or not a
	// string (informational only).
	RevocationReason string
	// Backend is vrp_backend, "" when absent or not a string
	// (informational only).
	Backend string
	// Defect is set, on a revoked version only, when its lifecycle members
	// do not parse (an instant that is not RFC 3339, a non-string member).
	// Such a version stays in the history so that its signatures fail as
	// key_revoked rather than sig_invalid; it never verifies.
	Defect error
}

// KeyHistory is a parsed key-history document (VRP K2, K4): every version
// of a key ever made, revoked ones included, as keysvc publishes it
// ({"issuer", "key", "keys": [...], "vrp_revoked_keys": [...]},
// jwksserve.History; revoked entries under "keys" are read too).
type KeyHistory struct {
	// Issuer and Key are the document's issuer and key members, "" when
	// absent.
	Issuer string
	Key    string
	// Versions are the entries usable for verification, in document order.
	Versions []*KeyVersion
	// Skipped holds one error per entry that is not usable: key material
	// that does not load (as in ParseJWKS), or lifecycle members that do
	// not parse or do not fit the status (wrapping ErrKeyVersion).
	Skipped []error

	// loaded holds the key of every entry whose key material loaded,
	// skipped ones included: none of them may ever sign a tree head.
	loaded []*JWK
}

// ParseKeyHistory parses a key-history document: a JSON object whose keys
// member (and optional vrp_revoked_keys member, whose entries must be
// revoked) is an array of public JWKs carrying the VRP lifecycle members
// vrp_key_status, vrp_not_before, vrp_not_after and vrp_compromised_at
// (instants, RFC 3339 §5.6 as ParseInstant reads them).
//
// Like ParseJWKS it is lenient per entry and strict about the lifecycle
// members it uses. An entry is skipped (recorded in Skipped, so that its
// signatures are sig_invalid) when its key does not load, when it has no
// kid, when vrp_key_status is absent or not one of the four statuses, when
// an instant member is present but is not a string holding an RFC 3339
// date-time, when an active version has no vrp_not_before, when a retired
// version lacks vrp_not_before or vrp_not_after, or when its kid appears on
// another entry too (K1: one kid, one key). A revoked entry is kept even
// when its members are defective (KeyVersion.Defect): the verifier reports
// its signatures as key_revoked. issuer and key must be strings when
// present.
//
// It returns an error only when data is over MaxJWKSBytes, is not a JSON
// object, has a duplicate top-level member, has no keys array, has a
// vrp_revoked_keys member that is not an array, or has a non-string issuer
// or key.
func ParseKeyHistory(data []byte) (*KeyHistory, error) {
	if len(data) > MaxJWKSBytes {
		return nil, fmt.Errorf("verifier: key history larger than %d bytes", MaxJWKSBytes)
	}
	top, err := shallowObject(data)
	if err != nil {
		return nil, fmt.Errorf("verifier: key history: %w", err)
	}
	rawKeys, ok := top["keys"]
	if !ok {
		return nil, errors.New("verifier: key history has no keys member")
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(rawKeys, &entries); err != nil {
		return nil, errors.New("verifier: key history keys is not an array")
	}
	// Revoked versions are published under vrp_revoked_keys (ADR 0027), out
	// of reach of lifecycle-unaware JOSE libraries; an entry there counts
	// only as revoked.
	nKeys := len(entries)
	if rawRevoked, ok := top["vrp_revoked_keys"]; ok {
		var revoked []json.RawMessage
		if err := json.Unmarshal(rawRevoked, &revoked); err != nil {
			return nil, errors.New("verifier: key history vrp_revoked_keys is not an array")
		}
		entries = append(entries, revoked...)
	}
	h := &KeyHistory{Versions: []*KeyVersion{}}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"issuer", &h.Issuer}, {"key", &h.Key}} {
		if raw, ok := top[f.name]; ok {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return nil, fmt.Errorf("verifier: key history %s is not a string", f.name)
			}
		}
	}
	var parsed []*KeyVersion
	for i, e := range entries {
		k, err := ParseJWK(e)
		if err != nil {
			h.Skipped = append(h.Skipped, fmt.Errorf("key %d: %w", i, err))
			continue
		}
		h.loaded = append(h.loaded, k)
		v, err := parseLifecycle(k, e)
		if err != nil {
			h.Skipped = append(h.Skipped, fmt.Errorf("key %d: %w", i, err))
			continue
		}
		if i >= nKeys && v.Status != KeyStatusRevoked {
			h.Skipped = append(h.Skipped, fmt.Errorf("key %d: %w: kid %q is listed under vrp_revoked_keys with vrp_key_status %q", i, ErrKeyVersion, k.KeyID, v.Status))
			continue
		}
		parsed = append(parsed, v)
	}
	var skipped []error
	h.Versions, skipped = usableVersions(parsed)
	h.Skipped = append(h.Skipped, skipped...)
	return h, nil
}

// parseLifecycle reads the lifecycle members of the history entry data
// whose key k loaded. It fails when a non-revoked entry's lifecycle members
// are defective; a revoked entry's defects go to KeyVersion.Defect.
func parseLifecycle(k *JWK, data []byte) (*KeyVersion, error) {
	m, err := decodeStrictObject(data) // cannot fail: ParseJWK decoded it
	if err != nil {
		return nil, err
	}
	v := &KeyVersion{JWK: k}
	status, _ := m["vrp_key_status"].(string)
	switch status {
	case KeyStatusPending, KeyStatusActive, KeyStatusRetired, KeyStatusRevoked:
		v.Status = status
	default:
		return nil, fmt.Errorf("%w: kid %q: vrp_key_status %v is not pending, active, retired or revoked", ErrKeyVersion, k.KeyID, m["vrp_key_status"])
	}
	v.RevocationReason, _ = m["vrp_revocation_reason"].(string)
	v.Backend, _ = m["vrp_backend"].(string)
	for _, f := range []struct {
		name string
		dst  **time.Time
	}{{"vrp_not_before", &v.NotBefore}, {"vrp_not_after", &v.NotAfter}, {"vrp_compromised_at", &v.CompromisedAt}} {
		raw, ok := m[f.name]
		if !ok {
			continue
		}
		s, _ := raw.(string)
		t, err := ParseInstant(s)
		if err != nil {
			derr := fmt.Errorf("%w: kid %q: %s %v is not an RFC 3339 date-time", ErrKeyVersion, k.KeyID, f.name, raw)
			if v.Status != KeyStatusRevoked {
				return nil, derr
			}
			if v.Defect == nil {
				v.Defect = derr
			}
			continue
		}
		*f.dst = &t
	}
	return v, nil
}

// usableVersions splits versions into those that may verify signatures and
// one error for each of the rest (see ParseKeyHistory). It is applied to
// parsed and hand-built histories alike.
func usableVersions(versions []*KeyVersion) ([]*KeyVersion, []error) {
	count := map[string]int{}
	for _, v := range versions {
		if v != nil && v.JWK != nil {
			count[v.JWK.KeyID]++
		}
	}
	ok := []*KeyVersion{}
	var skipped []error
	for _, v := range versions {
		if v == nil || v.JWK == nil {
			skipped = append(skipped, fmt.Errorf("%w: no key", ErrKeyVersion))
			continue
		}
		if err := v.unusable(count[v.JWK.KeyID]); err != nil {
			skipped = append(skipped, err)
			continue
		}
		ok = append(ok, v)
	}
	return ok, skipped
}

// unusable says why v may not verify signatures at all; sameKID is how many
// versions of the history carry v's kid.
func (v *KeyVersion) unusable(sameKID int) error {
	kid := v.JWK.KeyID
	switch {
	case kid == "":
		return fmt.Errorf("%w: no kid", ErrKeyVersion)
	case sameKID > 1:
		return fmt.Errorf("%w: kid %q appears on %d entries", ErrKeyVersion, kid, sameKID)
	}
	switch v.Status {
	case KeyStatusPending, KeyStatusRevoked:
		return nil
	case KeyStatusActive:
		if v.NotBefore == nil {
			return fmt.Errorf("%w: kid %q: active without vrp_not_before", ErrKeyVersion, kid)
		}
		return nil
	case KeyStatusRetired:
		if v.NotBefore == nil || v.NotAfter == nil {
			return fmt.Errorf("%w: kid %q: retired without vrp_not_before and vrp_not_after", ErrKeyVersion, kid)
		}
		return nil
	}
	return fmt.Errorf("%w: kid %q: status %q", ErrKeyVersion, kid, v.Status)
}

// historyKeys is a history prepared for one VerifyReceipt call: the JWK Set
// of its usable versions and the version of each key.
type historyKeys struct {
	set     *JWKS
	version map[*JWK]*KeyVersion
}

func prepareHistory(h *KeyHistory) *historyKeys {
	hk := &historyKeys{set: &JWKS{Keys: []*JWK{}}, version: map[*JWK]*KeyVersion{}}
	versions, _ := usableVersions(h.Versions)
	for _, v := range versions {
		hk.set.Keys = append(hk.set.Keys, v.JWK)
		hk.version[v.JWK] = v
	}
	return hk
}

// lifecycleCode applies the VRP key lifecycle (K2–K4) to the version v whose
// key verified sig, for an attestation claiming signing time signedAt (its
// valid_from) and carrying att["tlog"]. It returns "" when the signature is
// acceptable, else CodeKeyRetiredOutOfWindow, CodeKeyRevoked or
// CodeTlogRequired.
func lifecycleCode(ctx context.Context, v *KeyVersion, signedAt time.Time, att map[string]any, sig string, lc *lifecycle) string {
	switch v.Status {
	case KeyStatusActive, KeyStatusRetired:
		if !inSigningWindow(signedAt, v.NotBefore, v.NotAfter) {
			return CodeKeyRetiredOutOfWindow
		}
		return ""
	case KeyStatusRevoked:
		// A revoked version that ever signed legitimately had a window,
		// and it ended at its retirement or its revocation: without both
		// bounds it was revoked while pending (it never signed, K3), or
		// its window is unknown. Either way nothing shows a signature of
		// it was legitimate.
		if v.Defect != nil || v.CompromisedAt == nil || v.NotBefore == nil || v.NotAfter == nil {
			return CodeKeyRevoked
		}
		tl, ok := att["tlog"]
		if !ok || tl == nil {
			return CodeTlogRequired
		}
		anchor, err := verifyTlog(tl, sig, lc.logKeys, lc.witnesses)
		if err != nil || !anchor.Timestamp.Before(*v.CompromisedAt) ||
			!inSigningWindow(signedAt, v.NotBefore, v.NotAfter) || loggedBeforeWindow(anchor, *v.NotBefore) {
			return CodeKeyRevoked
		}
		if lc.witnessesRequired > 0 && countBefore(anchor.Cosignatures, *v.CompromisedAt) < lc.witnessesRequired {
			return CodeKeyRevoked
		}
		if lc.consistency != nil && lc.consistency(ctx, anchor) != nil {
			return CodeKeyRevoked
		}
		return ""
	}
	// Pending (never signed legitimately) and anything else.
	return CodeKeyRetiredOutOfWindow
}

// LogClockAllowance is how far the log's clock may be behind the key
// history's (vrp_not_before is the signer's clock, the leaf's logged_at and
// the STH timestamp the log's) before a revoked version's anchor counts as
// showing its signature was made before the version's window opened
// (loggedBeforeWindow).
const LogClockAllowance = time.Minute

// loggedBeforeWindow reports whether the log's own times show the signature
// existed before notBefore: the leaf's logged_at (never after the STH
// timestamp: verifyTlog refuses that), or the STH timestamp when there is
// none, is more than LogClockAllowance before it. Both are signed by the
// log, and a signature is logged after it is made. valid_from, the time
// the attestation claims, is outside the signature; these times are not.
func loggedBeforeWindow(a *TlogAnchor, notBefore time.Time) bool {
	existed := a.Timestamp
	if !a.LoggedAt.IsZero() && a.LoggedAt.Before(existed) {
		existed = a.LoggedAt
	}
	return existed.Add(LogClockAllowance).Before(notBefore)
}

// inSigningWindow reports whether t lies in [notBefore, notAfter] (a nil
// bound is open). The comparison is exact, with one rounding that the
// wire format forces (ADR 0014): when t, the claimed signing instant
// (valid_from), is a whole second — the precision VRP MCP transport
// assertions write served_at in — and notBefore is not, notBefore is
// rounded down to its second, because a signature made within that second
// after the activation cannot claim a later instant than its second.
// notAfter is never rounded: a whole-second claim is never later than the
// instant it was made, so a signature made before notAfter never claims
// an instant after it. keysvc arms every activation at a whole second, so
// for its own histories the rounding never applies.
func inSigningWindow(t time.Time, notBefore, notAfter *time.Time) bool {
	if notBefore != nil {
		nb := *notBefore
		if t.Equal(t.Truncate(time.Second)) {
			nb = nb.Truncate(time.Second)
		}
		if t.Before(nb) {
			return false
		}
	}
	if notAfter != nil && t.After(*notAfter) {
		return false
	}
	return true
}
