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
//     failure, and this verifier claims nothing log-anchored — except, in
//     the lifecycle-aware verification below, for the signature of a
//     revoked key version, where a tlog is the required anchor (K4).
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
//     [with a key history: the signing version's lifecycle, below];
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
//   - Layer typs (ADR 0013), only when Options.LayerTyps is set: a
//     signature of a listed layer must carry that layer's typ, and a
//     signature presented as any other layer must not carry a listed
//     layer's typ; else invalid / sig_invalid. Off by default, because
//     the v1 rules do not look at typ and the public vectors (like every
//     keysvc transport JWS made before ADR 0013) carry typ "JWT".
//   - No input makes the verifier panic; it is fuzzed (FuzzVerifyReceipt,
//     with and without a key history, FuzzVerifyCompactJWS,
//     FuzzParseKeyHistory, FuzzVerifyTlog).
//
// # Lifecycle-aware verification (VRP K2–K4, K6)
//
// With Options.History set (a key-history document, ParseKeyHistory),
// VerifyReceipt also applies the VRP key lifecycle. Without it, the
// verification is exactly the v1 verification above, and the lifecycle
// codes never appear.
//
//   - Keys: signatures are checked against the usable versions of the
//     history, revoked ones included; Options.Resolve is not called, so
//     key_unresolvable does not occur. Every signature must carry a kid
//     (K1); one without is sig_invalid. The signing version is the entry
//     whose key verified the signature (its kid is the header kid).
//   - Usable versions: an entry whose key does not load, that has no kid,
//     whose kid is on another entry too (K1), whose vrp_key_status is not
//     pending, active, retired or revoked, whose vrp_not_before,
//     vrp_not_after or vrp_compromised_at is present but not an RFC 3339
//     date-time, an active entry without vrp_not_before and a retired one
//     without vrp_not_before or vrp_not_after are unusable: they are in
//     KeyHistory.Skipped and their signatures are sig_invalid (as for a key
//     missing from a JWKS). A revoked entry is the exception: it stays
//     usable whatever its defects, so that its signatures fail as
//     key_revoked.
//   - Order: window (missing_validity_window), signature presence,
//     signature (sig_invalid), then the lifecycle of the signing version,
//     then freshness. A lifecycle failure therefore wins over expiry: a
//     signature the key could not legitimately make is invalid, not merely
//     expired.
//   - Claimed signing time T: the attestation's valid_from. A node signs at
//     served_at and issues the attestation with valid_from = served_at
//     (VRP MCP profile 1.0; keysvc's signing API), so valid_from is the
//     signing time the attestation claims. It is outside the signature:
//     for active and retired versions the window check holds the claim to
//     the published window; only a transparency-log anchor is independent
//     evidence, which is why K4 requires one for revoked versions.
//   - Window bounds are inclusive and compared exactly, with one rounding
//     the wire format forces (ADR 0014): when valid_from is a whole second
//     (the precision of served_at in VRP MCP transport assertions) and
//     vrp_not_before is not, vrp_not_before is rounded down to its second
//     — a signature made within that second after the activation cannot
//     claim a later instant. vrp_not_after is never rounded: a
//     whole-second claim is never later than the instant it was made.
//     keysvc arms every activation at a whole second, so for its own key
//     histories no comparison rounds. The STH timestamp is compared with
//     vrp_compromised_at exactly.
//   - active: T >= vrp_not_before, and T <= vrp_not_after when an active
//     entry has one; else invalid / key_retired_out_of_window.
//   - retired: vrp_not_before <= T <= vrp_not_after; else invalid /
//     key_retired_out_of_window.
//   - pending: the version has never signed legitimately (K3: it is
//     published before it signs), so any signature is invalid /
//     key_retired_out_of_window, whatever T.
//   - revoked (K4): fails closed. Without vrp_compromised_at, without
//     vrp_not_before or vrp_not_after (a version revoked while pending
//     never signed; one that was active has a window that ended at its
//     retirement or revocation), or with a defective lifecycle member:
//     invalid / key_revoked. Without a tlog member (or with "tlog": null):
//     invalid / tlog_required. Otherwise the signature is acceptable only
//     when the tlog proof verifies (below), the Signed Tree Head timestamp
//     is strictly before vrp_compromised_at, T is inside [vrp_not_before,
//     vrp_not_after], and the log's own times do not show the signature
//     existed before the window: the earlier of the leaf's logged_at and
//     the STH timestamp is not more than LogClockAllowance (1 minute)
//     before vrp_not_before. Anything else, a bad or unverifiable proof
//     included (it does not show the signature predates the compromise),
//     is invalid / key_revoked.
//   - A tlog member on a signature of a pending, active or retired version
//     is neither needed nor checked (D3).
//   - The kid of a lifecycle failure (key_retired_out_of_window,
//     key_revoked, tlog_required) is reported: the signature did verify,
//     and the kid names the version whose lifecycle rejected it. sig_invalid
//     and missing_validity_window keep kid null, as in v1.
//   - Options.LogKeys are the transparency-log keys the verifier trusts.
//     Without them no revoked version's signature is acceptable. A key
//     that is also a key of the history (any entry that loaded) is never
//     trusted as a log key: the tree head must come from a log key
//     separate from the node's signing keys.
//
// # Transparency-log proofs (VRP Transparency Log v0.1)
//
// This package defines the attestation's tlog member in the shape of the
// VRP Transparency Log v0.1 draft (§4.1 leaf, §8 verification), on an
// RFC 6962/9162 Merkle tree:
//
//	"tlog": {
//	  "log_id": "did:web:log.example",
//	  "leaf": {"leaf_version": "vrp-tlog-v0.1", "logged_at": "<RFC 3339>",
//	           "artifact_type": "vrp_attestation", "artifact_hash": "sha256:<hex>"},
//	  "leaf_index": 5,
//	  "tree_size": 8,
//	  "inclusion_proof": ["<base64url of a 32-byte hash>", ...],
//	  "sth": "<compact JWS>",
//	  "checkpoint": "<C2SP signed note of the same tree, with cosignatures>"
//	}
//
// The STH is a compact JWS with alg EdDSA and a kid, signed by a key of
// Options.LogKeys, whose payload is {"log_id", "tree_size", "root_hash"
// (base64url of 32 bytes), "timestamp" (RFC 3339)}; other payload members
// are ignored. VerifyTlog accepts a tlog member only when all of these
// hold:
//
//   - tlog is an object; log_id is a non-empty string; leaf_index and
//     tree_size are integer literals (no fraction or exponent) with
//     0 <= leaf_index < tree_size < 2^64; inclusion_proof is an array of
//     at most 64 unpadded base64url strings of 32 bytes each.
//   - leaf has exactly the four members above, leaf_version
//     "vrp-tlog-v0.1", artifact_type "vrp_attestation", logged_at an
//     RFC 3339 date-time, and artifact_hash equal to "sha256:" + lower-case
//     hex of the SHA-256 of the attestation's signature string, the compact
//     JWS bytes exactly as received (never re-serialized).
//   - The STH verifies against the Ed25519 keys of LogKeys (EdDSA only; its
//     key is never taken from the node's history or JWKS); its log_id and
//     tree_size equal the tlog's; its timestamp parses; logged_at is not
//     after it.
//   - The Merkle leaf hash is the RFC 6962 §2.1 leaf hash,
//     SHA-256(0x00 || leaf bytes), of the RFC 8785 (JCS) bytes of the leaf
//     object, and the inclusion proof (the RFC 6962 §2.1.1 audit path)
//     leads from it at leaf_index to the STH's root_hash in a tree of
//     tree_size leaves (transparency-dev/merkle proof.VerifyInclusion with
//     rfc6962.DefaultHasher).
//
// Every log key of LogKeys is trusted for any log_id: the log_id checks bind
// the proof to its tree head, not a key to a log.
//
// # Witnessed checkpoints (C2SP tlog-checkpoint, tlog-cosignature)
//
// The checkpoint member is optional. When present it must verify whatever
// the options, so a tlog member never carries a checkpoint that
// contradicts its STH:
//
//   - it is a C2SP signed note (golang.org/x/mod/sumdb/note, at most
//     MaxCheckpointBytes) whose tlog-checkpoint body (transparency-dev/
//     formats log.ParseCheckpoint) has the origin log_id, the STH's
//     tree_size and the STH's root_hash;
//   - it carries a valid Ed25519 signature of the log key that verified
//     the STH, under the note key name log_id (the key's verifier key is
//     "<log_id>+<key hash>+<key>");
//   - a signature line of a trusted witness (Options.Witnesses) that does
//     not verify fails the checkpoint; lines of other keys are ignored.
//
// Trusted witnesses' cosignatures (cosignature/v1, C2SP tlog-cosignature)
// are read with transparency-dev/formats note.NewVerifierForCosignatureV1
// and CoSigV1Timestamp. With Options.WitnessesRequired K > 0, a revoked
// version's signature is acceptable only when, besides the STH rule above,
// K distinct trusted witnesses cosigned the checkpoint strictly before
// vrp_compromised_at. A cosignature's timestamp has whole seconds (the
// witness's clock, truncated), so a cosignature at T counts only when
// T + 1 s is not after vrp_compromised_at: it was then certainly made
// before the compromise. K above the number of trusted witnesses is never
// satisfied (fail closed). Options.Consistency, when set, is asked about
// each anchor that would accept a revoked version's signature (keysvc
// verify --log-url checks that the log's newest STH extends the anchor's
// tree, RFC 9162 §2.1.4, VerifyConsistency); an error makes the signature
// key_revoked.
package verifier
