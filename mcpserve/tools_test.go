package mcpserve_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/internal/keysvctest"
	"github.com/keysvc/keysvc/internal/testvectors"
	"github.com/keysvc/keysvc/mcpserve"
	"github.com/keysvc/keysvc/rotation"
)

// TestReceiptVectorsThroughMCP runs every shared VRP receipt v1 vector
// through verify_vrp_receipt (jwks given, at the vector's now), as an
// object and as exact text: the result must be the vector's expected
// result exactly.
func TestReceiptVectorsThroughMCP(t *testing.T) {
	ks := keysvctest.Start(t, keysvctest.Options{})
	cs := connect(t, ks)
	files, err := filepath.Glob(filepath.Join(testvectors.Dir(t), "vrp-receipt-v1", "[0-9][0-9]-*.json"))
	if err != nil || len(files) < 7 {
		t.Fatalf("receipt vectors: %d files, %v", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				Now      string          `json:"now"`
				JWKS     json.RawMessage `json:"jwks"`
				Receipt  json.RawMessage `json:"receipt"`
				Expected json.RawMessage `json:"expected"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			for _, form := range []string{"receipt", "receipt_json"} {
				args := map[string]any{"jwks": v.JWKS, "at": v.Now}
				if form == "receipt" {
					args["receipt"] = v.Receipt
				} else {
					args["receipt_json"] = string(v.Receipt)
				}
				var out map[string]json.RawMessage
				if call(t, cs, mcpserve.ToolVerifyReceipt, args, &out) {
					t.Fatalf("%s: tool error %s", form, out["error"])
				}
				var verif struct{ Mode, KeysFrom, At string }
				if err := json.Unmarshal(out["verification"], &verif); err != nil {
					t.Fatal(err)
				}
				if verif.Mode != "plain" || verif.At != v.Now {
					t.Fatalf("%s: verification %s", form, out["verification"])
				}
				delete(out, "verification")
				got, _ := json.Marshal(out)
				if !sameJSON(t, got, v.Expected) {
					t.Fatalf("%s:\n got  %s\n want %s", form, got, v.Expected)
				}
			}
		})
	}
}

// TestHashToolArgumentsVectors holds hash_tool_arguments to the VRP MCP
// profile vectors (camelCase keys hash as their snake_case form) and to
// both SEP-2828 vector sets.
func TestHashToolArgumentsVectors(t *testing.T) {
	ks := keysvctest.Start(t, keysvctest.Options{})
	cs := connect(t, ks)
	type part struct {
		Projection      string `json:"projection"`
		ArgumentsSHA256 string `json:"arguments_sha256"`
		Digest          string `json:"digest"`
		Canonical       string `json:"canonical"`
		Error           *struct{ Code, Message string }
	}
	type hashOut struct {
		VRP      part  `json:"vrp"`
		Fallback *part `json:"sep2828_fallback"`
		V1       *part `json:"sep2828_v1"`
	}
	var out hashOut
	// hash calls the tool into a fresh out.
	hash := func(args map[string]any) bool {
		out = hashOut{}
		return call(t, cs, mcpserve.ToolHashArguments, args, &out)
	}

	var vrp struct {
		Cases []struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			JCS       string          `json:"expected_arguments_jcs"`
			SHA       string          `json:"expected_arguments_sha256"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(testvectors.Read(t, "vrp-mcp-transport.json"), &vrp); err != nil {
		t.Fatal(err)
	}
	for _, c := range vrp.Cases {
		if hash(map[string]any{"arguments": c.Arguments}) {
			t.Fatalf("%s: tool error", c.Name)
		}
		if out.VRP.ArgumentsSHA256 != c.SHA || out.VRP.Canonical != c.JCS || out.VRP.Error != nil || out.Fallback != nil || out.V1 != nil {
			t.Fatalf("%s: %+v, want %s %s", c.Name, out.VRP, c.SHA, c.JCS)
		}
	}
	// The camelCase case is the acceptance line: checkIn hashes as check_in.
	if vrp.Cases[1].Name != "camel_case_input_normalized" || !strings.Contains(string(vrp.Cases[1].Arguments), "checkIn") {
		t.Fatalf("vector order changed: %s", vrp.Cases[1].Name)
	}

	var fb struct {
		Cases []struct {
			Name   string          `json:"name"`
			Params json.RawMessage `json:"params"`
			JCS    string          `json:"expected_projection_jcs"`
			Digest string          `json:"expected_digest"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(testvectors.Read(t, "sep2828-fallback-projection.json"), &fb); err != nil {
		t.Fatal(err)
	}
	for _, c := range fb.Cases {
		if hash(map[string]any{"params": c.Params}) {
			t.Fatalf("%s: tool error", c.Name)
		}
		if out.Fallback == nil || out.Fallback.Digest != c.Digest || out.Fallback.Canonical != c.JCS || out.Fallback.Projection != "fallback_projection_v0" {
			t.Fatalf("%s: fallback %+v, want %s", c.Name, out.Fallback, c.Digest)
		}
	}

	var v1 struct {
		Cases []struct {
			ID       string          `json:"id"`
			Params   json.RawMessage `json:"params"`
			Expected struct {
				Bytes  string `json:"projection_bytes"`
				Digest string `json:"digest"`
				Error  string `json:"error"`
			} `json:"expected"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(testvectors.Read(t, "sep2828-v1-authorization-binding.json"), &v1); err != nil {
		t.Fatal(err)
	}
	for _, c := range v1.Cases {
		if hash(map[string]any{"params": c.Params}) {
			t.Fatalf("%s: tool error", c.ID)
		}
		switch {
		case c.Expected.Error == "fails_closed":
			if out.V1 == nil || out.V1.Error == nil || out.V1.Digest != "" {
				t.Fatalf("%s: v1 %+v, want a refusal", c.ID, out.V1)
			}
		case out.V1 == nil || out.V1.Digest != c.Expected.Digest || out.V1.Canonical != c.Expected.Bytes:
			t.Fatalf("%s: v1 %+v, want %s", c.ID, out.V1, c.Expected.Digest)
		}
	}

	// Each part fails on its own, with its stable code.
	hash(map[string]any{"arguments": map[string]any{"checkIn": "a", "check_in": "b"}})
	if out.VRP.Error == nil || out.VRP.Error.Code != "argument_key_collision" {
		t.Fatalf("collision: %+v", out.VRP)
	}
	hash(map[string]any{"params": map[string]any{"name": "t", "arguments": map[string]any{"x": 1}}})
	if out.VRP.Error != nil || out.Fallback.Error != nil || out.V1.Error == nil || out.V1.Error.Code != "authorization_binding_missing" {
		t.Fatalf("no binding: vrp %+v fallback %+v v1 %+v", out.VRP, out.Fallback, out.V1)
	}
	wantToolError(t, cs, mcpserve.ToolHashArguments, map[string]any{}, mcpserve.CodeInvalidArguments)
	wantToolError(t, cs, mcpserve.ToolHashArguments, map[string]any{"arguments": map[string]any{}, "params": map[string]any{}}, mcpserve.CodeInvalidArguments)
	wantToolError(t, cs, mcpserve.ToolHashArguments, map[string]any{"argument": map[string]any{}}, "unknown_field")
	wantToolError(t, cs, mcpserve.ToolHashArguments, map[string]any{"arguments": "checkIn"}, "invalid_field")
}

// TestVerifyKnownKeys signs through keysvc's API and verifies through
// /mcp without giving any key: keysvc finds each signature's key by kid
// and verifies lifecycle-aware; a tampered signature is invalid; a revoked
// version's signature needs a tlog; two keys in one receipt are each
// judged against their own history.
func TestVerifyKnownKeys(t *testing.T) {
	ks := keysvctest.Start(t, keysvctest.Options{})
	kidA := ks.CreateKey("villa", "villaakerlyckan.se")
	ks.CreateKey("transport", "transport.villaakerlyckan.se")
	tok := ks.Token("sign:*")
	cs := connect(t, ks)
	args := `{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}`
	ref := "offer:villaakerlyckan.se:2026-09-02/05"
	a := sign(t, ks, tok, "villa", args, ref)
	b := sign(t, ks, tok, "transport", args, ref)
	if a.KID != kidA || a.Assertion["arguments_sha256"] != "2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050" {
		t.Fatalf("signed %s %v", a.KID, a.Assertion)
	}

	var out verifyOut
	if call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt": receipt(a.Attestation)}, &out) {
		t.Fatal("tool error")
	}
	if !out.FullyVerified || out.statuses() != "transport:verified" || out.Verification.Mode != "lifecycle" ||
		out.Verification.KeysFrom != "keysvc" || !slices.Equal(out.Verification.Keys, []string{"villa"}) || *out.Attestations[0].KID != kidA {
		t.Fatalf("known key: %+v", out)
	}

	// Tampered: one character of the signature segment changed.
	bad := a.Attestation
	sig := []byte(bad.Signature)
	i := strings.LastIndexByte(bad.Signature, '.') + 5
	sig[i] = map[bool]byte{true: 'B', false: 'A'}[sig[i] == 'A']
	bad.Signature = string(sig)
	call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt": receipt(bad)}, &out)
	if out.FullyVerified || out.statuses() != "transport:invalid:sig_invalid" || !out.ReceiptValid {
		t.Fatalf("tampered: %+v", out)
	}

	// Two keys: each attestation against its own key's history.
	call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt": receipt(a.Attestation, b.Attestation)}, &out)
	if !out.FullyVerified || !slices.Equal(out.Verification.Keys, []string{"villa", "transport"}) {
		t.Fatalf("two keys: %+v", out)
	}
	// Explicit key or history: the other key's signature is sig_invalid there.
	call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt": receipt(a.Attestation, b.Attestation), "key": "villa"}, &out)
	if out.statuses() != "transport:verified transport:invalid:sig_invalid" || out.Verification.KeysFrom != "keysvc" {
		t.Fatalf("key villa: %+v", out)
	}
	call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt": receipt(a.Attestation, b.Attestation), "history": json.RawMessage(ks.History("transport"))}, &out)
	if out.statuses() != "transport:invalid:sig_invalid transport:verified" || out.Verification.KeysFrom != "history" {
		t.Fatalf("history transport: %+v", out)
	}
	// at an instant after valid_until: expired.
	call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt": receipt(a.Attestation), "at": time.Now().Add(3 * time.Hour).UTC().Format(time.RFC3339)}, &out)
	if out.statuses() != "transport:expired:sig_expired" {
		t.Fatalf("later: %+v", out)
	}

	// Revoke villa's version: its signature now needs a tlog anchor (K4),
	// the transport key's signature still verifies.
	if _, _, err := ks.Manager.Revoke(context.Background(), kidA, time.Now().Add(-time.Hour), "test compromise", rotation.Actor{Name: "test", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt": receipt(a.Attestation, b.Attestation)}, &out)
	if out.FullyVerified || out.statuses() != "transport:invalid:tlog_required transport:verified" || *out.Attestations[0].KID != kidA {
		t.Fatalf("revoked: %+v", out)
	}
	// A plain JWKS verification cannot see the revocation: the JWKS has no
	// revoked versions, so the signature does not verify at all.
	call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt": receipt(a.Attestation), "jwks": json.RawMessage(ks.JWKS("villa"))}, &out)
	if out.statuses() != "transport:invalid:sig_invalid" || out.Verification.Mode != "plain" {
		t.Fatalf("plain after revoke: %+v", out)
	}
}

// TestVerifyToolErrors: bad tool input is a tool error (isError) with a
// stable code; a bad receipt is a verification result, not a tool error.
func TestVerifyToolErrors(t *testing.T) {
	ks := keysvctest.Start(t, keysvctest.Options{})
	cs := connect(t, ks)
	r := receipt()
	for _, c := range []struct {
		name string
		args map[string]any
		code string
	}{
		{"no receipt", map[string]any{}, mcpserve.CodeInvalidArguments},
		{"both receipt forms", map[string]any{"receipt": r, "receipt_json": "{}"}, mcpserve.CodeInvalidArguments},
		{"jwks and key", map[string]any{"receipt": r, "jwks": map[string]any{"keys": []any{}}, "key": "dev"}, mcpserve.CodeInvalidArguments},
		{"log_keys with jwks", map[string]any{"receipt": r, "jwks": map[string]any{"keys": []any{}}, "log_keys": map[string]any{"keys": []any{}}}, mcpserve.CodeInvalidArguments},
		{"unknown argument", map[string]any{"receipt": r, "now": "2026-01-01T00:00:00Z"}, "unknown_field"},
		{"receipt_json not a string", map[string]any{"receipt_json": 7}, "invalid_field"},
		{"bad instant", map[string]any{"receipt": r, "at": "yesterday"}, mcpserve.CodeInvalidInstant},
		{"unknown key", map[string]any{"receipt": r, "key": "nope"}, mcpserve.CodeKeyNotFound},
		{"not a JWKS", map[string]any{"receipt": r, "jwks": map[string]any{"kty": "OKP"}}, mcpserve.CodeInvalidJWKS},
		{"not a history", map[string]any{"receipt": r, "history": map[string]any{"issuer": 7, "keys": []any{}}}, mcpserve.CodeInvalidHistory},
	} {
		t.Run(c.name, func(t *testing.T) { wantToolError(t, cs, mcpserve.ToolVerifyReceipt, c.args, c.code) })
	}
	// No key at all in keysvc: nothing to verify against.
	var out verifyOut
	call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt_json": `{"vrp_receipt_version":"1.0","subject":{},"issuer":{},"attestations":[{"layer":"offer","signature":"a.b.c","valid_from":"2026-01-01T00:00:00Z","valid_until":"2026-01-02T00:00:00Z"}]}`}, &out)
	if out.Verification.Mode != "plain" || out.Verification.KeysFrom != "none" || out.statuses() != "offer:unverifiable:key_unresolvable" {
		t.Fatalf("no keys: %+v", out)
	}
	// Duplicate names inside receipt_json: the verifier's verdict.
	call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt_json": `{"vrp_receipt_version":"1.0","vrp_receipt_version":"1.0"}`}, &out)
	if out.ReceiptValid || !slices.Equal(out.Errors, []string{"malformed_receipt"}) || len(out.Attestations) != 0 {
		t.Fatalf("duplicate names: %+v", out)
	}
	call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt": map[string]any{"vrp_receipt_version": "2.0"}}, &out)
	if out.ReceiptValid || !slices.Equal(out.Errors, []string{"unsupported_version"}) {
		t.Fatalf("version 2.0: %+v", out)
	}
}

// TestKeyDocuments: get_key_history and the resources serve keysvc's
// public documents byte for byte.
func TestKeyDocuments(t *testing.T) {
	ks := keysvctest.Start(t, keysvctest.Options{})
	cs := connect(t, ks)
	ctx := context.Background()
	wantToolError(t, cs, mcpserve.ToolKeyHistory, map[string]any{}, mcpserve.CodeKeyNotFound)
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserve.ResourceJWKS}); err == nil {
		t.Fatal("JWKS before any key: no error")
	}
	ks.CreateKey("villa", "villaakerlyckan.se")
	ks.CreateKey("other", "other.example")

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserve.ToolKeyHistory, Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("get_key_history: %v %+v", err, res)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != string(ks.History("villa")) {
		t.Fatalf("default history text\n got %s\nwant %s", got, ks.History("villa"))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserve.ToolKeyHistory, Arguments: map[string]any{"key": "other"}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != string(ks.History("other")) {
		t.Fatalf("other history: %v", err)
	}
	wantToolError(t, cs, mcpserve.ToolKeyHistory, map[string]any{"key": "nope"}, mcpserve.CodeKeyNotFound)
	wantToolError(t, cs, mcpserve.ToolKeyHistory, map[string]any{"name": "villa"}, "unknown_field")

	list, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range list.Resources {
		uris = append(uris, r.URI)
	}
	slices.Sort(uris)
	if want := []string{mcpserve.ResourceDID, mcpserve.ResourceJWKS, mcpserve.ResourceHistory}; !slices.Equal(uris, want) {
		t.Fatalf("resources %v, want %v", uris, want)
	}
	tmpls, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(tmpls.ResourceTemplates) != 2 {
		t.Fatalf("templates: %v %d", err, len(tmpls.ResourceTemplates))
	}
	ring := ks.Manager.Keyring()
	for uri, want := range map[string][]byte{
		mcpserve.ResourceJWKS:                     ks.JWKS("villa"),
		mcpserve.ResourceHistory:                  ring.IssuerHistory["villaakerlyckan.se"].Body,
		mcpserve.ResourceDID:                      ring.DID["villaakerlyckan.se"].Body,
		"keysvc:///v1/keys/other/jwks.json":       ks.JWKS("other"),
		"keysvc:///v1/keys/other/history.json":    ks.History("other"),
		"keysvc:///v1/keys/villa/history.json":    ks.History("villa"),
		"keysvc:///v1/keys/villa/jwks.json":       ks.JWKS("villa"),
		"keysvc:///v1/keys/nope/jwks.json":        nil,
		"keysvc:///v1/keys/villa/x/history.json":  nil,
		"keysvc:///v1/keys/../villa/history.json": nil,
	} {
		rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if want == nil {
			if err == nil {
				t.Errorf("%s: read succeeded", uri)
			}
			continue
		}
		if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != string(want) || rr.Contents[0].URI != uri {
			t.Errorf("%s: %v", uri, err)
		}
	}
}
