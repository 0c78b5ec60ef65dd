package api_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
func benchHandler(b *testing.B) (http.Handler, string) { return benchHandlerLease(b, 0, 1) }

// benchHandlerLease is benchHandler with a propagation bound: lead > 0
// runs the signing lease (ADR 0014) with its freshness loop probing the
// store every lease/5, as serve does; 0 is in-process mode (no lease).
// versions > 1 rotates the key versions-1 times, so that its JWKS holds
// that many keys (VRP K2: retired keys stay published).
func benchHandlerLease(b *testing.B, lead time.Duration, versions int) (http.Handler, string) {
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
	mgr := rotation.New(rotation.Config{Store: st, Backends: []backends.Backend{soft}, Logger: log, PropagationBound: lead})
	if _, _, err := mgr.CreateKey(ctx, rotation.CreateKeyRequest{Name: "bench", Issuer: "villaakerlyckan.se"}, rotation.Actor{Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	for range versions - 1 {
		if _, _, err := mgr.Rotate(ctx, "bench", rotation.Actor{Name: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	if lead > 0 {
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { mgr.RunFreshness(fctx, 5*time.Second); close(done) }()
		b.Cleanup(func() { cancel(); <-done })
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

	post := func(b *testing.B, path, body string) { benchPost(b, client, srv.URL+path, secret, body) }
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

// benchOffer is bench/sidebyside's 258-byte offer, RFC 8785 already.
const benchOffer = `{"check_in":"2026-09-02","check_out":"2026-09-05","currency":"SEK","guests":2,"nights":3,"offer_id":"offer:villaakerlyckan.se:2026-09-02/05","price":"3600.00","property":"villaakerlyckan.se","room":"sjostugan","terms":"https://villaakerlyckan.se/terms/2026"}`

// benchBodies are the request bodies of the benchmarks: typical tool-call
// shapes (a VRP offer query).
var benchBodies = func() map[string]string {
	signItems, canonItems, transportItems := make([]string, 100), make([]string, 100), make([]string, 100)
	for i := range signItems {
		signItems[i] = `{"payload":{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05","i":` + strconv.Itoa(i) + `}}`
		canonItems[i] = `{"payload":{"i":` + strconv.Itoa(i) + `,"offer_id":"offer:villaakerlyckan.se:2026-09-02/05"}}`
		transportItems[i] = `{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":` + strconv.Itoa(i%8+1) + `}}`
	}
	return map[string]string{
		"sign":          `{"payload":{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05"}}`,
		"sign-offer":    `{"payload":` + benchOffer + `}`,
		"mcp-transport": `{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}}`,
		"sign:batch":    `{"items":[` + strings.Join(signItems, ",") + `]}`,
		// The same payloads as a careful client sends them: RFC 8785 already.
		"sign:batch-canonical": `{"items":[` + strings.Join(canonItems, ",") + `]}`,
		"mcp-transport:batch":  `{"items":[` + strings.Join(transportItems, ",") + `]}`,
		// bench/sidebyside's batch: the offer, 100 times.
		"sign:batch-offer": `{"items":[` + strings.Repeat(`{"payload":`+benchOffer+`},`, 99) + `{"payload":` + benchOffer + `}]}`,
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
		defer reportCPU(b, processCPU())
		for b.Loop() {
			_ = ed25519.Sign(key, input)
		}
	})
	// The signing floor of bench/sidebyside in process: read the body,
	// Ed25519 over it, a JSON answer — what net/http and a bare handler
	// cost with httptest's request and recorder, before keysvc does
	// anything; compare with sign-offer (the same payload through keysvc).
	b.Run("floor_sign", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b, processCPU())
		floor := floorSign(key)
		for b.Loop() {
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(benchOffer))
			rec := httptest.NewRecorder()
			floor.ServeHTTP(rec, req)
		}
	})
	// Raw Ed25519 over the offer's own JWS signing input (header.payload,
	// RFC 7515 §5.1), as bench/sidebyside measures it: the floor of one
	// sign-offer or sign:batch-offer signature.
	rec := httptest.NewRecorder()
	req := benchRequest("sign", benchBodies["sign-offer"], secret)
	h.ServeHTTP(rec, req)
	var offer struct{ JWS string }
	if err := json.Unmarshal(rec.Body.Bytes(), &offer); err != nil || strings.Count(offer.JWS, ".") != 2 {
		b.Fatalf("sign-offer: %d %s", rec.Code, rec.Body)
	}
	offerInput := []byte(offer.JWS[:strings.LastIndexByte(offer.JWS, '.')])
	b.Run("raw_ed25519_offer", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b, processCPU())
		for b.Loop() {
			_ = ed25519.Sign(key, offerInput)
		}
	})
	for _, name := range []string{"sign", "sign-offer", "mcp-transport", "sign:batch", "sign:batch-canonical", "sign:batch-offer", "mcp-transport:batch"} {
		body := benchBodies[name]
		route, _ := strings.CutSuffix(name, "-canonical")
		route, _ = strings.CutSuffix(route, "-offer")
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b, processCPU())
			for b.Loop() {
				req := benchRequest(route, body, secret)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", name, rec.Code, rec.Body)
				}
			}
		})
	}
	// The JWKS of a key with one version, and of one rotated 19 times (20
	// keys, ~6.5 KiB: a key's JWKS after years of rotations, VRP K2), each
	// as a 200 and as the 304 of a revalidation.
	h20, _ := benchHandlerLease(b, 0, 20)
	for _, jwks := range []struct {
		name string
		h    http.Handler
	}{{"jwks", h}, {"jwks_20keys", h20}} {
		for _, etag := range []bool{false, true} {
			benchJWKS(b, jwks.name, jwks.h, etag)
		}
	}
}

// benchJWKS is one JWKS sub-benchmark of BenchmarkHandler: GET of the
// key's JWKS, with If-None-Match of its current ETag when etag (the 304
// of a revalidation, named name_304).
func benchJWKS(b *testing.B, name string, h http.Handler, etag bool) {
	var inm string
	want := http.StatusOK
	if etag {
		name, want = name+"_304", http.StatusNotModified
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
			if rec.Code != want {
				b.Fatalf("%s: %d, want %d", name, rec.Code, want)
			}
		}
	})
}

// floorSign is bench/sidebyside's signing floor (keysvc bench-floor
// --sign) as a handler: read the body, Ed25519 over it, a JSON answer.
func floorSign(key ed25519.PrivateKey) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header()["Content-Type"] = []string{"application/json"}
		out := append(make([]byte, 0, 110), `{"signature":"`...)
		out = base64.RawURLEncoding.AppendEncode(out, ed25519.Sign(key, in))
		_, _ = w.Write(append(out, '"', '}'))
	})
}

// BenchmarkHandlerCold is BenchmarkHandler's floor_sign and sign-offer
// with the caches evicted before every request (a 16 MiB sweep, outside
// the timer): what a request costs when its core ran something else
// since the last one, as at one connection, where the client, the
// kernel and the wake-ups run between requests. The warm/cold difference
// is the cost of the request path's footprint, code and data; cachegrind
// counts it in cache lines, the same on every run (docs/performance.md,
// session 30):
//
//	GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off GOMAXPROCS=1 valgrind --tool=cachegrind \
//	  --cache-sim=yes --LL=8388608,16,64 ./api.test -test.run '^$' \
//	  -test.bench 'HandlerCold/sign-offer/cold$' -test.benchtime 100x
func BenchmarkHandlerCold(b *testing.B) {
	h, secret := benchHandler(b)
	floor := floorSign(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize)))
	sweep := make([]byte, 16<<20)
	for _, cold := range []bool{false, true} {
		mode := map[bool]string{false: "warm", true: "cold"}[cold]
		// evict touches one byte of every 64-byte line of sweep, outside
		// the timer, when the case is cold.
		evict := func(b *testing.B) {
			if !cold {
				return
			}
			b.StopTimer()
			for i := 0; i < len(sweep); i += 64 {
				sweep[i]++
			}
			b.StartTimer()
		}
		b.Run("floor_sign/"+mode, func(b *testing.B) {
			for b.Loop() {
				evict(b)
				floor.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", strings.NewReader(benchOffer)))
			}
		})
		b.Run("sign-offer/"+mode, func(b *testing.B) {
			for b.Loop() {
				evict(b)
				req := benchRequest("sign", benchBodies["sign-offer"], secret)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("sign-offer: %d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkLease is the cost of the signing lease (ADR 0014), in one run:
// the same requests against a server without a lease (in-process mode)
// and one with the lease of serve's defaults (L = 2 s: SignerFor checks the
// lease on every signature, and a freshness probe reads the store every
// 300 ms), in process and over loopback HTTP, the two sides back to back
// for each route. Compare signs/s of lease=off and lease=on:
//
//	go test -run '^$' -bench Lease -benchtime 2s -count 3 ./api/
func BenchmarkLease(b *testing.B) {
	type side struct {
		name   string
		h      http.Handler
		secret string
		srv    *httptest.Server
	}
	var sides []side
	for _, lead := range []time.Duration{0, 2 * time.Second} {
		h, secret := benchHandlerLease(b, lead, 1)
		srv := httptest.NewServer(h)
		b.Cleanup(srv.Close)
		sides = append(sides, side{map[bool]string{false: "lease=off", true: "lease=on"}[lead > 0], h, secret, srv})
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	for _, route := range []string{"sign", "mcp-transport"} {
		body := benchBodies[route]
		for _, sd := range sides {
			b.Run("handler/"+route+"/"+sd.name, func(b *testing.B) {
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						req := benchRequest(route, body, sd.secret)
						rec := httptest.NewRecorder()
						sd.h.ServeHTTP(rec, req)
						if rec.Code != http.StatusOK {
							b.Fatalf("%s: %d %s", route, rec.Code, rec.Body)
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "signs/s")
			})
		}
		for _, sd := range sides {
			b.Run("http/"+route+"/"+sd.name, func(b *testing.B) {
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						benchPost(b, client, sd.srv.URL+"/v1/keys/bench/"+route, sd.secret, body)
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "signs/s")
			})
		}
	}
}

// processCPU is the CPU time of this process so far (user + system, every
// thread, the garbage collector included).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process CPU time per operation since start as
// "cpu-ns/op" (and per signature for the batches of 100): on a machine
// shared with other work it stays close to the cost of an operation when
// wall-clock ns/op does not.
func reportCPU(b *testing.B, start time.Duration) {
	per := float64(processCPU()-start) / float64(b.N)
	b.ReportMetric(per, "cpu-ns/op")
	if strings.Contains(b.Name(), ":batch") {
		b.ReportMetric(per/100, "cpu-ns/sig")
	}
}

// BenchmarkBatchWorkers is one connection's batch of 100, in process,
// signed alternately on one goroutine and with the default (one goroutine
// per core, ADR 0032), request by request, so that both see the same
// machine: seq-ms and par-ms are their mean latencies, par/seq the ratio.
//
//	go test -run '^$' -bench BatchWorkers -benchtime 200x ./api/
func BenchmarkBatchWorkers(b *testing.B) {
	h, secret := benchHandler(b)
	parallel := api.SetBatchWorkers(func(int) int { return 1 }) // restores the default
	sequential := func() { api.SetBatchWorkers(func(int) int { return 1 }) }
	parallel()
	for _, route := range []string{"sign:batch", "mcp-transport:batch"} {
		body := benchBodies[route]
		b.Run(route, func(b *testing.B) {
			var took [2]time.Duration
			var n [2]int
			i := 0
			for b.Loop() {
				mode := i % 2
				i++
				if mode == 0 {
					sequential()
				}
				req := benchRequest(route, body, secret)
				rec := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(rec, req)
				took[mode] += time.Since(start)
				n[mode]++
				parallel()
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", route, rec.Code, rec.Body)
				}
			}
			if n[0] > 0 && n[1] > 0 {
				seq, par := took[0].Seconds()/float64(n[0]), took[1].Seconds()/float64(n[1])
				b.ReportMetric(seq*1e3, "seq-ms")
				b.ReportMetric(par*1e3, "par-ms")
				b.ReportMetric(par/seq, "par/seq")
			}
		})
	}
}

// benchRequest is an in-process POST of body to the bench key's route
// ("sign", "sign:batch", …) with the bearer token secret.
func benchRequest(route, body, secret string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/v1/keys/bench/"+route, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// benchPost POSTs a JSON body with the bearer token and fails b unless the
// answer is 200; the body is read to the end so the connection is reused.
func benchPost(b *testing.B, client *http.Client, url, secret, body string) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
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

// BenchmarkBatchUnderLoad is 16 connections' batches of 100 (canonical
// items) at once, in process: server CPU per signature with the items of
// each batch signed on one goroutine (seq) and with the default policy
// (ADR 0032). Under load every core is busy with other batches, so a split
// only adds hand-offs.
//
//	go test -run '^$' -bench BatchUnderLoad -benchtime 300x ./api/
func BenchmarkBatchUnderLoad(b *testing.B) {
	h, secret := benchHandler(b)
	body := benchBodies["sign:batch-canonical"]
	for _, mode := range []string{"seq", "default"} {
		b.Run("sign:batch-"+mode, func(b *testing.B) {
			if mode == "seq" {
				defer api.SetBatchWorkers(func(int) int { return 1 })()
			}
			b.SetParallelism(8) // 16 goroutines on 2 cores
			defer reportCPU(b, processCPU())
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := benchRequest("sign:batch", body, secret)
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Errorf("%d %s", rec.Code, rec.Body)
						return
					}
				}
			})
		})
	}
}
