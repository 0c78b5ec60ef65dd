package mcpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/signer"
)

// Tool names (snake_case, as the VRP portable-attestations draft names its
// MCP tools).
const (
	ToolVerifyReceipt = "verify_vrp_receipt"
	ToolKeyHistory    = "get_key_history"
	ToolHashArguments = "hash_tool_arguments"
)

// Stable codes of tool errors (a result with isError true and
// structuredContent {"error": {"code", "message"}}), besides the
// strictjson.Code* codes for malformed arguments.
const (
	CodeInvalidArguments = "invalid_arguments" // the arguments break a rule of the tool (both receipt forms, ...)
	CodeKeyNotFound      = "key_not_found"     // no keysvc key of that name (or no default key)
	CodeInvalidJWKS      = "invalid_jwks"      // jwks or log_keys is not a JWK Set
	CodeInvalidHistory   = "invalid_history"   // history is not a key-history document
	CodeInvalidInstant   = "invalid_instant"   // at is not an RFC 3339 date-time
)

// argLimits decode tool arguments: the envelope's nesting bound.
var argLimits = envelopeLimits

func readOnly(title string) *mcp.ToolAnnotations {
	f := false
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &f, DestructiveHint: &f}
}

// errorSchema is the "error" member every output schema allows: a tool
// error's structured content.
const errorSchema = `"error":{"type":"object","properties":{"code":{"type":"string"},"message":{"type":"string"}},"required":["code","message"]}`

func addTools(srv *mcp.Server, d *docs) {
	srv.AddTool(&mcp.Tool{
		Name:  ToolVerifyReceipt,
		Title: "Verify a VRP receipt",
		Description: "Verify a VRP receipt envelope v1: each attestation's validity window, its compact JWS (EdDSA or ES256) " +
			"over the bytes as received, and its freshness at `at` (default now). Give the receipt as `receipt` (a JSON object) " +
			"or `receipt_json` (its exact text). Keys: `jwks` (plain v1 verification), `history` (a key-history document: " +
			"lifecycle-aware, VRP K2-K6) or `key` (a keysvc key: lifecycle-aware against its history); with none, keysvc finds " +
			"each signature's key by kid among its own keys and verifies lifecycle-aware. `log_keys` (a JWK Set of trusted " +
			"transparency-log keys) accepts a revoked key's signature anchored before its compromise. Never fetches a URL.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"receipt":{"type":"object","description":"the VRP receipt v1 as a JSON object"},` +
			`"receipt_json":{"type":"string","description":"the VRP receipt v1 as JSON text, verified byte for byte"},` +
			`"jwks":{"type":"object","description":"JWK Set to verify against (lifecycle-unaware)"},` +
			`"history":{"type":"object","description":"key-history document ({issuer, key, keys}) to verify against, lifecycle-aware"},` +
			`"key":{"type":"string","description":"name of a keysvc key whose key history to verify against"},` +
			`"log_keys":{"type":"object","description":"JWK Set of trusted transparency-log keys (Ed25519), with history or keysvc's keys"},` +
			`"at":{"type":"string","format":"date-time","description":"RFC 3339 instant to judge freshness at (default: now)"}},` +
			`"additionalProperties":false}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"receipt_valid":{"type":"boolean"},"fully_verified":{"type":"boolean"},` +
			`"errors":{"type":"array","items":{"type":"string"}},` +
			`"attestations":{"type":"array","items":{"type":"object","properties":{"index":{"type":"integer"},"layer":{"type":"string"},` +
			`"status":{"type":"string","enum":["verified","unverifiable","invalid","expired"]},"error":{"type":["string","null"]},"kid":{"type":["string","null"]}}}},` +
			`"verification":{"type":"object","properties":{"mode":{"type":"string","enum":["lifecycle","plain"]},"keys_from":{"type":"string"},` +
			`"keys":{"type":"array","items":{"type":"string"}},"at":{"type":"string"}}},` + errorSchema + `}}`),
		Annotations: readOnly("Verify a VRP receipt"),
	}, d.verifyReceipt)

	srv.AddTool(&mcp.Tool{
		Name:  ToolKeyHistory,
		Title: "Get a key history",
		Description: "Return the key-history document of a keysvc key (default: the key served at /.well-known): every key " +
			"version ever made, revoked ones included, with vrp_key_status, vrp_not_before, vrp_not_after and " +
			"vrp_compromised_at (VRP K2, K4). The text content is the document's exact bytes, as served at " +
			"/v1/keys/NAME/history.json; pass it to verify_vrp_receipt as history.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string","description":"key name (default: the default key)"}},"additionalProperties":false}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"issuer":{"type":"string"},"key":{"type":"string"},` +
			`"keys":{"type":"array","items":{"type":"object"}},` + errorSchema + `}}`),
		Annotations: readOnly("Get a key history"),
	}, d.keyHistory)

	srv.AddTool(&mcp.Tool{
		Name:  ToolHashArguments,
		Title: "Hash tool-call arguments",
		Description: "Compute the digests a signed tools/call is bound by. Give `params` (the tools/call params: name, " +
			"arguments, _meta) or only `arguments`. Returns vrp: the VRP MCP profile 1.0 arguments_sha256 (top-level keys " +
			"normalized camelCase to snake_case, RFC 8785, SHA-256; colliding keys are refused); with params also " +
			"sep2828_fallback (fallback_projection_v0: {arguments, authBinding?, toolName}) and sep2828_v1 " +
			"(tools_call_params_plus_meta_authorization_binding_v1, which fails closed without _meta.authorization_binding). " +
			"Each part answers {digest..., canonical} or {error: {code, message}} on its own.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"params":{"type":"object","description":"tools/call params: {name, arguments, _meta?}"},` +
			`"arguments":{"type":"object","description":"tools/call arguments alone (VRP digest only)"}},"additionalProperties":false}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"vrp":{"type":"object"},"sep2828_fallback":{"type":"object"},"sep2828_v1":{"type":"object"},` + errorSchema + `}}`),
		Annotations:  readOnly("Hash tool-call arguments"),
	}, d.hashArguments)
}

// result is a tool result whose structured content is v and whose text
// content is the same JSON (for clients that read only text).
func result(v any) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return rawResult(b), nil
}

func rawResult(b []byte) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}
}

// toolError is a tool execution error (MCP 2025-11-25 server/tools §Error
// Handling: isError, so the caller can correct its input) with a stable
// code.
func toolError(code, format string, a ...any) *mcp.CallToolResult {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e.Error.Code, e.Error.Message = code, fmt.Sprintf(format, a...)
	b, _ := json.Marshal(e)
	r := rawResult(b)
	r.IsError = true
	return r
}

// decodeArgs decodes tool arguments strictly (unknown members, duplicate
// names, wrong types each have their code). Absent arguments are {}.
func decodeArgs(raw json.RawMessage, v any) *mcp.CallToolResult {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	if err := strictjson.Decode(raw, v, argLimits); err != nil {
		var se *strictjson.Error
		if errors.As(err, &se) {
			return toolError(se.Code, "arguments: %s", se.Message)
		}
		return toolError(strictjson.CodeInvalidJSON, "arguments are not valid JSON")
	}
	return nil
}

// entry returns a key by name, or the default key for "".
func entry(ring *rotation.Keyring, name string) (*rotation.KeyEntry, *mcp.CallToolResult) {
	if name == "" {
		if e, ok := ring.Keys[ring.Default]; ok {
			return e, nil
		}
		return nil, toolError(CodeKeyNotFound, "keysvc has no default key yet")
	}
	if e, ok := ring.Keys[name]; ok {
		return e, nil
	}
	return nil, toolError(CodeKeyNotFound, "no keysvc key named %q", name)
}

func (d *docs) keyHistory(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Key string `json:"key"`
	}
	if bad := decodeArgs(req.Params.Arguments, &args); bad != nil {
		return bad, nil
	}
	e, bad := entry(d.keyring(), args.Key)
	if bad != nil {
		return bad, nil
	}
	return rawResult(e.History.Body), nil
}

// digestPart is one digest of hash_tool_arguments.
type digestPart struct {
	Projection      string    `json:"projection,omitempty"`
	ArgumentsSHA256 string    `json:"arguments_sha256,omitempty"`
	Digest          string    `json:"digest,omitempty"`
	Canonical       string    `json:"canonical,omitempty"`
	Error           *partFail `json:"error,omitempty"`
}

type partFail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// failPart names a digest's refusal by its stable code.
func failPart(err error) *digestPart {
	var se *strictjson.Error
	var pe *signer.SEP2828Error
	switch {
	case errors.As(err, &se):
		return &digestPart{Error: &partFail{se.Code, se.Message}}
	case errors.As(err, &pe):
		return &digestPart{Error: &partFail{pe.Code, pe.Message}}
	case errors.Is(err, signer.ErrArgumentKeyCollision):
		return &digestPart{Error: &partFail{"argument_key_collision", trimSigner(err)}}
	case errors.Is(err, signer.ErrArgumentsNotObject):
		return &digestPart{Error: &partFail{CodeInvalidArguments, "arguments must be a JSON object"}}
	}
	return &digestPart{Error: &partFail{CodeInvalidArguments, trimSigner(err)}}
}

func trimSigner(err error) string {
	s := err.Error()
	if len(s) > 8 && s[:8] == "signer: " {
		return s[8:]
	}
	return s
}

func (d *docs) hashArguments(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Params    jsontext.Value `json:"params"`
		Arguments jsontext.Value `json:"arguments"`
	}
	if bad := decodeArgs(req.Params.Arguments, &args); bad != nil {
		return bad, nil
	}
	if (len(args.Params) == 0) == (len(args.Arguments) == 0) {
		return toolError(CodeInvalidArguments, "give exactly one of params (tools/call params) and arguments"), nil
	}
	var out struct {
		VRP      *digestPart `json:"vrp"`
		Fallback *digestPart `json:"sep2828_fallback,omitempty"`
		V1       *digestPart `json:"sep2828_v1,omitempty"`
	}
	if len(args.Arguments) > 0 && args.Arguments.Kind() != '{' {
		return toolError(strictjson.CodeInvalidField, "arguments must be an object"), nil
	}
	arguments := args.Arguments
	if len(args.Params) > 0 {
		if args.Params.Kind() != '{' {
			return toolError(strictjson.CodeInvalidField, "params must be an object"), nil
		}
		var p struct {
			Arguments jsontext.Value `json:"arguments"`
		}
		_ = jsonv2.Unmarshal(args.Params, &p) // checked strict above; absent stays empty
		arguments = p.Arguments
		if canon, digest, err := signer.ProjectSEP2828(args.Params); err != nil {
			out.Fallback = failPart(err)
		} else {
			out.Fallback = &digestPart{Projection: "fallback_projection_v0", Digest: digest, Canonical: string(canon)}
		}
		if canon, digest, err := signer.ProjectSEP2828V1(args.Params); err != nil {
			out.V1 = failPart(err)
		} else {
			out.V1 = &digestPart{Projection: signer.SEP2828V1Projection, Digest: digest, Canonical: string(canon)}
		}
	}
	if len(arguments) == 0 {
		out.VRP = &digestPart{Error: &partFail{CodeInvalidArguments, "params.arguments is required"}}
	} else if digest, canon, err := signer.ArgumentsSHA256(arguments); err != nil {
		out.VRP = failPart(err)
	} else {
		out.VRP = &digestPart{Projection: "vrp-mcp-profile-1.0", ArgumentsSHA256: digest, Canonical: string(canon)}
	}
	return result(out)
}
