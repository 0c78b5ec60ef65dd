package signer

import (
	"crypto"
	"crypto/ed25519"
	"syscall"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
)

var benchPayload = []byte(`{"arguments_sha256":"2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050","issuer":"villaakerlyckan.se","offer_ref":"offer:villaakerlyckan.se:2026-09-02/05","served_at":"2026-06-24T11:40:00Z","session_id":"mcp-sess-abc","tool":"get_verified_stay_offer","type":"vrp.mcp.transport.1","vrp_mcp_profile_version":"1.0"}`)

// BenchmarkSign reports, in one run, raw ed25519.Sign over the JWS signing
// input, JWSSigner.Sign over the same payload, and a full transport
// assertion (canonicalize arguments + assertion, then sign). Compare the
// signs/s metrics: go test -bench Sign -benchtime 2s ./signer/
func BenchmarkSign(b *testing.B) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	s, err := NewJWSSigner("villaakerlyckan.se-2026-05-18-01", AlgEdDSA, key)
	if err != nil {
		b.Fatal(err)
	}
	jws, _ := s.Sign(benchPayload, TransportJWSTyp)
	input := []byte(jws[:len(jws)-87]) // header.payload, the exact signing input
	report := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "signs/s")
	}
	b.Run("raw_ed25519", func(b *testing.B) {
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			_ = ed25519.Sign(key, input)
		}
		report(b, start)
	})
	b.Run("jws", func(b *testing.B) {
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			if _, err := s.Sign(benchPayload, TransportJWSTyp); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
	args := []byte(`{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}`)
	served := time.Date(2026, 6, 24, 11, 40, 0, 0, time.UTC)
	b.Run("transport_assertion", func(b *testing.B) {
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			_, canon, err := BuildTransportAssertion(TransportCall{Tool: "get_verified_stay_offer", Arguments: args, ServedAt: served, Issuer: "villaakerlyckan.se"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Sign(canon, TransportJWSTyp); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
}

// benchArguments are typical tools/call arguments: a VRP offer query, the
// same in snake_case (no renaming needed), and a larger nested one.
var benchArguments = []struct{ name, json string }{
	{"offer_query_camel", `{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}`},
	{"offer_query_snake", `{"check_in":"2026-09-02","check_out":"2026-09-05","guests":2}`},
	{"search_nested_1k", `{"destination":{"country":"SE","region":"Västra Götaland","near":{"lat":57.7089,"lon":11.9746,"radiusKm":25}},` +
		`"dates":{"checkIn":"2026-09-02","checkOut":"2026-09-05","flexibleDays":2},"party":{"adults":2,"children":[7,11],"pets":false},` +
		`"amenities":["sauna","lake_view","wifi","parking","ev_charger","fireplace","dishwasher","boat"],"priceMax":{"amount":2450.5,"currency":"SEK"},` +
		`"sort":"price_asc","page":{"size":20,"cursor":"eyJvZmZzZXQiOjQwLCJzZWVkIjoiYjY4ZjAxIn0"},"locale":"sv-SE","sessionHints":{"returning":true,"device":"mobile"}}`},
}

// BenchmarkArgumentsSHA256 measures arguments_sha256 of typical tool-call
// arguments: strict I-JSON check, snake_case renaming, RFC 8785, SHA-256.
//
//	go test -run '^$' -bench ArgumentsSHA256 ./signer/
func BenchmarkArgumentsSHA256(b *testing.B) {
	for _, a := range benchArguments {
		raw := []byte(a.json)
		b.Run(a.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, _, err := ArgumentsSHA256(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCanonicalize compares keysvc's RFC 8785 (strict check plus
// jsontext's formatter) with github.com/gowebpki/jcs, which keysvc used
// before (ADR 0010), on the same inputs.
func BenchmarkCanonicalize(b *testing.B) {
	for _, a := range benchArguments {
		raw := []byte(a.json)
		b.Run("keysvc/"+a.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := Canonicalize(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("gowebpki_jcs/"+a.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := jcs.Transform(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaimedLayer is the layer check /sign adds to every signature
// (ADR 0013): the top-level member names of the payload's RFC 8785 bytes.
func BenchmarkClaimedLayer(b *testing.B) {
	offer := []byte(`{"check_in":"2026-09-02","check_out":"2026-09-05","guests":2,"offer_id":"offer:villaakerlyckan.se:2026-09-02/05","price":{"amount":"1200.00","currency":"SEK"},"property":"villaakerlyckan.se"}`)
	b.SetBytes(int64(len(offer)))
	b.ReportAllocs()
	for b.Loop() {
		if ClaimedLayer(offer) != "" {
			b.Fatal("an offer claims a layer")
		}
	}
}

// BenchmarkEd25519Input separates what a keysvc signature costs beyond a
// bare ed25519.Sign (issue 18): the length of the signing input (a
// transport JWS signs 409 bytes, base64url of header and payload, where a
// peer signing the payload itself signs 258), the crypto.Signer interface
// call, and the JWS assembly (base64url, header, result string). Compare
// ns/op of the sub-benchmarks in one run, interleaved with -count:
//
//	go test -run '^$' -bench Ed25519Input -count 3 ./signer/
func BenchmarkEd25519Input(b *testing.B) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	s, err := NewJWSSigner("villaakerlyckan.se-2026-05-18-01", AlgEdDSA, key)
	if err != nil {
		b.Fatal(err)
	}
	// A transport assertion without offer_ref and session_id.
	payload := []byte(`{"arguments_sha256":"2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050","issuer":"villaakerlyckan.se","served_at":"2026-06-24T11:40:00Z","tool":"get_verified_stay_offer","type":"vrp.mcp.transport.1","vrp_mcp_profile_version":"1.0"}`)
	jws, _ := s.Sign(payload, TransportJWSTyp)
	input := []byte(jws[:len(jws)-87])
	b.Logf("payload %d bytes, JWS signing input %d bytes", len(payload), len(input))
	var cs crypto.Signer = key
	b.Run("raw_ed25519/payload", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b, processCPU())
		for b.Loop() {
			_ = ed25519.Sign(key, payload)
		}
	})
	b.Run("raw_ed25519/signing_input", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b, processCPU())
		for b.Loop() {
			_ = ed25519.Sign(key, input)
		}
	})
	b.Run("crypto_signer/signing_input", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b, processCPU())
		for b.Loop() {
			if _, err := cs.Sign(nil, input, crypto.Hash(0)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jws/payload", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b, processCPU())
		for b.Loop() {
			if _, err := s.Sign(payload, TransportJWSTyp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// processCPU is the CPU time of this process so far (user + system, every
// thread, the garbage collector included).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process CPU time per operation since start as
// "cpu-ns/op": on a machine shared with other work it stays close to the
// cost of an operation when wall-clock ns/op does not.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
}
