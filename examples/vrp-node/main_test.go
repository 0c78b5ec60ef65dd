package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/keysvctest"
	"github.com/keysvc/keysvc/mcpnode"
)

// startNode runs the example node in process against ks.
func startNode(t *testing.T, ks *keysvctest.Server, token string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out strings.Builder
	go func() {
		done <- run(ctx, options{keysvc: ks.URL, key: "dev", token: token, signOffer: true}, ln, &out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	})
	return "http://" + ln.Addr().String() + "/mcp"
}

// connect opens a go-sdk session; version "" is the SDK's newest
// (2026-07-28, server/discover, against this stateless node).
func connect(t *testing.T, url, version string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestExampleNode: a call with camelCase arguments returns a signed offer
// and a transport attestation bound to it; the receipt made of the two
// verifies through keysvc's /mcp; tampering with either is invalid.
func TestExampleNode(t *testing.T) {
	ks := keysvctest.Start(t, keysvctest.Options{})
	kid := ks.CreateKey("dev", "localhost")
	nodeURL := startNode(t, ks, ks.Token("sign:dev"))
	ctx := context.Background()
	// The identity is in the initialize result (2025-11-25); the SDK's
	// 2026-07-28 client reads server/discover instead and keeps no _meta
	// of it, so that session is used for the calls only.
	legacy := connect(t, nodeURL, "2025-11-25")
	if id, _ := json.Marshal(legacy.InitializeResult().Meta["identity"]); string(id) != `{"id":"did:web:localhost","keys":{"jwks_uri":"https://localhost/.well-known/jwks.json"}}` {
		t.Fatalf("identity %s", id)
	}
	// server/discover (2026-07-28) carries it in its _meta.
	req, _ := http.NewRequest(http.MethodPost, nodeURL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{`+
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "server/discover")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"identity":{"id":"did:web:localhost"`) {
		t.Fatalf("server/discover: %d %s", resp.StatusCode, body)
	}
	agent := connect(t, nodeURL, "")
	if v := agent.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}
	res, err := agent.CallTool(ctx, &mcp.CallToolParams{Name: "get_verified_stay_offer",
		Arguments: json.RawMessage(`{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}`)})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	var out struct {
		Offer            offer              `json:"offer"`
		OfferAttestation client.Attestation `json:"offer_attestation"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Offer.OfferRef != "offer:localhost:2026-09-02/05" || out.Offer.Nights != 3 || out.Offer.Price.Amount != "4200.00" {
		t.Fatalf("offer %+v", out.Offer)
	}
	mb, _ := json.Marshal(res.Meta[mcpnode.MetaKey])
	var tr mcpnode.Transport
	if err := json.Unmarshal(mb, &tr); err != nil {
		t.Fatal(err)
	}
	// camelCase arguments hash as snake_case (vrp-mcp-transport.json).
	if tr.Status != "signed" || tr.KID != kid || tr.ArgumentsSHA256 != "2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050" ||
		tr.Attestation.Ref != out.Offer.OfferRef || tr.SEP2828Digest == "" {
		t.Fatalf("transport %s", mb)
	}

	verifierSession := connect(t, ks.URL+"/mcp", "")
	verify := func(atts ...client.Attestation) string {
		t.Helper()
		receipt := map[string]any{"vrp_receipt_version": "1.0", "subject": map[string]any{"property": "localhost", "stay": "2026-09-02/2026-09-05"},
			"issuer": map[string]any{"node": "localhost"}, "attestations": atts}
		vr, err := verifierSession.CallTool(ctx, &mcp.CallToolParams{Name: "verify_vrp_receipt", Arguments: map[string]any{"receipt": receipt}})
		if err != nil || vr.IsError {
			t.Fatalf("verify: %v %+v", err, vr)
		}
		var v struct {
			FullyVerified bool `json:"fully_verified"`
			Attestations  []struct {
				Status string
				Error  *string
			}
		}
		vb, _ := json.Marshal(vr.StructuredContent)
		json.Unmarshal(vb, &v)
		var s []string
		for _, a := range v.Attestations {
			e := ""
			if a.Error != nil {
				e = ":" + *a.Error
			}
			s = append(s, a.Status+e)
		}
		return strings.Join(s, " ")
	}
	if got := verify(out.OfferAttestation, *tr.Attestation); got != "verified verified" {
		t.Fatalf("receipt: %s", got)
	}
	bad := *tr.Attestation
	bad.Signature = bad.Signature[:len(bad.Signature)-3] + map[bool]string{true: "AAA", false: "BBB"}[!strings.HasSuffix(bad.Signature, "AAA")]
	badOffer := out.OfferAttestation
	badOffer.Ref = "offer:localhost:2026-09-03/05" // outside the signature: still verifies
	badOffer.Signature = strings.Replace(badOffer.Signature, ".", ".e", 1)
	if got := verify(badOffer, bad); got != "invalid:sig_invalid invalid:sig_invalid" {
		t.Fatalf("tampered: %s", got)
	}
}
