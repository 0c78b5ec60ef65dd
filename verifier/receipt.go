package verifier

import (
	"context"
	"time"
)

// ReceiptVersion is the only vrp_receipt_version a v1 verifier accepts.
const ReceiptVersion = "1.0"

// Input bounds of VerifyReceipt; a receipt over any of them is
// malformed_receipt.
const (
	// MaxReceiptBytes bounds the receipt document.
	MaxReceiptBytes = 1 << 20
	// MaxAttestations bounds the attestations array.
	MaxAttestations = 1024
)

// Options configures VerifyReceipt.
type Options struct {
	// Now is the instant freshness is judged at (millisecond precision).
	// The zero value means time.Now().
	Now time.Time
	// Resolve finds the JWK Set for each signed attestation. A nil
	// resolver makes every signed attestation key_unresolvable. It is not
	// called when History is set.
	Resolve JWKSResolver
	// History, when set, makes the verification lifecycle-aware (VRP K2–K4,
	// K6): signatures are checked against the usable versions of this
	// key-history document (revoked ones included), and a signature that
	// verifies is then judged against its version's lifecycle before
	// freshness. See the package documentation. nil means the plain v1
	// verification against Resolve.
	History *KeyHistory
	// LogKeys are the public keys of the transparency logs the verifier
	// trusts to sign Signed Tree Heads (Ed25519 only). Used only with
	// History, to accept a revoked version's signature anchored before its
	// compromise (K4). A key that is also a key of History is never
	// trusted as a log key. nil: no log is trusted, so no signature of a
	// revoked version is acceptable.
	LogKeys *JWKS
	// LayerTyps, when set, makes the verification check the JWS typ of
	// each layer (ADR 0013), layer name → typ (RFC 7515 §4.1.9; compared as
	// media types: case-insensitively, "application/" implied). A signature
	// of a listed layer must carry exactly that layer's typ, and a signature
	// presented as any other layer must not carry a listed layer's typ;
	// otherwise the attestation is invalid / sig_invalid. KeysvcLayerTyps
	// gives keysvc's. nil: typ is not looked at, as the VRP receipt v1
	// rules and their public vectors (whose transport JWS carry typ "JWT")
	// require.
	LayerTyps map[string]string
	// Witnesses are the transparency-log witnesses the verifier trusts
	// (C2SP tlog-cosignature); WitnessesRequired of them must have
	// cosigned the tlog proof's checkpoint strictly before the revoked
	// version's vrp_compromised_at for its signature to be acceptable. 0
	// requires none (the STH alone anchors the signature). Used only with
	// History.
	Witnesses         []*WitnessKey
	WitnessesRequired int
	// Consistency, when set, is asked about every tlog anchor that would
	// make a revoked version's signature acceptable, e.g. whether the
	// anchor's tree is consistent with the log's newest Signed Tree Head
	// (VerifyConsistency); an error makes the signature key_revoked.
	Consistency func(ctx context.Context, anchor *TlogAnchor) error
}

// VerifyReceipt verifies a VRP receipt envelope v1 (receipt, JSON bytes)
// under the VRP receipt specification v1 §3–§7 (D1–D5); the rules and this
// package's stricter choices are listed in the package documentation. It
// never fails as a Go call: every outcome, including unparseable input, is
// a Result.
//
// Envelope failures give ReceiptValid false, one code in Errors
// (CodeUnsupportedVersion or CodeMalformedReceipt) and no Attestations.
// Otherwise there is one AttestationResult per attestation, in order, and
// FullyVerified is true when all of them are StatusVerified. ctx is passed
// to the resolver.
//
// With opts.History set, the verification is lifecycle-aware (VRP K2–K4,
// K6): keys come from the key history, and a verified signature is judged
// against its key version's lifecycle before freshness, which can add the
// codes key_retired_out_of_window, key_revoked and tlog_required (see the
// package documentation).
func VerifyReceipt(ctx context.Context, receipt []byte, opts Options) Result {
	if len(receipt) > MaxReceiptBytes {
		return envelopeFailure(CodeMalformedReceipt)
	}
	v, err := decodeStrict(receipt)
	if err != nil {
		return envelopeFailure(CodeMalformedReceipt)
	}
	record, isObject := v.(map[string]any)
	if isObject && record["vrp_receipt_version"] != ReceiptVersion {
		return envelopeFailure(CodeUnsupportedVersion)
	}
	atts, ok := receiptAttestations(record)
	if !ok {
		return envelopeFailure(CodeMalformedReceipt)
	}

	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	nowMs := now.UnixMilli()
	res := Result{
		ReceiptValid:  true,
		FullyVerified: true,
		Errors:        []string{},
		Attestations:  make([]AttestationResult, 0, len(atts)),
	}
	var lc *lifecycle
	if opts.History != nil {
		lc = &lifecycle{keys: prepareHistory(opts.History), logKeys: trustedLogKeys(opts.LogKeys, opts.History),
			witnesses: opts.Witnesses, witnessesRequired: opts.WitnessesRequired, consistency: opts.Consistency}
		if lc.witnessesRequired > len(lc.witnesses) {
			lc.witnessesRequired = len(lc.witnesses) + 1 // unsatisfiable: fail closed
		}
	}
	typs := newLayerTyps(opts.LayerTyps)
	for i, att := range atts {
		r := verifyAttestation(ctx, i, att, nowMs, opts.Resolve, lc, typs)
		res.FullyVerified = res.FullyVerified && r.Status == StatusVerified
		res.Attestations = append(res.Attestations, r)
	}
	return res
}

// receiptAttestations checks the v1 envelope shape (the receipt schema's
// required members and types) and returns the attestation objects. record
// is nil when the receipt is not an object.
func receiptAttestations(record map[string]any) ([]map[string]any, bool) {
	if record == nil {
		return nil, false
	}
	for _, k := range []string{"vrp_receipt_version", "subject", "issuer", "attestations"} {
		if _, ok := record[k]; !ok {
			return nil, false
		}
	}
	if _, ok := record["subject"].(map[string]any); !ok {
		return nil, false
	}
	if _, ok := record["issuer"].(map[string]any); !ok {
		return nil, false
	}
	list, ok := record["attestations"].([]any)
	if !ok || len(list) < 1 || len(list) > MaxAttestations {
		return nil, false
	}
	atts := make([]map[string]any, len(list))
	for i, a := range list {
		att, ok := a.(map[string]any)
		if !ok {
			return nil, false
		}
		for _, k := range []string{"layer", "valid_from", "valid_until"} {
			if _, ok := att[k]; !ok {
				return nil, false
			}
		}
		if layer, ok := att["layer"].(string); !ok || layer == "" {
			return nil, false
		}
		atts[i] = att
	}
	return atts, true
}

// lifecycle is the lifecycle-aware state of one VerifyReceipt call.
type lifecycle struct {
	keys              *historyKeys
	logKeys           *JWKS // trusted STH keys
	witnesses         []*WitnessKey
	witnessesRequired int
	consistency       func(context.Context, *TlogAnchor) error
}

// verifyAttestation applies rule 3 (window, signature presence, key
// resolution, JWS, [lifecycle,] freshness) to one shape-checked
// attestation. lc is nil for the plain v1 verification.
func verifyAttestation(ctx context.Context, index int, att map[string]any, nowMs int64, resolve JWKSResolver, lc *lifecycle, typs *layerTyps) AttestationResult {
	r := AttestationResult{Index: index}
	r.Layer, _ = att["layer"].(string)
	fail := func(status, code string) AttestationResult {
		r.Status, r.Error = status, &code
		return r
	}

	from, okFrom := parseWindowBound(att["valid_from"])
	until, okUntil := parseWindowBound(att["valid_until"])
	if !okFrom || !okUntil {
		return fail(StatusInvalid, CodeMissingValidityWindow)
	}

	sig, ok := att["signature"].(string)
	if !ok || isBlank(sig) {
		return fail(StatusUnverifiable, CodeLayerUnverifiable)
	}

	var jwks *JWKS
	if lc != nil {
		jwks = lc.keys.set
	} else {
		if resolve == nil {
			return fail(StatusUnverifiable, CodeKeyUnresolvable)
		}
		source, _ := att["source"].(string)
		var err error
		jwks, err = resolve(ctx, source, att)
		if err != nil || jwks == nil {
			return fail(StatusUnverifiable, CodeKeyUnresolvable)
		}
	}

	v, err := VerifyCompactJWS(sig, jwks)
	if err != nil {
		return fail(StatusInvalid, CodeSigInvalid)
	}
	if lc != nil && v.KID == "" {
		// K1: every signature carries a kid, which names its version.
		return fail(StatusInvalid, CodeSigInvalid)
	}
	if v.KID != "" {
		kid := v.KID
		r.KID = &kid
	}
	if typs != nil && !typs.fits(r.Layer, v.Header) {
		// A signature made for another layer (ADR 0013).
		return fail(StatusInvalid, CodeSigInvalid)
	}

	if lc != nil {
		// The claimed signing time is valid_from (served_at, D2); it
		// parsed above.
		signedAt, _ := ParseInstant(att["valid_from"].(string))
		if code := lifecycleCode(ctx, lc.keys.version[v.Key], signedAt, att, sig, lc); code != "" {
			return fail(StatusInvalid, code)
		}
	}

	switch {
	case nowMs < from:
		return fail(StatusExpired, CodeNotYetValid)
	case nowMs > until:
		return fail(StatusExpired, CodeSigExpired)
	}
	r.Status = StatusVerified
	return r
}
