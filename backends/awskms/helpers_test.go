package awskms_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/awskms"
	"github.com/keysvc/keysvc/internal/kmstest"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/signer"
)

var ctx = context.Background()

// testCreds are the dummy static credentials every test client uses; the
// test KMS server verifies SigV4 signatures made with them.
var testCreds = aws.Credentials{AccessKeyID: "AKIDKEYSVCTEST", SecretAccessKey: "keysvc-test-secret", Source: "keysvc-test"}

func staticCreds(c aws.Credentials) aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return c, nil })
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newBackend returns a backend for endpoint with test credentials and fast
// retries; mod adjusts the config.
func newBackend(t testing.TB, endpoint, region string, mod ...func(*awskms.Config)) *awskms.Backend {
	t.Helper()
	cfg := awskms.Config{
		Region: region, Endpoint: endpoint, Credentials: staticCreds(testCreds),
		BaseBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: quietLogger(),
	}
	for _, m := range mod {
		m(&cfg)
	}
	b, err := awskms.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// startServer starts the test KMS server (verifying SigV4 with testCreds).
func startServer(t testing.TB) *kmstest.Server {
	t.Helper()
	s, err := kmstest.Start(kmstest.Config{Credentials: &testCreds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// createSigner creates a key version in b and loads its signer.
func createSigner(t testing.TB, b *awskms.Backend, kid, alg string) (backends.Handle, crypto.Signer, *signer.JWSSigner) {
	t.Helper()
	h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: alg})
	if err != nil {
		t.Fatalf("CreateKey %s: %v", alg, err)
	}
	cs, err := b.Signer(ctx, kid, h)
	if err != nil {
		t.Fatalf("Signer: %v", err)
	}
	js, err := signer.NewJWSSigner(kid, alg, cs)
	if err != nil {
		t.Fatal(err)
	}
	return h, cs, js
}

// verifyWithJWK verifies a compact JWS with go-jose, using only the public
// JWK keysvc would publish for the version.
func verifyWithJWK(t testing.TB, jws string, pub crypto.PublicKey, kid, alg string) []byte {
	t.Helper()
	raw, err := jwksserve.PublicJWK(pub, kid, alg)
	if err != nil {
		t.Fatal(err)
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	obj, err := jose.ParseSignedCompact(jws, []jose.SignatureAlgorithm{jose.SignatureAlgorithm(alg)})
	if err != nil {
		t.Fatalf("ParseSigned: %v", err)
	}
	if obj.Signatures[0].Header.KeyID != kid {
		t.Fatalf("kid %q, want %q", obj.Signatures[0].Header.KeyID, kid)
	}
	payload, err := obj.Verify(jwk)
	if err != nil {
		t.Fatalf("go-jose does not verify the %s JWS with the published JWK: %v", alg, err)
	}
	return payload
}

// checkRawSignature checks a compact JWS signature segment with crypto/*:
// Ed25519 over the signing input, or ES256's fixed 64-byte r||s.
func checkRawSignature(t testing.TB, jws string, pub crypto.PublicKey) {
	t.Helper()
	parts := strings.Split(jws, ".")
	if len(parts) != 3 {
		t.Fatalf("not a compact JWS: %s", jws)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	input := []byte(parts[0] + "." + parts[1])
	switch k := pub.(type) {
	case ed25519.PublicKey:
		if !ed25519.Verify(k, input, sig) {
			t.Fatal("Ed25519 signature does not verify")
		}
	case *ecdsa.PublicKey:
		if len(sig) != signer.ES256SignatureSize || !verifyES256(k, input, sig) {
			t.Fatalf("ES256 signature (%d bytes) does not verify as r||s", len(sig))
		}
	default:
		t.Fatalf("key %T", pub)
	}
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}
