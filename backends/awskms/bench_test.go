package awskms_test

import (
	"crypto/sha256"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/keysvc/keysvc/backends/awskms"
	"github.com/keysvc/keysvc/internal/kmstest"
	"github.com/keysvc/keysvc/signer"
)

// BenchmarkKMSSign compares, in one run, the emulator's raw Sign rate (the
// SDK client calling Sign directly) with compact JWS signatures through
// the backend (concurrency limit, DER to r||s, verification of every
// signature) — for ES256 on local-kms and Ed25519 on the test server.
// 16 goroutines per core keep requests in flight; the metric is signs/s.
//
//	go test -run '^$' -bench KMSSign ./backends/awskms/
func BenchmarkKMSSign(b *testing.B) {
	payload := []byte(`{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05","price":{"amount":"1450.00","currency":"SEK"}}`)
	run := func(b *testing.B, sign func() error) {
		b.SetParallelism(16)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := sign(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signs/s")
	}

	b.Run("local-kms/ES256", func(b *testing.B) {
		lk := kmstest.StartLocalKMS(b)
		be := newBackend(b, lk.Endpoint, lk.Region)
		h, _, js := createSigner(b, be, kid1, signer.AlgES256)
		r, _ := awskms.ParseRef(h.Ref)
		digest := sha256.Sum256(payload)
		b.Run("raw-sdk-Sign", func(b *testing.B) {
			run(b, func() error {
				_, err := be.Client().Sign(ctx, &kms.SignInput{KeyId: aws.String(r.KeyID), Message: digest[:],
					MessageType: types.MessageTypeDigest, SigningAlgorithm: types.SigningAlgorithmSpecEcdsaSha256})
				return err
			})
		})
		b.Run("backend-JWS", func(b *testing.B) {
			run(b, func() error { _, err := js.Sign(payload, "JWT"); return err })
		})
	})

	b.Run("kmstest/EdDSA", func(b *testing.B) {
		s := startServer(b)
		be := newBackend(b, s.URL, s.Region())
		h, _, js := createSigner(b, be, kid1, signer.AlgEdDSA)
		r, _ := awskms.ParseRef(h.Ref)
		b.Run("raw-sdk-Sign", func(b *testing.B) {
			run(b, func() error {
				_, err := be.Client().Sign(ctx, &kms.SignInput{KeyId: aws.String(r.KeyID), Message: payload,
					MessageType: types.MessageTypeRaw, SigningAlgorithm: types.SigningAlgorithmSpecEd25519Sha512})
				return err
			})
		})
		b.Run("backend-JWS", func(b *testing.B) {
			run(b, func() error { _, err := js.Sign(payload, "JWT"); return err })
		})
	})
}
