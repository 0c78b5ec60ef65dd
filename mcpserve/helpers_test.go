package mcpserve_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/keysvctest"
)

// connect opens a go-sdk client session to keysvc's /mcp. The client
// first tries the 2026-07-28 server/discover, is refused with -32022 and
// falls back to initialize at the pinned 2025-11-25.
func connect(t *testing.T, ks *keysvctest.Server) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "mcpserve-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ks.URL + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and decodes its structured content into out. It
// returns isError; the text content must be the same JSON.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args any, out any) bool {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d content blocks, want 1", tool, len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s: content is %T, want text", tool, res.Content[0])
	}
	if !sameJSON(t, []byte(text.Text), b) {
		t.Fatalf("%s: text content %s differs from structured content %s", tool, text.Text, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decode %s: %v", tool, b, err)
		}
	}
	return res.IsError
}

// toolErr is the structured content of a tool error.
type toolErr struct {
	Error struct{ Code, Message string } `json:"error"`
}

// wantToolError calls a tool that must answer isError with code.
func wantToolError(t *testing.T, cs *mcp.ClientSession, tool string, args any, code string) {
	t.Helper()
	var e toolErr
	if !call(t, cs, tool, args, &e) {
		t.Fatalf("%s %v: not an error", tool, args)
	}
	if e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("%s %v: error %+v, want code %s", tool, args, e.Error, code)
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("unmarshal %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// verifyOut is verify_vrp_receipt's structured content.
type verifyOut struct {
	ReceiptValid  bool     `json:"receipt_valid"`
	FullyVerified bool     `json:"fully_verified"`
	Errors        []string `json:"errors"`
	Attestations  []struct {
		Index  int     `json:"index"`
		Layer  string  `json:"layer"`
		Status string  `json:"status"`
		Error  *string `json:"error"`
		KID    *string `json:"kid"`
	} `json:"attestations"`
	Verification struct {
		Mode     string   `json:"mode"`
		KeysFrom string   `json:"keys_from"`
		Keys     []string `json:"keys"`
		At       string   `json:"at"`
	} `json:"verification"`
}

// statuses renders each attestation as "layer:status[:error]".
func (v verifyOut) statuses() string {
	var parts []string
	for _, a := range v.Attestations {
		s := a.Layer + ":" + a.Status
		if a.Error != nil {
			s += ":" + *a.Error
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// sign signs a transport assertion through keysvc's signing API.
func sign(t *testing.T, ks *keysvctest.Server, token, key, args, ref string) client.TransportResult {
	t.Helper()
	res, err := client.New(ks.URL, token).MCPTransportCall(context.Background(), key, client.TransportCall{
		Tool: "get_verified_stay_offer", Arguments: json.RawMessage(args), OfferRef: ref})
	if err != nil {
		t.Fatalf("sign with %s: %v", key, err)
	}
	return res
}

// receipt wraps attestations into a VRP receipt v1.
func receipt(atts ...client.Attestation) map[string]any {
	return map[string]any{
		"vrp_receipt_version": "1.0",
		"subject":             map[string]any{"property": "villaakerlyckan.se", "stay": "2026-09-02/2026-09-05"},
		"issuer":              map[string]any{"node": "villaakerlyckan.se"},
		"attestations":        atts,
	}
}
