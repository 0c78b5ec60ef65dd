package mcpnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/mcpnode"
)

// BenchmarkToolCall measures one tools/call end to end on loopback — a
// go-sdk client, the node's Streamable HTTP handler (stateless, JSON
// responses, as examples/vrp-node serves), the tool — bare and through the
// middleware (which adds one keysvc mcp-transport round trip, batched under
// load), at 1 and 16 concurrent clients. keysvc runs in the same process
// (SQLite, the deterministic Ed25519 backend). Besides ns/op it reports
// the latency percentiles p50-µs and p99-µs of the calls.
//
//	go test -run '^$' -bench ToolCall -benchtime 2000x ./mcpnode/
func BenchmarkToolCall(b *testing.B) {
	ks := startKeysvc(b)
	for _, clients := range []int{1, 16} {
		for _, signed := range []bool{false, true} {
			name := "bare"
			if signed {
				name = "signed"
			}
			b.Run(fmt.Sprintf("%s/clients=%d", name, clients), func(b *testing.B) {
				var s *mcpnode.Signer
				if signed {
					s = newSigner(b, ks, mcpnode.Config{URL: ks.URL})
				}
				url := benchNode(b, s)
				sessions := make([]*mcp.ClientSession, clients)
				for i := range sessions {
					c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
					cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, DisableStandaloneSSE: true},
						&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
					if err != nil {
						b.Fatal(err)
					}
					defer cs.Close()
					sessions[i] = cs
				}
				params := &mcp.CallToolParams{Name: "get_verified_stay_offer", Arguments: json.RawMessage(camelArgs)}
				for _, cs := range sessions { // warm every connection
					if _, err := cs.CallTool(context.Background(), params); err != nil {
						b.Fatal(err)
					}
				}
				lat := make([]time.Duration, b.N)
				var next atomic.Int64
				var failed atomic.Pointer[error]
				var wg sync.WaitGroup
				b.ResetTimer()
				for _, cs := range sessions {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1) - 1
							if i >= int64(b.N) {
								return
							}
							start := time.Now()
							res, err := cs.CallTool(context.Background(), params)
							lat[i] = time.Since(start)
							if err == nil && signed {
								if tr, ok := res.Meta[mcpnode.MetaKey].(map[string]any); !ok || tr["status"] != mcpnode.StatusSigned {
									err = fmt.Errorf("unsigned result %v", res.Meta)
								}
							}
							if err != nil {
								failed.CompareAndSwap(nil, &err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if e := failed.Load(); e != nil {
					b.Fatal(*e)
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), "p99-µs")
				if s != nil {
					st := s.Stats()
					b.ReportMetric(float64(st.Signed)/float64(max(1, st.Requests)), "calls/keysvc-req")
				}
			})
		}
	}
}

// benchNode serves the test tools over Streamable HTTP (stateless, JSON).
func benchNode(b *testing.B, s *mcpnode.Signer) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "villa", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "get_verified_stay_offer", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return offerResult(), nil })
	if s != nil {
		s.Install(srv)
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	b.Cleanup(hs.Close)
	return hs.URL
}
