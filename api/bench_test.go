package api_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// BenchmarkHTTPSign measures, in one run, raw ed25519.Sign beside the full
// HTTP signing path (keep-alive loopback client → echo → strict decoding →
// RFC 8785 → JWS → JSON response) with b.RunParallel on GOMAXPROCS
// goroutines. Compare the signs/s metrics:
//
//	go test -run '^$' -bench HTTPSign -benchtime 3s ./api/
//
// benchHandler builds a server with one software key "bench" and returns
// its handler and a token with sign:*.
func benchHandler(b *testing.B) (http.Handler, string) {
	ctx := context.Background()
	cfg := store.Config{SQLitePath: filepath.Join(b.TempDir(), "k.db")}
	if _, err := store.Migrate(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	soft, err := software.New(bytes.Repeat([]byte{7}, software.KEKSize))
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr := rotation.New(rotation.Config{Store: st, Backends: []backends.Backend{soft}, Logger: log})
	if _, _, err := mgr.CreateKey(ctx, rotation.CreateKeyRequest{Name: "bench", Issuer: "villaakerlyckan.se"}, rotation.Actor{Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	secret, rec, err := api.NewToken("bench", []string{api.ScopeSignAll}, 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.InTx(ctx, func(tx store.Tx) error { return tx.InsertToken(ctx, rec) }); err != nil {
		b.Fatal(err)
	}
	auth := api.NewAuthenticator(st, log)
	if err := auth.Refresh(ctx); err != nil {
		b.Fatal(err)
	}
	return api.New(api.Config{Manager: mgr, Auth: auth, Store: st, Logger: log}).Handler(), secret
}

func BenchmarkHTTPSign(b *testing.B) {
	h, secret := benchHandler(b)
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}

	post := func(b *testing.B, path, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	rate := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "signs/s")
	}
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	input := []byte("eyJhbGciOiJFZERTQSIsImtpZCI6InZpbGxhYWtlcmx5Y2thbi5zZS0yMDI2LTExLTI5LTAxIn0.eyJvZmZlcl9pZCI6Im9mZmVyOnZpbGxhYWtlcmx5Y2thbi5zZToyMDI2LTA5LTAyLzA1In0")
	b.Run("raw_ed25519", func(b *testing.B) {
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = ed25519.Sign(key, input)
			}
		})
		rate(b, start)
	})
	items := make([]string, 100)
	for i := range items {
		items[i] = `{"payload":{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05","i":` + strconv.Itoa(i) + `}}`
	}
	batch := `{"items":[` + strings.Join(items, ",") + `]}`
	b.Run("http_sign_batch100", func(b *testing.B) {
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				post(b, "/v1/keys/bench/sign:batch", batch)
			}
		})
		b.ReportMetric(float64(100*b.N)/time.Since(start).Seconds(), "signs/s")
	})
	for _, c := range []struct{ name, path, body string }{
		{"http_sign", "/v1/keys/bench/sign", `{"payload":{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05"}}`},
		{"http_mcp_transport", "/v1/keys/bench/mcp-transport", `{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}}`},
	} {
		for _, par := range []int{1, 8} {
			b.Run(c.name+"/parallelism="+map[int]string{1: "1xGOMAXPROCS", 8: "8xGOMAXPROCS"}[par], func(b *testing.B) {
				b.SetParallelism(par)
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						post(b, c.path, c.body)
					}
				})
				rate(b, start)
			})
		}
	}
}

// benchBodies are the request bodies of the benchmarks: typical tool-call
// shapes (a VRP offer query).
var benchBodies = func() map[string]string {
	signItems, transportItems := make([]string, 100), make([]string, 100)
	for i := range signItems {
		signItems[i] = `{"payload":{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05","i":` + strconv.Itoa(i) + `}}`
		transportItems[i] = `{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":` + strconv.Itoa(i%8+1) + `}}`
	}
	return map[string]string{
		"sign":                `{"payload":{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05"}}`,
		"mcp-transport":       `{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}}`,
		"sign:batch":          `{"items":[` + strings.Join(signItems, ",") + `]}`,
		"mcp-transport:batch": `{"items":[` + strings.Join(transportItems, ",") + `]}`,
	}
}()

// BenchmarkHandler measures the server's own work per request — routing,
// authentication, strict decoding, RFC 8785, JWS, response encoding —
// by calling the handler in process, without sockets or an HTTP client;
// "raw_ed25519" is the floor in the same run. Profile with
//
//	go test -run '^$' -bench Handler -cpuprofile cpu.out ./api/
func BenchmarkHandler(b *testing.B) {
	h, secret := benchHandler(b)
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	input := bytes.Repeat([]byte{'a'}, 300)
	b.Run("raw_ed25519", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = ed25519.Sign(key, input)
		}
	})
	for _, name := range []string{"sign", "mcp-transport", "sign:batch", "mcp-transport:batch"} {
		body := benchBodies[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/keys/bench/"+name, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+secret)
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", name, rec.Code, rec.Body)
				}
			}
		})
	}
	for _, etag := range []bool{false, true} {
		name := "jwks"
		var inm string
		if etag {
			name = "jwks_304"
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/keys/bench/jwks.json", nil))
			inm = rec.Header().Get("ETag")
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/v1/keys/bench/jwks.json", nil)
				if inm != "" {
					req.Header.Set("If-None-Match", inm)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK && rec.Code != http.StatusNotModified {
					b.Fatalf("%d", rec.Code)
				}
			}
		})
	}
}
