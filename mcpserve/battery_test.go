package mcpserve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/internal/keysvctest"
	"github.com/keysvc/keysvc/mcpserve"
)

// rawRequest is one hand-made HTTP request to /mcp.
type rawRequest struct {
	method  string // default POST
	body    string
	header  map[string][]string // replaces the defaults below; a nil value removes one
	chunked bool                // unknown length
}

// defaults are what a conforming client sends after initialize.
var defaults = map[string][]string{
	"Content-Type":         {"application/json"},
	"Accept":               {"application/json, text/event-stream"},
	"MCP-Protocol-Version": {mcpserve.ProtocolVersion},
}

func (r rawRequest) send(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	method := r.method
	if method == "" {
		method = http.MethodPost
	}
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
		if r.chunked {
			body = io.MultiReader(body)
		}
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if r.chunked {
		req.ContentLength = -1
	}
	for k, v := range defaults {
		req.Header[http.CanonicalHeaderKey(k)] = v
	}
	for k, v := range r.header {
		if v == nil {
			req.Header.Del(k)
			continue
		}
		req.Header[http.CanonicalHeaderKey(k)] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// rpcErr is a JSON-RPC error response.
type rpcErr struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Error     string   `json:"error"`
			Supported []string `json:"supported"`
			Requested *string  `json:"requested"`
		} `json:"data"`
	} `json:"error"`
}

const listTools = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`

// TestMalformedBattery sends /mcp every kind of malformed request: each
// gets its exact HTTP status, JSON-RPC code and stable data.error, the id
// echoed when it could be read, and the endpoint answers a real client
// afterwards.
func TestMalformedBattery(t *testing.T) {
	ks := keysvctest.Start(t, keysvctest.Options{MCP: &mcpserve.Config{
		AllowedOrigins: []string{"https://agent.example"},
		MaxBodyBytes:   4096,
		RateLimit:      mcpserve.RateLimit{PerSecond: -1},
	}})
	ks.CreateKey("villa", "villaakerlyckan.se")
	url := ks.URL + "/mcp"
	deep := strings.Repeat(`{"a":`, 80) + "1" + strings.Repeat("}", 80)
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"pad":"` + strings.Repeat("x", 5000) + `"}}}`
	var batch1000 bytes.Buffer
	batch1000.WriteString("[")
	for i := range 1000 {
		if i > 0 {
			batch1000.WriteString(",")
		}
		fmt.Fprintf(&batch1000, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i)
	}
	batch1000.WriteString("]")

	cases := []struct {
		name   string
		req    rawRequest
		status int
		code   int
		err    string
		id     string // the echoed id; "" means null
	}{
		// HTTP method
		{"GET (no SSE stream)", rawRequest{method: "GET"}, 405, -32000, "method_not_allowed", ""},
		{"DELETE (no sessions)", rawRequest{method: "DELETE"}, 405, -32000, "method_not_allowed", ""},
		{"PUT", rawRequest{method: "PUT", body: listTools}, 405, -32000, "method_not_allowed", ""},
		{"OPTIONS without Origin", rawRequest{method: "OPTIONS"}, 405, -32000, "method_not_allowed", ""},
		// Origin
		{"foreign Origin", rawRequest{body: listTools, header: map[string][]string{"Origin": {"https://evil.example"}}}, 403, -32001, "origin_not_allowed", ""},
		{"Origin null", rawRequest{body: listTools, header: map[string][]string{"Origin": {"null"}}}, 403, -32001, "origin_not_allowed", ""},
		{"allowed host, other scheme", rawRequest{body: listTools, header: map[string][]string{"Origin": {"http://agent.example"}}}, 403, -32001, "origin_not_allowed", ""},
		{"two Origin headers", rawRequest{body: listTools, header: map[string][]string{"Origin": {"https://agent.example", "https://evil.example"}}}, 403, -32001, "origin_not_allowed", ""},
		// Protocol version
		{"no MCP-Protocol-Version", rawRequest{body: listTools, header: map[string][]string{"MCP-Protocol-Version": nil}}, 400, -32600, "protocol_version_required", "1"},
		{"unknown MCP-Protocol-Version", rawRequest{body: listTools, header: map[string][]string{"MCP-Protocol-Version": {"2024-01-01"}}}, 400, -32022, "unsupported_protocol_version", "1"},
		{"older MCP-Protocol-Version", rawRequest{body: listTools, header: map[string][]string{"MCP-Protocol-Version": {"2025-06-18"}}}, 400, -32022, "unsupported_protocol_version", "1"},
		{"newer revision's server/discover", rawRequest{body: `{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{}}`, header: map[string][]string{"MCP-Protocol-Version": {"2026-07-28"}}}, 400, -32022, "unsupported_protocol_version", `"d"`},
		{"two MCP-Protocol-Version headers", rawRequest{body: listTools, header: map[string][]string{"MCP-Protocol-Version": {mcpserve.ProtocolVersion, mcpserve.ProtocolVersion}}}, 400, -32022, "unsupported_protocol_version", "1"},
		{"initialize with an unknown header version", rawRequest{body: `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`, header: map[string][]string{"MCP-Protocol-Version": {"1999-01-01"}}}, 400, -32022, "unsupported_protocol_version", "0"},
		// Content type and Accept
		{"text/plain", rawRequest{body: listTools, header: map[string][]string{"Content-Type": {"text/plain"}}}, 415, -32600, "unsupported_media_type", ""},
		{"no Content-Type", rawRequest{body: listTools, header: map[string][]string{"Content-Type": nil}}, 415, -32600, "unsupported_media_type", ""},
		{"charset latin1", rawRequest{body: listTools, header: map[string][]string{"Content-Type": {"application/json; charset=iso-8859-1"}}}, 415, -32600, "unsupported_media_type", ""},
		{"form encoded", rawRequest{body: "a=b", header: map[string][]string{"Content-Type": {"application/x-www-form-urlencoded"}}}, 415, -32600, "unsupported_media_type", ""},
		{"Accept JSON only", rawRequest{body: listTools, header: map[string][]string{"Accept": {"application/json"}}}, 406, -32600, "not_acceptable", ""},
		{"no Accept", rawRequest{body: listTools, header: map[string][]string{"Accept": nil}}, 406, -32600, "not_acceptable", ""},
		// Size
		{"oversized body", rawRequest{body: big}, 413, -32600, "body_too_large", ""},
		{"oversized chunked body", rawRequest{body: big, chunked: true}, 413, -32600, "body_too_large", ""},
		{"batch of 1000 (oversized)", rawRequest{body: batch1000.String()}, 413, -32600, "body_too_large", ""},
		// Strict JSON
		{"empty body", rawRequest{}, 400, -32700, "empty_body", ""},
		{"truncated JSON", rawRequest{body: `{"jsonrpc":"2.0","id":1,`}, 400, -32700, "invalid_json", ""},
		{"not JSON", rawRequest{body: `hello`}, 400, -32700, "invalid_json", ""},
		{"duplicate member", rawRequest{body: `{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}`}, 400, -32700, "duplicate_key", ""},
		{"duplicate inside params", rawRequest{body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","name":"y"}}`}, 400, -32700, "duplicate_key", ""},
		{"invalid UTF-8", rawRequest{body: "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"x\":\"\xff\"}}"}, 400, -32700, "invalid_utf8", ""},
		{"lone surrogate", rawRequest{body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"\ud800"}}`}, 400, -32700, "invalid_utf8", ""},
		{"trailing data", rawRequest{body: listTools + listTools}, 400, -32700, "trailing_data", ""},
		{"nesting too deep", rawRequest{body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":` + deep + `}`}, 400, -32700, "nesting_too_deep", ""},
		// Batches (removed from MCP in 2025-06-18)
		{"batch of two", rawRequest{body: "[" + listTools + "," + listTools + "]"}, 400, -32600, "batch_not_supported", ""},
		{"batch of one", rawRequest{body: "[" + listTools + "]"}, 400, -32600, "batch_not_supported", ""},
		{"empty batch", rawRequest{body: "[]"}, 400, -32600, "batch_not_supported", ""},
		{"batch of notifications", rawRequest{body: `[{"jsonrpc":"2.0","method":"notifications/initialized"}]`}, 400, -32600, "batch_not_supported", ""},
		// JSON-RPC 2.0 structure
		{"a string", rawRequest{body: `"tools/list"`}, 400, -32600, "invalid_request", ""},
		{"null", rawRequest{body: `null`}, 400, -32600, "invalid_request", ""},
		{"no jsonrpc", rawRequest{body: `{"id":1,"method":"tools/list"}`}, 400, -32600, "invalid_request", "1"},
		{"jsonrpc 1.0", rawRequest{body: `{"jsonrpc":"1.0","id":1,"method":"tools/list"}`}, 400, -32600, "invalid_request", ""},
		{"jsonrpc a number", rawRequest{body: `{"jsonrpc":2.0,"id":1,"method":"tools/list"}`}, 400, -32600, "invalid_request", ""},
		{"no method", rawRequest{body: `{"jsonrpc":"2.0","id":1}`}, 400, -32600, "invalid_request", "1"},
		{"empty method", rawRequest{body: `{"jsonrpc":"2.0","id":1,"method":""}`}, 400, -32600, "invalid_request", "1"},
		{"method a number", rawRequest{body: `{"jsonrpc":"2.0","id":1,"method":7}`}, 400, -32600, "invalid_request", "1"},
		{"id null", rawRequest{body: `{"jsonrpc":"2.0","id":null,"method":"tools/list"}`}, 400, -32600, "invalid_request", ""},
		{"id fractional", rawRequest{body: `{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}`}, 400, -32600, "invalid_request", ""},
		{"id an object", rawRequest{body: `{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`}, 400, -32600, "invalid_request", ""},
		{"id true", rawRequest{body: `{"jsonrpc":"2.0","id":true,"method":"tools/list"}`}, 400, -32600, "invalid_request", ""},
		{"params an array", rawRequest{body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[]}`}, 400, -32600, "invalid_request", "1"},
		{"params a string", rawRequest{body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":"x"}`}, 400, -32600, "invalid_request", "1"},
		{"unknown member", rawRequest{body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","extra":1}`}, 400, -32600, "invalid_request", "1"},
		{"member case folded", rawRequest{body: `{"jsonrpc":"2.0","ID":1,"Method":"tools/list"}`}, 400, -32600, "invalid_request", ""},
		{"a response", rawRequest{body: `{"jsonrpc":"2.0","id":1,"result":{}}`}, 400, -32600, "invalid_request", "1"},
		{"an error response", rawRequest{body: `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}`}, 400, -32600, "invalid_request", "1"},
		// Methods
		{"unknown method", rawRequest{body: `{"jsonrpc":"2.0","id":7,"method":"tools/destroy"}`}, 200, -32601, "method_not_found", "7"},
		{"prompts (not served)", rawRequest{body: `{"jsonrpc":"2.0","id":"p","method":"prompts/list"}`}, 200, -32601, "method_not_found", `"p"`},
		{"logging (not served)", rawRequest{body: `{"jsonrpc":"2.0","id":8,"method":"logging/setLevel","params":{"level":"debug"}}`}, 200, -32601, "method_not_found", "8"},
		{"server/discover at the pinned version", rawRequest{body: `{"jsonrpc":"2.0","id":9,"method":"server/discover"}`}, 200, -32601, "method_not_found", "9"},
		{"resources/subscribe (not served)", rawRequest{body: `{"jsonrpc":"2.0","id":10,"method":"resources/subscribe","params":{"uri":"keysvc:///.well-known/jwks.json"}}`}, 200, -32601, "method_not_found", "10"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := c.req.send(t, url)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, c.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			var e rpcErr
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			id := string(e.ID)
			if c.id == "" && id != "null" || c.id != "" && id != c.id {
				t.Fatalf("id %s, want %q", id, c.id)
			}
			if e.JSONRPC != "2.0" || e.Error.Code != c.code || e.Error.Data.Error != c.err || e.Error.Message == "" {
				t.Fatalf("error %+v, want code %d %s", e.Error, c.code, c.err)
			}
			switch c.code {
			case -32022:
				if !slices.Equal(e.Error.Data.Supported, []string{mcpserve.ProtocolVersion}) || e.Error.Data.Requested == nil {
					t.Fatalf("unsupported version data %+v", e.Error.Data)
				}
			case -32000:
				if resp.Header.Get("Allow") != "POST, OPTIONS" {
					t.Fatalf("405 Allow %q", resp.Header.Get("Allow"))
				}
			}
		})
	}

	// Notifications: an unknown one is ignored (202, no body), a known one
	// is accepted by the SDK the same way.
	for _, body := range []string{`{"jsonrpc":"2.0","method":"notifications/unknown"}`, `{"jsonrpc":"2.0","method":"notifications/initialized"}`} {
		resp, b := rawRequest{body: body}.send(t, url)
		if resp.StatusCode != http.StatusAccepted || len(b) != 0 {
			t.Fatalf("%s: %d %q", body, resp.StatusCode, b)
		}
	}

	// An allowed browser origin gets CORS: a preflight, then the call.
	resp, _ := rawRequest{method: "OPTIONS", header: map[string][]string{"Origin": {"https://agent.example"}}}.send(t, url)
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://agent.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "MCP-Protocol-Version") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	resp, b := rawRequest{body: listTools, header: map[string][]string{"Origin": {"https://Agent.Example"}}}.send(t, url)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "https://Agent.Example" || !strings.Contains(string(b), "verify_vrp_receipt") {
		t.Fatalf("allowed origin: %d %s", resp.StatusCode, b)
	}

	// Still answering: a real client verifies a receipt.
	cs := connect(t, ks)
	tok := ks.Token("sign:*")
	a := sign(t, ks, tok, "villa", `{"checkIn":"2026-09-02"}`, "")
	var out verifyOut
	if call(t, cs, mcpserve.ToolVerifyReceipt, map[string]any{"receipt": receipt(a.Attestation)}, &out) || !out.FullyVerified {
		t.Fatalf("after the battery: %+v", out)
	}
}

// TestInitializeNegotiation: initialize proposing another revision is
// answered with the pinned one (MCP lifecycle, version negotiation), and
// the result is plain JSON.
func TestInitializeNegotiation(t *testing.T) {
	ks := keysvctest.Start(t, keysvctest.Options{})
	for _, proposed := range []string{"2025-11-25", "2025-06-18", "2024-11-05", "2099-01-01"} {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + proposed + `","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
		resp, b := rawRequest{body: body, header: map[string][]string{"MCP-Protocol-Version": nil}}.send(t, ks.URL+"/mcp")
		var r struct {
			Result struct {
				ProtocolVersion string `json:"protocolVersion"`
				ServerInfo      struct{ Name string }
				Capabilities    map[string]any
			} `json:"result"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || r.Result.ProtocolVersion != mcpserve.ProtocolVersion || r.Result.ServerInfo.Name != "keysvc" {
			t.Fatalf("initialize %s: %d %s", proposed, resp.StatusCode, b)
		}
		if resp.Header.Get("Mcp-Session-Id") != "" {
			t.Fatalf("stateless endpoint set a session id")
		}
		if _, ok := r.Result.Capabilities["logging"]; ok || r.Result.Capabilities["tools"] == nil || r.Result.Capabilities["resources"] == nil {
			t.Fatalf("capabilities %v", r.Result.Capabilities)
		}
	}
}

// TestRateLimit: past its burst a client address gets 429 rate_limited
// with Retry-After, before anything is parsed.
func TestRateLimit(t *testing.T) {
	ks := keysvctest.Start(t, keysvctest.Options{MCP: &mcpserve.Config{RateLimit: mcpserve.RateLimit{PerSecond: 0.5, Burst: 3}}})
	for i := range 3 {
		if resp, b := (rawRequest{body: listTools}).send(t, ks.URL+"/mcp"); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	resp, b := rawRequest{body: "not even JSON"}.send(t, ks.URL+"/mcp")
	var e rpcErr
	if resp.StatusCode != http.StatusTooManyRequests || json.Unmarshal(b, &e) != nil || e.Error.Code != -32002 || e.Error.Data.Error != "rate_limited" {
		t.Fatalf("over the limit: %d %s", resp.StatusCode, b)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "2" {
		t.Fatalf("Retry-After %q, want 2", ra)
	}
	// The signing and public HTTP APIs have their own limits: untouched.
	r, err := http.Get(ks.URL + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode == http.StatusTooManyRequests {
		t.Fatal("the /mcp limit spilled onto the public documents")
	}
}
