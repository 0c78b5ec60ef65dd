package mcpserve

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/verifier"
)

// Verification modes (verification.mode of verify_vrp_receipt).
const (
	ModeLifecycle = "lifecycle" // against a key history: VRP K2-K4, K6
	ModePlain     = "plain"     // the v1 verification against a JWK Set
)

// Where verify_vrp_receipt took its keys from (verification.keys_from).
const (
	KeysFromKeysvc  = "keysvc"  // keysvc's own key histories, by kid (or the key named by key)
	KeysFromHistory = "history" // the history argument
	KeysFromJWKS    = "jwks"    // the jwks argument
	KeysFromNone    = "none"    // keysvc holds no key: every signature is key_unresolvable
)

// verification says how verify_vrp_receipt judged the receipt.
type verification struct {
	Mode     string   `json:"mode"`
	KeysFrom string   `json:"keys_from"`
	Keys     []string `json:"keys"` // the keysvc keys whose histories were used
	At       string   `json:"at"`   // the instant freshness was judged at
}

// verifyOutput is verify_vrp_receipt's structured content: the verifier's
// result (the shape of `keysvc verify --json` and of the VRP conformance
// vectors) and how it was obtained.
type verifyOutput struct {
	ReceiptValid  bool                         `json:"receipt_valid"`
	FullyVerified bool                         `json:"fully_verified"`
	Errors        []string                     `json:"errors"`
	Attestations  []verifier.AttestationResult `json:"attestations"`
	Verification  verification                 `json:"verification"`
}

func (d *docs) verifyReceipt(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Receipt     jsontext.Value `json:"receipt"`
		ReceiptJSON *string        `json:"receipt_json"`
		JWKS        jsontext.Value `json:"jwks"`
		History     jsontext.Value `json:"history"`
		Key         *string        `json:"key"`
		LogKeys     jsontext.Value `json:"log_keys"`
		At          *string        `json:"at"`
	}
	if bad := decodeArgs(req.Params.Arguments, &args); bad != nil {
		return bad, nil
	}
	var receipt []byte
	switch {
	case len(args.Receipt) > 0 && args.ReceiptJSON != nil, len(args.Receipt) == 0 && args.ReceiptJSON == nil:
		return toolError(CodeInvalidArguments, "give exactly one of receipt (an object) and receipt_json (its text)"), nil
	case args.ReceiptJSON != nil:
		receipt = []byte(*args.ReceiptJSON)
	default:
		receipt = args.Receipt
	}
	given := 0
	for _, present := range []bool{len(args.JWKS) > 0, len(args.History) > 0, args.Key != nil} {
		if present {
			given++
		}
	}
	if given > 1 {
		return toolError(CodeInvalidArguments, "jwks, history and key exclude each other: give at most one"), nil
	}
	if len(args.LogKeys) > 0 && len(args.JWKS) > 0 {
		return toolError(CodeInvalidArguments, "log_keys needs a lifecycle-aware verification (history, key, or keysvc's keys), not jwks"), nil
	}
	at := d.now()
	if args.At != nil {
		t, err := verifier.ParseInstant(*args.At)
		if err != nil {
			return toolError(CodeInvalidInstant, "at must be an RFC 3339 date-time such as 2026-06-24T12:00:00Z"), nil
		}
		at = t
	}
	opts := verifier.Options{Now: at}
	if len(args.LogKeys) > 0 {
		set, err := verifier.ParseJWKS(args.LogKeys)
		if err != nil {
			return toolError(CodeInvalidJWKS, "log_keys: %s", strings.TrimPrefix(err.Error(), "verifier: ")), nil
		}
		opts.LogKeys = set
	}
	out := verifyOutput{Verification: verification{Keys: []string{}, At: at.UTC().Format(time.RFC3339Nano)}}
	var res verifier.Result
	switch {
	case len(args.JWKS) > 0:
		set, err := verifier.ParseJWKS(args.JWKS)
		if err != nil {
			return toolError(CodeInvalidJWKS, "jwks: %s", strings.TrimPrefix(err.Error(), "verifier: ")), nil
		}
		opts.Resolve = verifier.StaticJWKS(set)
		out.Verification.Mode, out.Verification.KeysFrom = ModePlain, KeysFromJWKS
		res = verifier.VerifyReceipt(ctx, receipt, opts)
	case len(args.History) > 0:
		h, err := verifier.ParseKeyHistory(args.History)
		if err != nil {
			return toolError(CodeInvalidHistory, "history: %s", strings.TrimPrefix(err.Error(), "verifier: ")), nil
		}
		opts.History = h
		out.Verification.Mode, out.Verification.KeysFrom = ModeLifecycle, KeysFromHistory
		res = verifier.VerifyReceipt(ctx, receipt, opts)
	case args.Key != nil:
		e, bad := entry(d.keyring(), *args.Key)
		if bad != nil {
			return bad, nil
		}
		h, err := d.history(e)
		if err != nil {
			return nil, err // keysvc's own document: a bug, not a caller error
		}
		opts.History = h
		out.Verification.Mode, out.Verification.KeysFrom, out.Verification.Keys = ModeLifecycle, KeysFromKeysvc, []string{e.Key.Name}
		res = verifier.VerifyReceipt(ctx, receipt, opts)
	default:
		var keys []string
		var err error
		res, keys, err = d.verifyKnown(ctx, receipt, opts)
		if err != nil {
			return nil, err
		}
		out.Verification.Mode, out.Verification.KeysFrom, out.Verification.Keys = ModeLifecycle, KeysFromKeysvc, keys
		if len(keys) == 0 {
			out.Verification.Mode, out.Verification.KeysFrom = ModePlain, KeysFromNone
		}
	}
	out.ReceiptValid, out.FullyVerified = res.ReceiptValid, res.FullyVerified
	out.Errors, out.Attestations = res.Errors, res.Attestations
	if out.Errors == nil {
		out.Errors = []string{}
	}
	if out.Attestations == nil {
		out.Attestations = []verifier.AttestationResult{}
	}
	return result(out)
}

// verifyKnown verifies a receipt lifecycle-aware against keysvc's own key
// histories: each signed attestation against the history of the keysvc
// key holding its JWS header kid (K1: kids are unique across keys), an
// attestation whose kid keysvc does not know against the default key's
// history (so it is sig_invalid, as for a kid missing from a JWKS). It
// returns the keys whose histories were used; none when keysvc has no key,
// and then the plain v1 verification without keys (key_unresolvable).
func (d *docs) verifyKnown(ctx context.Context, receipt []byte, opts verifier.Options) (verifier.Result, []string, error) {
	ring := d.keyring()
	kids := signatureKIDs(receipt)
	owner := make([]string, len(kids)) // keysvc key of each attestation's kid
	var keys []string
	for i, kid := range kids {
		if name, ok := d.keyOfKID(ring, kid); ok && kid != "" {
			owner[i] = name
			if !slices.Contains(keys, name) {
				keys = append(keys, name)
			}
		}
	}
	// Attestations without a kid keysvc knows go to the default key's
	// history (or, without a default key, the first key used).
	rest := ""
	if _, ok := ring.Keys[ring.Default]; ok {
		rest = ring.Default
	} else if len(keys) > 0 {
		rest = keys[0]
	}
	if rest == "" {
		return verifier.VerifyReceipt(ctx, receipt, opts), nil, nil
	}
	if (len(keys) == 0 || slices.Contains(owner, "")) && !slices.Contains(keys, rest) {
		keys = append(keys, rest)
	}
	runs := make(map[string]verifier.Result, len(keys))
	for _, name := range keys {
		h, err := d.history(ring.Keys[name])
		if err != nil {
			return verifier.Result{}, nil, err
		}
		o := opts
		o.History = h
		runs[name] = verifier.VerifyReceipt(ctx, receipt, o)
	}
	res := runs[keys[0]] // the envelope verdict is the same in every run
	if len(keys) == 1 || !res.ReceiptValid {
		return res, keys, nil
	}
	res.Attestations = slices.Clone(res.Attestations)
	res.FullyVerified = true
	for i := range res.Attestations {
		name := rest
		if i < len(owner) && owner[i] != "" {
			name = owner[i]
		}
		res.Attestations[i] = runs[name].Attestations[i]
		res.FullyVerified = res.FullyVerified && res.Attestations[i].Status == verifier.StatusVerified
	}
	return res, keys, nil
}

// signatureKIDs returns the protected-header kid of each attestation's
// signature, in order ("" where there is none or it does not parse). It
// only routes each attestation to a key history: the verifier judges every
// byte again.
func signatureKIDs(receipt []byte) []string {
	var r struct {
		Attestations []json.RawMessage `json:"attestations"`
	}
	if json.Unmarshal(receipt, &r) != nil || len(r.Attestations) > verifier.MaxAttestations {
		return nil
	}
	kids := make([]string, len(r.Attestations))
	for i, raw := range r.Attestations {
		var att struct {
			Signature jsontext.Value `json:"signature"`
		}
		var sig string
		if jsonv2.Unmarshal(raw, &att) != nil || att.Signature.Kind() != '"' || jsonv2.Unmarshal(att.Signature, &sig) != nil {
			continue
		}
		header, _, ok := strings.Cut(sig, ".")
		if !ok {
			continue
		}
		hb, err := base64.RawURLEncoding.DecodeString(header)
		if err != nil {
			continue
		}
		var h struct {
			KID string `json:"kid"`
		}
		if json.Unmarshal(hb, &h) == nil {
			kids[i] = h.KID
		}
	}
	return kids
}
