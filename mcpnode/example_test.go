package mcpnode_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/mcpnode"
)

type stay struct {
	CheckIn  string `json:"check_in"`
	CheckOut string `json:"check_out"`
	Guests   int    `json:"guests"`
}

type stayOffer struct {
	OfferRef string `json:"offer_ref"`
	Price    string `json:"price"`
}

func getOffer(ctx context.Context, req *mcp.CallToolRequest, in stay) (*mcp.CallToolResult, stayOffer, error) {
	return nil, stayOffer{OfferRef: "offer:villaakerlyckan.se:" + in.CheckIn, Price: "4200.00 SEK"}, nil
}

// The README's "Sign every tool call of your MCP server", compiled.
func ExampleSigner_Install() {
	ctx := context.Background()
	// --- README snippet: begin ---
	srv := mcp.NewServer(&mcp.Implementation{Name: "villa", Version: "1.0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "get_verified_stay_offer"}, getOffer) // your tools, unchanged

	signer, err := mcpnode.New(ctx, mcpnode.Config{
		URL:   "http://127.0.0.1:8080",   // keysvc's signing API
		Token: os.Getenv("KEYSVC_TOKEN"), // scope sign:villa:transport
		Key:   "villa",
	})
	if err != nil {
		log.Fatal(err) // keysvc unreachable or no such key: do not serve unsigned
	}
	defer signer.Close()
	signer.Install(srv) // every tools/call result now carries _meta["io.github.keysvc/vrp-transport"]

	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	log.Fatal(http.ListenAndServe("127.0.0.1:8000", handler))
	// --- README snippet: end ---
}
