package signer

import (
	"crypto/ed25519"
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
