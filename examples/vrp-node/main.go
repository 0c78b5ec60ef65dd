// Command vrp-node is a small VRP node: an MCP server (official Go SDK,
// Streamable HTTP) with one tool, get_verified_stay_offer, whose every call
// is signed through keysvc by the mcpnode middleware. Start it next to
// `keysvc serve --dev`:
//
//	go run ./cmd/keysvc serve --dev &
//	go run ./examples/vrp-node
//
// It listens on 127.0.0.1:8000/mcp, signs with keysvc's dev key using the
// dev token in keysvc-data/dev-token, and answers each call with a stay
// offer signed as the receipt's offer layer (keysvc /v1/keys/KEY/sign) and
// the transport attestation in _meta["io.github.keysvc/vrp-transport"]:
// together the two attestations of a VRP receipt v1 that any verifier —
// keysvc's /mcp verify_vrp_receipt, `keysvc verify` — checks.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/mcpnode"
	"github.com/keysvc/keysvc/signer"
)

// options are the node's flags.
type options struct {
	listen    string
	keysvc    string
	key       string
	tokenFile string
	token     string // from KEYSVC_TOKEN; never a flag value
	publicURL string
	unsigned  bool
	signOffer bool
}

func main() {
	var o options
	flag.StringVar(&o.listen, "listen", "127.0.0.1:8000", "address of the node's MCP endpoint (served at /mcp)")
	flag.StringVar(&o.keysvc, "keysvc", "http://127.0.0.1:8080", "keysvc's signing API")
	flag.StringVar(&o.key, "key", "dev", "keysvc key that signs")
	flag.StringVar(&o.tokenFile, "token-file", "keysvc-data/dev-token", "file holding a keysvc API token with sign:KEY (KEYSVC_TOKEN wins)")
	flag.StringVar(&o.publicURL, "public-url", "", "the node's public MCP URL, advertised in initialize as _meta.identity.service.mcp")
	flag.BoolVar(&o.unsigned, "unsigned-on-failure", false, "when keysvc cannot sign, return results marked unsigned instead of failing the call")
	flag.BoolVar(&o.signOffer, "sign-offer", true, "sign each offer through keysvc as the receipt's offer layer")
	flag.Parse()
	o.token = os.Getenv("KEYSVC_TOKEN")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", o.listen)
	if err == nil {
		err = run(ctx, o, ln, os.Stdout, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vrp-node:", err)
		os.Exit(1)
	}
}

// run serves the node on ln until ctx ends.
func run(ctx context.Context, o options, ln net.Listener, stdout io.Writer, log *slog.Logger) error {
	defer ln.Close()
	token := strings.TrimSpace(o.token)
	if token == "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return fmt.Errorf("no keysvc token: set KEYSVC_TOKEN or --token-file (%w)", err)
		}
		token = strings.TrimSpace(string(b))
	}
	failure := mcpnode.FailClosed
	if o.unsigned {
		failure = mcpnode.MarkUnsigned
	}
	startCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := mcpnode.New(startCtx, mcpnode.Config{
		URL: o.keysvc, Token: token, Key: o.key, OnFailure: failure, ServiceURL: o.publicURL, SEP2828: true, Logger: log,
		OfferRef: func(_ context.Context, _ *mcp.CallToolRequest, res *mcp.CallToolResult) string {
			return offerRefOf(res)
		},
	})
	if err != nil {
		return err
	}
	defer s.Close()
	n := &node{keysvc: client.New(o.keysvc, token), key: o.key, signOffer: o.signOffer, jwksURI: s.Identity().Keys.JWKSURI,
		issuer: strings.TrimPrefix(s.Identity().ID, "did:web:")}
	srv := mcp.NewServer(&mcp.Implementation{Name: "vrp-node", Title: "VRP example node", Version: "0.1.0"}, &mcp.ServerOptions{
		Instructions: "A VRP node: get_verified_stay_offer returns a signed stay offer; every call carries a keysvc-signed transport attestation in _meta.",
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	n.register(srv)
	s.Install(srv)
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
	fmt.Fprintf(stdout, "vrp-node listening on http://%s/mcp (keysvc key %q, %s)\n", ln.Addr(), o.key, s.Identity().ID)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// node holds the tool's state.
type node struct {
	keysvc    *client.Client
	key       string
	issuer    string
	jwksURI   string
	signOffer bool
}

// offer is a stay offer.
type offer struct {
	OfferRef string `json:"offer_ref"`
	Property string `json:"property"`
	CheckIn  string `json:"check_in"`
	CheckOut string `json:"check_out"`
	Nights   int    `json:"nights"`
	Guests   int    `json:"guests"`
	Price    struct {
		Amount   string `json:"amount"`
		Currency string `json:"currency"`
	} `json:"price"`
}

// nightly is the example's fixed price per night, in öre.
const nightly = 140000

func (n *node) register(srv *mcp.Server) {
	srv.AddTool(&mcp.Tool{
		Name:  "get_verified_stay_offer",
		Title: "Get a verified stay offer",
		Description: "Price a stay and return it as a signed offer. Arguments check_in and check_out (YYYY-MM-DD) and guests " +
			"(1-8); camelCase spellings (checkIn, checkOut) are accepted and hashed as snake_case (VRP MCP profile 1.0).",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"check_in":{"type":"string","format":"date"},"check_out":{"type":"string","format":"date"},` +
			`"checkIn":{"type":"string","format":"date"},"checkOut":{"type":"string","format":"date"},` +
			`"guests":{"type":"integer","minimum":1,"maximum":8}}}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, n.getOffer)
}

// toolError is a tool execution error (isError) with a stable code.
func toolError(code, msg string) *mcp.CallToolResult {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: code + ": " + msg}}, StructuredContent: json.RawMessage(b)}
}

func (n *node) getOffer(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, err := snakeArguments(req.Params.Arguments)
	if err != nil {
		return toolError("invalid_arguments", err.Error()), nil
	}
	var in struct {
		CheckIn  string `json:"check_in"`
		CheckOut string `json:"check_out"`
		Guests   int    `json:"guests"`
	}
	if err := strictjson.Decode(args, &in, strictjson.Limits{}); err != nil {
		return toolError("invalid_arguments", err.Error()), nil
	}
	from, err1 := time.Parse(time.DateOnly, in.CheckIn)
	to, err2 := time.Parse(time.DateOnly, in.CheckOut)
	nights := int(to.Sub(from).Hours() / 24)
	switch {
	case err1 != nil || err2 != nil:
		return toolError("invalid_dates", "check_in and check_out must be dates YYYY-MM-DD"), nil
	case nights < 1 || nights > 30:
		return toolError("invalid_dates", "a stay is 1 to 30 nights"), nil
	case in.Guests < 1 || in.Guests > 8:
		return toolError("invalid_guests", "guests must be 1 to 8"), nil
	}
	o := offer{OfferRef: fmt.Sprintf("offer:%s:%s/%s", n.issuer, in.CheckIn, to.Format("02")), Property: n.issuer,
		CheckIn: in.CheckIn, CheckOut: in.CheckOut, Nights: nights, Guests: in.Guests}
	total := nights * nightly
	o.Price.Amount, o.Price.Currency = fmt.Sprintf("%d.%02d", total/100, total%100), "SEK"
	out := map[string]any{"offer": o}
	if n.signOffer {
		now := time.Now().UTC().Truncate(time.Second)
		res, err := n.keysvc.Sign(ctx, n.key, o, "JWT")
		if err != nil {
			// No offer signature, no verified offer: the call fails.
			return nil, fmt.Errorf("offer not signed: keysvc unavailable")
		}
		out["offer_attestation"] = client.Attestation{Layer: "offer", Source: n.jwksURI, Signature: res.JWS, Ref: o.OfferRef,
			ValidFrom: signer.FormatInstant(now), ValidUntil: signer.FormatInstant(now.Add(24 * time.Hour))}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	text := fmt.Sprintf("%s: %d nights for %d guests, %s %s (%s)", o.Property, o.Nights, o.Guests, o.Price.Amount, o.Price.Currency, o.OfferRef)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(b)}, nil
}

// snakeArguments renames the top-level argument keys to snake_case, as
// the VRP MCP profile hashes them (two keys collapsing to one name are
// refused by signer.NormalizeArguments, which the middleware applied
// already before the tool ran).
func snakeArguments(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return []byte("{}"), nil
	}
	canon, err := signer.NormalizeArguments(raw)
	if err != nil {
		return nil, errors.New("arguments must be a JSON object with distinct snake_case keys")
	}
	return canon, nil
}

// offerRefOf reads offer.offer_ref back from the tool's structured result,
// so the transport attestation binds to the offer attestation (profile 1.0
// "Offer binding").
func offerRefOf(res *mcp.CallToolResult) string {
	raw, ok := res.StructuredContent.(json.RawMessage)
	if !ok {
		return ""
	}
	var out struct {
		Offer struct {
			OfferRef string `json:"offer_ref"`
		} `json:"offer"`
	}
	if json.Unmarshal(raw, &out) != nil {
		return ""
	}
	return out.Offer.OfferRef
}
