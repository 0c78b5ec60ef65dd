package verifier

import "encoding/json"

// Attestation statuses (VRP receipt spec v1, D4).
const (
	StatusVerified     = "verified"     // signature valid and now inside the window
	StatusUnverifiable = "unverifiable" // unsigned, or no key material to check it
	StatusInvalid      = "invalid"      // bad window, bad signature, or a key version that may not have made it (K6)
	StatusExpired      = "expired"      // valid signature, now outside the window
)

// Error codes of the VRP receipt error registry (spec v1, D4), plus the VRP
// key lifecycle codes (K6).
const (
	// Envelope level: Result.Errors.
	CodeUnsupportedVersion = "unsupported_version" // vrp_receipt_version is not "1.0"
	CodeMalformedReceipt   = "malformed_receipt"   // not the v1 envelope shape

	// Attestation level: AttestationResult.Error.
	CodeMalformedAttestation     = "malformed_attestation"     // registry code; shape failures are malformed_receipt in v1
	CodeMissingValidityWindow    = "missing_validity_window"   // valid_from/valid_until absent or not an instant (D2)
	CodeSigInvalid               = "sig_invalid"               // the JWS does not verify against the JWKS
	CodeSigExpired               = "sig_expired"               // now is after valid_until
	CodeNotYetValid              = "not_yet_valid"             // now is before valid_from
	CodeKeyUnresolvable          = "key_unresolvable"          // no JWKS for the attestation's source
	CodeLayerUnverifiable        = "layer_unverifiable"        // the attestation carries no signature
	CodeCanonicalizationMismatch = "canonicalization_mismatch" // registry code; v1 verifies bytes as received (D5)

	// Key lifecycle (K6), used by the lifecycle-aware verifier only.
	CodeKeyRetiredOutOfWindow = "key_retired_out_of_window" // retired key signed outside its window
	CodeKeyRevoked            = "key_revoked"               // revoked key, no anchor before the compromise
	CodeTlogRequired          = "tlog_required"             // a tlog proof is needed and missing
)

// AttestationResult is the outcome for one attestation, in receipt order.
// It marshals as {"index","layer","status","error","kid"}; Error and KID
// marshal as null when nil.
type AttestationResult struct {
	// Index is the attestation's position in the receipt's attestations.
	Index int `json:"index"`
	// Layer is the attestation's layer (e.g. "offer", "transport").
	Layer string `json:"layer"`
	// Status is one of the Status* constants.
	Status string `json:"status"`
	// Error is one of the Code* constants, nil when Status is verified.
	Error *string `json:"error"`
	// KID is the JWS header kid of a signature that verified (statuses
	// verified and expired, and invalid with a lifecycle code:
	// key_retired_out_of_window, key_revoked, tlog_required); nil
	// otherwise or when the header has no kid.
	KID *string `json:"kid"`
}

// Result is the outcome of VerifyReceipt, in the shape of the VRP
// reference verifier's result:
//
//	{"receipt_valid", "fully_verified", "errors": [...], "attestations": [...]}
//
// When ReceiptValid is false, Errors holds exactly one envelope code and
// Attestations is empty. When it is true, Errors is empty and there is one
// AttestationResult per attestation. Errors and Attestations always marshal
// as arrays, never null.
type Result struct {
	// ReceiptValid reports that the envelope is a well-formed v1 receipt.
	ReceiptValid bool `json:"receipt_valid"`
	// FullyVerified reports that every attestation is verified (D4).
	FullyVerified bool `json:"fully_verified"`
	// Errors holds the envelope-level codes.
	Errors []string `json:"errors"`
	// Attestations holds the per-attestation outcomes.
	Attestations []AttestationResult `json:"attestations"`
}

// MarshalJSON encodes r with nil Errors and Attestations as [].
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	p := plain(r)
	if p.Errors == nil {
		p.Errors = []string{}
	}
	if p.Attestations == nil {
		p.Attestations = []AttestationResult{}
	}
	return json.Marshal(p)
}

// envelopeFailure is the result for a receipt rejected as a whole.
func envelopeFailure(code string) Result {
	return Result{Errors: []string{code}, Attestations: []AttestationResult{}}
}
