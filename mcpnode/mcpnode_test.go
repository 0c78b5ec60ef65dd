package mcpnode_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/keysvctest"
	"github.com/keysvc/keysvc/internal/testvectors"
	"github.com/keysvc/keysvc/mcpnode"
	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/verifier"
)

const (
	offerRef  = "offer:villaakerlyckan.se:2026-09-02/05"
	camelArgs = `{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}`
	// vrp-mcp-transport.json, case camel_case_input_normalized.
	vectorDigest = "2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050"
)

// node is an MCP server with a few tools, connected to a go-sdk client
// over the Streamable HTTP transport on 127.0.0.1.
type node struct {
	cs    *mcp.ClientSession
	calls atomic.Int64 // tool handler runs
}

// offerResult is what the test tool returns, byte for byte the same with
// and without the middleware.
func offerResult() *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: "3 nights, 2 guests: 4 200 SEK"}},
		StructuredContent: json.RawMessage(`{"offer_ref":"` + offerRef + `","price":{"amount":"4200.00","currency":"SEK"}}`),
		Meta:              mcp.Meta{"com.example/trace": "t-1"},
	}
}

// startNode runs the server (with s installed when not nil) and connects
// a client.
func startNode(t *testing.T, s *mcpnode.Signer) *node {
	t.Helper()
	n := &node{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "villa", Version: "1"}, nil)
	schema := json.RawMessage(`{"type":"object"}`)
	for _, name := range []string{"get_verified_stay_offer", "unsigned_tool", "query_table", "gcs_read"} {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n.calls.Add(1)
			return offerResult(), nil
		})
	}
	srv.AddTool(&mcp.Tool{Name: "failing_tool", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n.calls.Add(1)
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no availability"}}}, nil
	})
	if s != nil {
		s.Install(srv)
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	n.cs = cs
	return n
}

func (n *node) call(t *testing.T, tool, args string, meta mcp.Meta) (*mcp.CallToolResult, error) {
	t.Helper()
	return n.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args), Meta: meta})
}

// transport decodes the result's _meta[MetaKey].
func transport(t *testing.T, res *mcp.CallToolResult) (mcpnode.Transport, bool) {
	t.Helper()
	v, ok := res.Meta[mcpnode.MetaKey]
	if !ok {
		return mcpnode.Transport{}, false
	}
	b, _ := json.Marshal(v)
	var tr mcpnode.Transport
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	return tr, true
}

// toolBytes is the part of a result the tool made: everything but the
// middleware's _meta member.
func toolBytes(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	cp := *res
	cp.Meta = mcp.Meta{}
	for k, v := range res.Meta {
		if k != mcpnode.MetaKey {
			cp.Meta[k] = v
		}
	}
	b, err := json.Marshal(&cp)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type keysvc struct {
	*keysvctest.Server
	kid   string
	token string
	proxy *httptest.Server // counts requests by path, forwards to keysvc
	mu    sync.Mutex
	paths map[string]int
}

func startKeysvc(t testing.TB) *keysvc {
	t.Helper()
	ks := &keysvc{Server: keysvctest.Start(t, keysvctest.Options{}), paths: map[string]int{}}
	ks.kid = ks.CreateKey("villa", "villaakerlyckan.se")
	ks.token = ks.Token("sign:villa:transport")
	u, _ := url.Parse(ks.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	ks.proxy = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ks.mu.Lock()
		ks.paths[r.URL.Path]++
		ks.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(ks.proxy.Close)
	return ks
}

func (ks *keysvc) count(path string) int {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.paths[path]
}

func newSigner(t testing.TB, ks *keysvc, cfg mcpnode.Config) *mcpnode.Signer {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = ks.proxy.URL
	}
	if cfg.Token == "" {
		cfg.Token = ks.token
	}
	cfg.Key = "villa"
	s, err := mcpnode.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSignsToolCalls: every call of the node carries a transport
// attestation whose JWS keysvc made over exactly the profile's assertion
// (camelCase arguments hashed as snake_case), the tool's result is
// untouched, the initialize result names the node's identity, and the
// attestation verifies lifecycle-aware, through keysvc's /mcp too.
func TestSignsToolCalls(t *testing.T) {
	ks := startKeysvc(t)
	s := newSigner(t, ks, mcpnode.Config{
		OfferRef: func(context.Context, *mcp.CallToolRequest, *mcp.CallToolResult) string { return offerRef },
	})
	n := startNode(t, s)
	bare := startNode(t, nil)

	id, _ := json.Marshal(n.cs.InitializeResult().Meta[mcpnode.IdentityKey])
	if string(id) != `{"id":"did:web:villaakerlyckan.se","keys":{"jwks_uri":"https://villaakerlyckan.se/.well-known/jwks.json"}}` {
		t.Fatalf("identity %s", id)
	}
	if _, ok := bare.cs.InitializeResult().Meta[mcpnode.IdentityKey]; ok {
		t.Fatal("bare server has an identity")
	}

	res, err := n.call(t, "get_verified_stay_offer", camelArgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := bare.call(t, "get_verified_stay_offer", camelArgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := toolBytes(t, res), toolBytes(t, want); got != want {
		t.Fatalf("tool result changed by the middleware:\n got %s\nwant %s", got, want)
	}
	tr, ok := transport(t, res)
	if !ok || tr.Status != mcpnode.StatusSigned || tr.KID != ks.kid || tr.ArgumentsSHA256 != vectorDigest || tr.Error != nil {
		t.Fatalf("transport %+v", tr)
	}
	a := tr.Attestation
	if a.Layer != "transport" || a.Source != "https://villaakerlyckan.se/.well-known/jwks.json" || a.Ref != offerRef {
		t.Fatalf("attestation %+v", a)
	}
	// The exact JWS: the profile's assertion in RFC 8785 form, Ed25519
	// (deterministic) under the RFC 8037 key over header.payload.
	wantPayload := `{"arguments_sha256":"` + vectorDigest + `","issuer":"villaakerlyckan.se","offer_ref":"` + offerRef +
		`","served_at":"` + a.ValidFrom + `","tool":"get_verified_stay_offer","type":"vrp.mcp.transport.1","vrp_mcp_profile_version":"1.0"}`
	parts := strings.Split(a.Signature, ".")
	if len(parts) != 3 {
		t.Fatalf("JWS %s", a.Signature)
	}
	hdr, _ := base64.RawURLEncoding.DecodeString(parts[0])
	var h struct{ Alg, Kid, Typ string }
	if json.Unmarshal(hdr, &h) != nil || h.Alg != "EdDSA" || h.Kid != ks.kid || h.Typ != signer.TransportJWSTyp {
		t.Fatalf("JWS header %s", hdr)
	}
	input := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(wantPayload))
	if wantJWS := input + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(ks.Priv, []byte(input))); a.Signature != wantJWS {
		t.Fatalf("JWS\n got %s\nwant %s", a.Signature, wantJWS)
	}
	from, _ := time.Parse(time.RFC3339, a.ValidFrom)
	until, _ := time.Parse(time.RFC3339, a.ValidUntil)
	if until.Sub(from) != time.Hour || time.Since(from) > time.Minute {
		t.Fatalf("window %s .. %s", a.ValidFrom, a.ValidUntil)
	}

	// Lifecycle-aware verification, in process and through /mcp.
	rec, _ := json.Marshal(map[string]any{"vrp_receipt_version": "1.0", "subject": map[string]any{}, "issuer": map[string]any{"node": "villaakerlyckan.se"},
		"attestations": []any{a}})
	h2, err := verifier.ParseKeyHistory(ks.History("villa"))
	if err != nil {
		t.Fatal(err)
	}
	if r := verifier.VerifyReceipt(context.Background(), rec, verifier.Options{History: h2}); !r.FullyVerified {
		t.Fatalf("verify: %+v", r)
	}
	vc := mcp.NewClient(&mcp.Implementation{Name: "verifier", Version: "1"}, nil)
	vs, err := vc.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ks.URL + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	vr, err := vs.CallTool(context.Background(), &mcp.CallToolParams{Name: "verify_vrp_receipt", Arguments: map[string]any{"receipt_json": string(rec)}})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(vr.StructuredContent); !strings.Contains(string(b), `"fully_verified":true`) || !strings.Contains(string(b), `"keys":["villa"]`) {
		t.Fatalf("/mcp verify: %s", b)
	}

	// Snake_case arguments: the same digest; no arguments: {}.
	res, _ = n.call(t, "get_verified_stay_offer", `{"check_in":"2026-09-02","check_out":"2026-09-05","guests":2}`, nil)
	if tr, _ := transport(t, res); tr.ArgumentsSHA256 != vectorDigest {
		t.Fatalf("snake_case digest %s", tr.ArgumentsSHA256)
	}
	res, err = n.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_verified_stay_offer"})
	if tr, _ := transport(t, res); err != nil || tr.Status != mcpnode.StatusSigned || tr.ArgumentsSHA256 != signer.SHA256Hex([]byte("{}")) {
		t.Fatalf("no arguments: %v %+v", err, tr)
	}
	if st := s.Stats(); st.Signed != 3 || st.Refused != 0 || st.Unsigned != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// rpcErr unpacks a JSON-RPC error from a client call.
func rpcErr(t *testing.T, err error) (int64, map[string]any) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a JSON-RPC error", err, err)
	}
	var data map[string]any
	if err := json.Unmarshal(we.Data, &data); err != nil {
		t.Fatalf("error data %s: %v", we.Data, err)
	}
	return we.Code, data
}

// TestFailClosed: when keysvc cannot sign, the call is a JSON-RPC error
// and the tool's result is withheld — keysvc down, or keysvc refusing.
func TestFailClosed(t *testing.T) {
	ks := startKeysvc(t)
	// A token without the transport scope: keysvc answers 403.
	jwsOnly := ks.Token("sign:villa:jws")
	wrong := newSigner(t, ks, mcpnode.Config{Token: jwsOnly})
	n := startNode(t, wrong)
	res, err := n.call(t, "get_verified_stay_offer", camelArgs, nil)
	if res != nil || err == nil {
		t.Fatalf("refused by keysvc: result %+v", res)
	}
	code, data := rpcErr(t, err)
	if code != mcpnode.CodeNotSigned || data["error"] != mcpnode.ErrSigningFailed || data["keysvc_code"] != "forbidden" || data["keysvc_status"] != float64(403) {
		t.Fatalf("refused: %d %v", code, data)
	}
	if strings.Contains(err.Error(), jwsOnly) || strings.Contains(err.Error(), ks.proxy.URL) {
		t.Fatalf("token or keysvc address in the error: %v", err)
	}

	s := newSigner(t, ks, mcpnode.Config{SignTimeout: 2 * time.Second})
	n = startNode(t, s)
	if _, err := n.call(t, "get_verified_stay_offer", camelArgs, nil); err != nil {
		t.Fatal(err)
	}
	ks.proxy.CloseClientConnections()
	ks.proxy.Close() // keysvc goes away
	res, err = n.call(t, "get_verified_stay_offer", camelArgs, nil)
	if res != nil || err == nil {
		t.Fatalf("keysvc down: result %+v", res)
	}
	code, data = rpcErr(t, err)
	if code != mcpnode.CodeNotSigned || data["keysvc_code"] != mcpnode.ErrKeysvcUnreachable {
		t.Fatalf("down: %d %v", code, data)
	}
	if strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("keysvc's address leaked to the MCP client: %v", err)
	}
	if st := s.Stats(); st.Signed != 1 || st.Refused != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestMarkUnsigned: by option the result comes back, marked unsigned with
// the reason, never silently.
func TestMarkUnsigned(t *testing.T) {
	ks := startKeysvc(t)
	s := newSigner(t, ks, mcpnode.Config{OnFailure: mcpnode.MarkUnsigned, SignTimeout: 2 * time.Second})
	n := startNode(t, s)
	bare := startNode(t, nil)
	ks.proxy.CloseClientConnections()
	ks.proxy.Close()
	res, err := n.call(t, "get_verified_stay_offer", camelArgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, ok := transport(t, res)
	if !ok || tr.Status != mcpnode.StatusUnsigned || tr.Attestation != nil || tr.Error == nil || tr.Error.Code != mcpnode.ErrKeysvcUnreachable {
		t.Fatalf("transport %+v", tr)
	}
	want, _ := bare.call(t, "get_verified_stay_offer", camelArgs, nil)
	if toolBytes(t, res) != toolBytes(t, want) {
		t.Fatal("unsigned result differs from the tool's")
	}
	// Arguments the profile cannot hash: also marked, and the tool ran.
	res, err = n.call(t, "get_verified_stay_offer", `{"checkIn":"a","check_in":"b"}`, nil)
	if tr, _ := transport(t, res); err != nil || tr.Status != mcpnode.StatusUnsigned || tr.Error.Code != "argument_key_collision" {
		t.Fatalf("collision: %v %+v", err, tr)
	}
	if st := s.Stats(); st.Unsigned != 2 || st.Refused != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestArgumentsRejected: failing closed, arguments the profile refuses
// are an invalid-params error and the tool never runs.
func TestArgumentsRejected(t *testing.T) {
	ks := startKeysvc(t)
	n := startNode(t, newSigner(t, ks, mcpnode.Config{}))
	for args, want := range map[string]string{
		`{"checkIn":"a","check_in":"b"}`: "argument_key_collision",
		`{"n":9007199254740993}`:         "number_out_of_range",
	} {
		_, err := n.call(t, "get_verified_stay_offer", args, nil)
		code, data := rpcErr(t, err)
		if code != jsonrpc.CodeInvalidParams || data["error"] != mcpnode.ErrArgumentsRejected || data["code"] != want {
			t.Fatalf("%s: %d %v", args, code, data)
		}
	}
	if n.calls.Load() != 0 {
		t.Fatalf("the tool ran %d times", n.calls.Load())
	}
}

// TestToolErrorsAndFilter: an isError result is marked unsigned (signed
// with SignErrors); a tool outside Config.Tools passes untouched.
func TestToolErrorsAndFilter(t *testing.T) {
	ks := startKeysvc(t)
	n := startNode(t, newSigner(t, ks, mcpnode.Config{Tools: []string{"get_verified_stay_offer", "failing_tool"}}))
	res, err := n.call(t, "failing_tool", `{}`, nil)
	if tr, _ := transport(t, res); err != nil || !res.IsError || tr.Status != mcpnode.StatusUnsigned || tr.Error.Code != mcpnode.ErrToolError {
		t.Fatalf("tool error: %v %+v", err, tr)
	}
	res, err = n.call(t, "unsigned_tool", `{}`, nil)
	if _, ok := transport(t, res); err != nil || ok {
		t.Fatalf("filtered tool: %v %v", err, res.Meta)
	}
	n = startNode(t, newSigner(t, ks, mcpnode.Config{SignErrors: true}))
	res, _ = n.call(t, "failing_tool", `{}`, nil)
	if tr, _ := transport(t, res); tr.Status != mcpnode.StatusSigned || !res.IsError {
		t.Fatalf("SignErrors: %+v", tr)
	}
}

// TestSEP2828Digests: with Config.SEP2828 the _meta member carries the
// SEP-2828 digests, equal to the shared vectors'.
func TestSEP2828Digests(t *testing.T) {
	ks := startKeysvc(t)
	n := startNode(t, newSigner(t, ks, mcpnode.Config{SEP2828: true}))
	var v1 struct {
		Cases []struct {
			ID     string `json:"id"`
			Params struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
				Meta      mcp.Meta        `json:"_meta"`
			} `json:"params"`
			Expected struct{ Digest string } `json:"expected"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(testvectors.Read(t, "sep2828-v1-authorization-binding.json"), &v1); err != nil {
		t.Fatal(err)
	}
	c := v1.Cases[0] // basic: query_table with a binding
	res, err := n.call(t, c.Params.Name, string(c.Params.Arguments), c.Params.Meta)
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := transport(t, res)
	raw, _ := json.Marshal(map[string]any{"name": c.Params.Name, "arguments": c.Params.Arguments, "_meta": c.Params.Meta})
	_, fallback, _ := signer.ProjectSEP2828(raw)
	if tr.Status != mcpnode.StatusSigned || tr.SEP2828V1Digest != c.Expected.Digest || tr.SEP2828Digest != fallback || fallback == "" {
		t.Fatalf("v1 %s (want %s), fallback %s (want %s)", tr.SEP2828V1Digest, c.Expected.Digest, tr.SEP2828Digest, fallback)
	}

	var fb struct {
		Cases []struct {
			Name   string `json:"name"`
			Params struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
				Meta      mcp.Meta        `json:"_meta"`
			} `json:"params"`
			Digest string `json:"expected_digest"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(testvectors.Read(t, "sep2828-fallback-projection.json"), &fb); err != nil {
		t.Fatal(err)
	}
	f := fb.Cases[1] // with_auth_binding: gcs_read; no nonce, so no v1 digest
	res, err = n.call(t, f.Params.Name, string(f.Params.Arguments), f.Params.Meta)
	if err != nil {
		t.Fatal(err)
	}
	if tr, _ := transport(t, res); tr.SEP2828Digest != f.Digest || tr.SEP2828V1Digest != "" {
		t.Fatalf("fallback %s, want %s (v1 %q)", tr.SEP2828Digest, f.Digest, tr.SEP2828V1Digest)
	}
}

// TestBatching: calls that queue behind a busy worker share one
// mcp-transport:batch request; every one is still signed for itself.
func TestBatching(t *testing.T) {
	ks := startKeysvc(t)
	s := newSigner(t, ks, mcpnode.Config{Workers: 1, KeepWarm: -1})
	n := startNode(t, s)
	const calls = 48
	var wg sync.WaitGroup
	sigs := make([]string, calls)
	errs := make([]error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := `{"guests":` + string(rune('0'+i%10)) + `,"n":"` + strings.Repeat("x", i) + `"}`
			res, err := n.call(t, "get_verified_stay_offer", args, nil)
			if err != nil {
				errs[i] = err
				return
			}
			tr, _ := transport(t, res)
			sigs[i] = tr.Attestation.Signature
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, sig := range sigs {
		if errs[i] != nil || sig == "" || seen[sig] {
			t.Fatalf("call %d: %v %q", i, errs[i], sig)
		}
		seen[sig] = true
	}
	st := s.Stats()
	single, batch := ks.count("/v1/keys/villa/mcp-transport"), ks.count("/v1/keys/villa/mcp-transport:batch")
	t.Logf("%d calls: %d requests (%d single, %d batches of %d items)", calls, st.Requests, single, batch, st.BatchedItems)
	if st.Signed != calls || st.Batches == 0 || int(st.Requests) != single+batch || int(st.Requests) >= calls || int(st.BatchedItems)+single != calls {
		t.Fatalf("stats %+v, keysvc saw %d single and %d batch requests", st, single, batch)
	}
}

// TestKeepWarm: an idle signer pings keysvc from each worker's connection.
func TestKeepWarm(t *testing.T) {
	ks := startKeysvc(t)
	newSigner(t, ks, mcpnode.Config{Workers: 2, KeepWarm: 50 * time.Millisecond})
	deadline := time.Now().Add(5 * time.Second)
	for ks.count("/healthz") < 6 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := ks.count("/healthz"); got < 6 {
		t.Fatalf("%d keep-warm pings, want at least 6 (2 workers, 3 rounds)", got)
	}
}

// TestNewErrors: a signer does not start against an unknown key or an
// unreachable keysvc, without its configuration, or through a redirect to
// another origin.
func TestNewErrors(t *testing.T) {
	ks := startKeysvc(t)
	ctx := context.Background()
	if _, err := mcpnode.New(ctx, mcpnode.Config{URL: ks.URL, Token: ks.token, Key: "nope"}); err == nil || !strings.Contains(err.Error(), "key_not_found") {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := mcpnode.New(ctx, mcpnode.Config{URL: ks.URL, Key: "villa"}); err == nil {
		t.Fatal("no token: no error")
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if _, err := mcpnode.New(ctx, mcpnode.Config{URL: dead.URL, Token: ks.token, Key: "villa"}); err == nil {
		t.Fatal("unreachable keysvc: no error")
	}
	// The client package's errors carry keysvc's stable code.
	var ce *client.Error
	_, err := mcpnode.New(ctx, mcpnode.Config{URL: ks.URL, Token: ks.token, Key: "nope"})
	if !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
		t.Fatalf("unknown key error %v", err)
	}
	// A keysvc URL that redirects to another origin (here the real
	// keysvc, behind a redirect from another port) is refused: the node's
	// pooled client follows redirects only within the origin it was given.
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, ks.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	if _, err := mcpnode.New(ctx, mcpnode.Config{URL: redirect.URL, Token: ks.token, Key: "villa"}); err == nil || !strings.Contains(err.Error(), "redirect to another origin ("+ks.URL+"/v1/keys/villa/") {
		t.Fatalf("keysvc behind a redirect to another origin: %v", err)
	}
}
