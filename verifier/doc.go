// Package verifier checks VRP (Vacation Rental Protocol) receipt envelopes
// v1 and the compact JWS signatures inside them.
//
// # What it implements
//
// VerifyReceipt applies the VRP receipt specification v1, §3–§7 (the
// envelope decisions D1–D5), exactly as the public reference verifier
// (lib/vrp-receipt.mjs) does, and is held to the shared conformance vectors
// (../shared/vectors/vrp-receipt-v1):
//
//   - D1: a receipt is a versioned envelope with a FLAT array of
//     attestations; a v1 verifier never recurses into sub_receipt or
//     disclosure.
//   - D2: every attestation carries a mandatory validity window
//     (valid_from, valid_until), checked against Options.Now.
//   - D3: a transparency-log proof (tlog) is optional; its absence is not a
//     failure, and this verifier claims nothing log-anchored.
//   - D4: each attestation gets its own status; a receipt can be valid
//     (receipt_valid) without being fully verified (fully_verified), and
//     every failure is reported with a code from the error registry.
//   - D5: a signature is verified over the compact JWS bytes exactly as
//     received, never over a re-serialization of the payload.
//
// The rules, in the order they are applied:
//
//  1. A receipt that is a JSON object whose vrp_receipt_version is not
//     exactly the string "1.0" (absent included) → receipt invalid,
//     errors ["unsupported_version"].
//  2. Anything else that is not the v1 shape → ["malformed_receipt"]: the
//     receipt must be an object with subject and issuer objects and a
//     non-empty attestations array whose elements are objects carrying the
//     keys layer, valid_from and valid_until, layer being a non-empty string.
//  3. Per attestation: unparseable validity window → invalid /
//     missing_validity_window; no signature → unverifiable /
//     layer_unverifiable; resolver gives no JWKS → unverifiable /
//     key_unresolvable; signature does not verify → invalid / sig_invalid;
//     now before valid_from → expired / not_yet_valid; now after
//     valid_until → expired / sig_expired; otherwise verified.
//  4. fully_verified is true only when every attestation is verified.
//
// Signatures are compact JWS (RFC 7515 §7.1) with alg EdDSA over Ed25519
// (RFC 8037 §3.1) or ES256 over P-256 (RFC 7518 §3.4, the fixed 64-byte
// R||S form; DER signatures are rejected). Keys come from a JWK Set
// (RFC 7517 §5), selected by the JWS header kid (RFC 7515 §4.1.4).
//
// # Choices beyond the reference verifier
//
// These are deliberate; each fails closed where the reference would guess.
//
//   - Algorithm allow-list: only EdDSA and ES256. alg "none", every HMAC
//     algorithm (HS256, …) and anything else is sig_invalid, so a public key
//     can never be used as an HMAC secret (algorithm confusion). A key is used
//     only for its own algorithm: OKP/Ed25519 keys for EdDSA, EC/P-256 keys
//     for ES256, and a key whose JWK use, alg or key_ops says otherwise is
//     never a candidate.
//   - A JWS header with crit (RFC 7515 §4.1.11) is rejected: this verifier
//     understands no extension header parameters. A header kid must be a
//     non-empty string when present.
//   - Duplicate object member names anywhere in the receipt make it
//     ambiguous (RFC 8259 §4; RFC 7515 §5.2 allows rejecting them), so the
//     receipt is malformed_receipt. A JWS header or payload with duplicate
//     names is sig_invalid. The JS reference would silently take the last.
//     Invalid UTF-8 and trailing data after the JSON value are malformed too.
//     These parse checks (and the size and depth bounds below) come before
//     rule 1, so such a receipt is malformed_receipt whatever its version.
//   - Instants (valid_from, valid_until) are accepted only as RFC 3339
//     §5.6 date-time: "YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)", T and Z
//     also in lower case; real calendar dates only; no leap second (:60),
//     no hour 24, no other formats. The reference uses JS Date.parse, which
//     also accepts implementation-defined forms ("Tue Jun 24 2026", dates
//     without a time); those are missing_validity_window here. Instants
//     are compared at millisecond precision (fraction digits past the third
//     are truncated), like the reference.
//   - "Blank" (a blank signature or validity string) means empty after
//     trimming JavaScript's white space set, as String.prototype.trim does.
//   - Base64url segments must use the unpadded URL alphabet only (RFC 7515
//     §2) with zero trailing bits; line breaks or padding are sig_invalid.
//   - Input bounds: a receipt over MaxReceiptBytes, nested deeper than
//     MaxJSONDepth or with more than MaxAttestations attestations is
//     malformed_receipt; a JWS over MaxJWSBytes is sig_invalid; a JWK Set
//     over MaxJWKSBytes does not parse.
//   - No input makes the verifier panic; it is fuzzed (FuzzVerifyReceipt,
//     FuzzVerifyCompactJWS).
//
// The lifecycle error codes (CodeKeyRetiredOutOfWindow, CodeKeyRevoked,
// CodeTlogRequired) are defined here for the lifecycle-aware verifier that
// checks a key-history document; VerifyReceipt never returns them.
package verifier
