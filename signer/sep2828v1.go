package signer

import (
	"fmt"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/keysvc/keysvc/internal/strictjson"
)

// SEP2828V1Projection names the SEP-2828 projection
// "tools_call_params_plus_meta_authorization_binding_v1": the preimage
// {"projection", "name", "arguments", "authorizationBinding"} of a
// tools/call request, where authorizationBinding is the whole
// _meta.authorization_binding object, kept verbatim. Unlike the fallback
// projection (ProjectSEP2828), a call without a binding is not digested.
const SEP2828V1Projection = "tools_call_params_plus_meta_authorization_binding_v1"

// Stable codes of the SEP-2828 v1 projection's refusals (SEP2828Error.Code).
const (
	CodeSEP2828NameMissing    = "name_missing"                  // params.name absent or not a string
	CodeSEP2828ArgsMissing    = "arguments_missing"             // params.arguments absent or not an object
	CodeSEP2828BindingMissing = "authorization_binding_missing" // no _meta, or no _meta.authorization_binding
	CodeSEP2828BindingInvalid = "authorization_binding_invalid" // not an object, or nonce not a non-empty string
)

// SEP2828Error is a tools/call params document the v1 projection refuses to
// digest (it fails closed: a call without a usable authorization binding
// has no v1 digest at all).
type SEP2828Error struct {
	Code    string // one of the CodeSEP2828* constants
	Message string
}

func (e *SEP2828Error) Error() string { return "signer: SEP-2828 v1: " + e.Message }

// ProjectSEP2828V1 projects tools/call params ({"name", "arguments",
// "_meta": {"authorization_binding": {...}}, ...}) under SEP2828V1Projection
// and returns the projection's RFC 8785 bytes and its digest
// "sha256:<hex>". Every _meta member other than authorization_binding
// (progress tokens, trace context, gateway ids) is left out; the binding
// object is kept whole, members and values as received (then canonicalized
// with everything else).
//
// Errors: *strictjson.Error for params that are not strict I-JSON (the
// argument rules of ArgumentsSHA256: no duplicate names, I-JSON integers);
// *SEP2828Error when name is not a string, arguments is not an object,
// there is no _meta.authorization_binding, it is not an object, or its
// nonce is not a non-empty string.
func ProjectSEP2828V1(params []byte) (canonical []byte, digest string, err error) {
	if err := strictjson.Check(params, argumentLimits); err != nil {
		return nil, "", err
	}
	if jsontext.Value(params).Kind() != '{' {
		return nil, "", &SEP2828Error{CodeSEP2828NameMissing, "params must be a JSON object"}
	}
	var p struct {
		Name      jsontext.Value `json:"name"`
		Arguments jsontext.Value `json:"arguments"`
		Meta      jsontext.Value `json:"_meta"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, "", &SEP2828Error{CodeSEP2828NameMissing, "params must be a JSON object"}
	}
	if p.Name.Kind() != '"' {
		return nil, "", &SEP2828Error{CodeSEP2828NameMissing, "params.name must be a string"}
	}
	if p.Arguments.Kind() != '{' {
		return nil, "", &SEP2828Error{CodeSEP2828ArgsMissing, "params.arguments must be a JSON object"}
	}
	var meta map[string]jsontext.Value
	if p.Meta.Kind() == '{' {
		if err := json.Unmarshal(p.Meta, &meta); err != nil {
			return nil, "", &SEP2828Error{CodeSEP2828BindingMissing, "params._meta is malformed"}
		}
	}
	binding, ok := meta["authorization_binding"]
	if !ok {
		return nil, "", &SEP2828Error{CodeSEP2828BindingMissing, "params._meta.authorization_binding is required"}
	}
	if binding.Kind() != '{' {
		return nil, "", &SEP2828Error{CodeSEP2828BindingInvalid, "params._meta.authorization_binding must be a JSON object"}
	}
	var b struct {
		Nonce jsontext.Value `json:"nonce"`
	}
	if err := json.Unmarshal(binding, &b); err != nil {
		return nil, "", &SEP2828Error{CodeSEP2828BindingInvalid, "params._meta.authorization_binding is malformed"}
	}
	var nonce string
	if b.Nonce.Kind() != '"' || json.Unmarshal(b.Nonce, &nonce) != nil || nonce == "" {
		return nil, "", &SEP2828Error{CodeSEP2828BindingInvalid, "params._meta.authorization_binding.nonce must be a non-empty string"}
	}
	// Assemble the four members; RFC 8785 then orders them and
	// canonicalizes every value in one pass.
	out := make([]byte, 0, len(p.Arguments)+len(binding)+len(p.Name)+96)
	out = append(out, `{"projection":`...)
	out = append(out, '"')
	out = append(out, SEP2828V1Projection...)
	out = append(out, `","name":`...)
	out = append(out, p.Name...)
	out = append(out, `,"arguments":`...)
	out = append(out, p.Arguments...)
	out = append(out, `,"authorizationBinding":`...)
	out = append(out, binding...)
	out = append(out, '}')
	canonical, err = jcsFormat(out)
	if err != nil {
		return nil, "", fmt.Errorf("signer: SEP-2828 v1 projection: %w", err)
	}
	return canonical, DigestSHA256(canonical), nil
}
