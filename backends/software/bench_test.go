package software_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"testing"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/signer"
)

// BenchmarkSoftwareJWS measures the software backend's compact JWS path
// (signer.JWSSigner over the unsealed key, cached header) beside raw
// ed25519.Sign over the same signing input, for EdDSA and ES256. The key
// is unsealed once, when the signer loads — never per signature.
//
//	go test -run '^$' -bench SoftwareJWS ./backends/software/
func BenchmarkSoftwareJWS(b *testing.B) {
	be, err := software.New(bytes.Repeat([]byte{7}, software.KEKSize))
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"arguments_sha256":"2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050","issuer":"villaakerlyckan.se","served_at":"2026-06-24T11:40:00Z","tool":"get_verified_stay_offer","type":"vrp.mcp.transport.1","vrp_mcp_profile_version":"1.0"}`)
	for _, alg := range []string{signer.AlgEdDSA, signer.AlgES256} {
		kid := "villaakerlyckan.se-2026-05-18-" + alg
		h, err := be.CreateKey(context.Background(), backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: alg})
		if err != nil {
			b.Fatal(err)
		}
		s, err := be.Signer(context.Background(), kid, h)
		if err != nil {
			b.Fatal(err)
		}
		j, err := signer.NewJWSSigner(kid, alg, s)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(alg+"/jws", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := j.Sign(payload, signer.TransportJWSTyp); err != nil {
					b.Fatal(err)
				}
			}
		})
		if k, ok := s.(ed25519.PrivateKey); ok {
			jws, _ := j.Sign(payload, signer.TransportJWSTyp)
			input := []byte(jws[:len(jws)-87]) // header.payload
			b.Run(alg+"/raw_ed25519", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_ = ed25519.Sign(k, input)
				}
			})
		}
	}
}
