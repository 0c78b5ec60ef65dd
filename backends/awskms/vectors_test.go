package awskms_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/awskms"
	"github.com/keysvc/keysvc/internal/kmstest"
	"github.com/keysvc/keysvc/internal/testvectors"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/signer"
)

func readVector(t testing.TB, name string, v any) {
	t.Helper()
	if err := json.Unmarshal(testvectors.Read(t, name), v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func b64std(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("base64 %q: %v", s, err)
	}
	return b
}

func b64url(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("base64url %q: %v", s, err)
	}
	return b
}

func b64urlEncode(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

type describeVector struct {
	KeySpec           string   `json:"KeySpec"`
	KeyUsage          string   `json:"KeyUsage"`
	SigningAlgorithms []string `json:"SigningAlgorithms"`
}

// capturedVector is ../shared/vectors/aws-kms-captured.json.
type capturedVector struct {
	Message string `json:"message_utf8"`
	Ed25519 struct {
		Describe    describeVector    `json:"describe_key"`
		PublicDER   string            `json:"get_public_key_der_b64"`
		ExpectedJWK map[string]string `json:"expected_jwk"`
		RawSig      string            `json:"sign_ed25519_sha_512_raw_b64"`
		PHSig       string            `json:"sign_ed25519_ph_sha_512_digest_b64"`
	} `json:"ed25519"`
	P256 struct {
		Describe  describeVector `json:"describe_key"`
		PublicDER string         `json:"get_public_key_der_b64"`
		DERSigs   []string       `json:"sign_ecdsa_sha_256_raw_der_b64"`
	} `json:"p256"`
	Errors struct {
		ValidationException string `json:"ValidationException"`
	} `json:"errors"`
}

// TestKMSCapturedAWSVectors holds the backend and the test KMS server to the
// real AWS KMS bytes in aws-kms-captured.json. The server replays the
// captured responses; the backend must turn the DER public keys into the
// expected JWKs and the signatures into JWS signature bytes that verify
// over the captured message, never using Ed25519ph.
func TestKMSCapturedAWSVectors(t *testing.T) {
	var v capturedVector
	readVector(t, "aws-kms-captured.json", &v)
	msg := []byte(v.Message)
	if len(v.P256.DERSigs) != 2 || v.Ed25519.ExpectedJWK == nil || v.Errors.ValidationException == "" {
		t.Fatalf("vector file incomplete: %+v", v)
	}
	edDER, pDER := b64std(t, v.Ed25519.PublicDER), b64std(t, v.P256.PublicDER)
	edRaw, edPH := b64std(t, v.Ed25519.RawSig), b64std(t, v.Ed25519.PHSig)
	digest256 := sha256.Sum256(msg)
	digest512 := sha512.Sum512(msg)

	s := startServer(t)
	edARN, err := s.SeedReplay(kmstest.Replay{PublicKeyDER: edDER, Signatures: []kmstest.ReplaySignature{
		{SigningAlgorithm: kmstest.AlgEd25519, MessageType: kmstest.MessageRaw, Message: msg, Signature: edRaw},
		{SigningAlgorithm: kmstest.AlgEd25519ph, MessageType: kmstest.MessageDigest, Message: digest512[:], Signature: edPH},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var pSigs []kmstest.ReplaySignature
	for _, sg := range v.P256.DERSigs {
		pSigs = append(pSigs, kmstest.ReplaySignature{SigningAlgorithm: kmstest.AlgECDSASHA256, MessageType: kmstest.MessageDigest, Message: digest256[:], Signature: b64std(t, sg)})
	}
	pARN, err := s.SeedReplay(kmstest.Replay{PublicKeyDER: pDER, Signatures: pSigs})
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, s.URL, s.Region())
	c := b.Client()

	t.Run("describe_key", func(t *testing.T) {
		for _, k := range []struct {
			arn  string
			want describeVector
		}{{edARN, v.Ed25519.Describe}, {pARN, v.P256.Describe}} {
			out, err := c.DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String(k.arn)})
			if err != nil {
				t.Fatal(err)
			}
			got := describeVector{KeySpec: string(out.KeyMetadata.KeySpec), KeyUsage: string(out.KeyMetadata.KeyUsage)}
			for _, a := range out.KeyMetadata.SigningAlgorithms {
				got.SigningAlgorithms = append(got.SigningAlgorithms, string(a))
			}
			if !reflect.DeepEqual(got, k.want) {
				t.Errorf("DescribeKey %+v, captured %+v", got, k.want)
			}
		}
	})

	t.Run("ed25519", func(t *testing.T) {
		ref := awskms.Ref{KeyID: edARN, Region: s.Region()}.String()
		pub, err := b.PublicKey(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := jwksserve.PublicJWK(pub, "captured-ed25519", signer.AlgEdDSA)
		if err != nil {
			t.Fatal(err)
		}
		var jwk map[string]string
		if err := json.Unmarshal(raw, &jwk); err != nil {
			t.Fatal(err)
		}
		for name, want := range v.Ed25519.ExpectedJWK {
			if jwk[name] != want {
				t.Errorf("JWK %s = %q, captured %q", name, jwk[name], want)
			}
		}
		if jwk["alg"] != "EdDSA" || jwk["use"] != "sig" || jwk["d"] != "" {
			t.Errorf("JWK %v", jwk)
		}
		cs, err := b.Signer(ctx, "captured-ed25519", backends.Handle{Ref: ref, Public: pub})
		if err != nil {
			t.Fatal(err)
		}
		// The JWS EdDSA path: pure Ed25519 over the signing input.
		sig, err := cs.Sign(nil, msg, crypto.Hash(0))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sig, edRaw) || len(sig) != ed25519.SignatureSize {
			t.Fatalf("signature %x, captured %x", sig, edRaw)
		}
		if !ed25519.Verify(pub.(ed25519.PublicKey), msg, sig) {
			t.Fatal("captured ED25519_SHA_512 RAW signature does not verify as pure Ed25519")
		}
		for _, r := range signRequests(s) {
			if r.SigningAlgorithm != kmstest.AlgEd25519 || r.MessageType != kmstest.MessageRaw {
				t.Fatalf("backend sent %+v", r)
			}
		}
		// Ed25519ph, which the backend never uses: the captured signature is
		// Ed25519ph over SHA-512 of the digest, and is not a JWS signature.
		out, err := c.Sign(ctx, &kms.SignInput{KeyId: aws.String(edARN), Message: digest512[:],
			MessageType: types.MessageTypeDigest, SigningAlgorithm: types.SigningAlgorithmSpecEd25519PhSha512})
		if err != nil || !bytes.Equal(out.Signature, edPH) {
			t.Fatalf("ED25519_PH_SHA_512 replay: %v", err)
		}
		if ed25519.Verify(pub.(ed25519.PublicKey), msg, edPH) {
			t.Fatal("the Ed25519ph signature verifies as pure Ed25519: the vector says it must not")
		}
		ph := sha512.Sum512(digest512[:])
		if err := ed25519.VerifyWithOptions(pub.(ed25519.PublicKey), ph[:], edPH, &ed25519.Options{Hash: crypto.SHA512}); err != nil {
			t.Fatalf("captured Ed25519ph signature: %v", err)
		}
		// The captured ValidationException text for DIGEST with ED25519_SHA_512.
		_, err = c.Sign(ctx, &kms.SignInput{KeyId: aws.String(edARN), Message: digest512[:],
			MessageType: types.MessageTypeDigest, SigningAlgorithm: types.SigningAlgorithmSpecEd25519Sha512})
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "ValidationException" || ae.ErrorMessage() != v.Errors.ValidationException {
			t.Fatalf("DIGEST with ED25519_SHA_512: %v, captured ValidationException %q", err, v.Errors.ValidationException)
		}
	})

	t.Run("p256", func(t *testing.T) {
		ref := awskms.Ref{KeyID: pARN, Region: s.Region()}.String()
		pub, err := b.PublicKey(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		ec, ok := pub.(*ecdsa.PublicKey)
		if !ok {
			t.Fatalf("public %T", pub)
		}
		// Expected x and y straight from the DER: its last 65 bytes are the
		// uncompressed point 04 || X || Y (SEC 1 §2.3.3).
		point := pDER[len(pDER)-65:]
		if point[0] != 0x04 {
			t.Fatalf("DER does not end in an uncompressed point")
		}
		raw, err := jwksserve.PublicJWK(pub, "captured-p256", signer.AlgES256)
		if err != nil {
			t.Fatal(err)
		}
		var jwk map[string]string
		if err := json.Unmarshal(raw, &jwk); err != nil {
			t.Fatal(err)
		}
		if jwk["kty"] != "EC" || jwk["crv"] != "P-256" || jwk["alg"] != "ES256" ||
			jwk["x"] != b64urlEncode(point[1:33]) || jwk["y"] != b64urlEncode(point[33:]) || jwk["d"] != "" {
			t.Fatalf("JWK %v, want x %s y %s", jwk, b64urlEncode(point[1:33]), b64urlEncode(point[33:]))
		}
		cs, err := b.Signer(ctx, "captured-p256", backends.Handle{Ref: ref, Public: pub})
		if err != nil {
			t.Fatal(err)
		}
		n := len(signRequests(s))
		for i, want := range v.P256.DERSigs {
			der, err := cs.Sign(nil, digest256[:], crypto.SHA256)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(der, b64std(t, want)) {
				t.Fatalf("signature %d: %x, captured %s", i, der, want)
			}
			rs, err := signer.ES256RawFromDER(der)
			if err != nil || len(rs) != signer.ES256SignatureSize {
				t.Fatalf("ES256RawFromDER: %d bytes, %v", len(rs), err)
			}
			r, s := new(big.Int).SetBytes(rs[:32]), new(big.Int).SetBytes(rs[32:])
			if !ecdsa.Verify(ec, digest256[:], r, s) || !verifyES256(ec, msg, rs) {
				t.Fatalf("captured signature %d as JWS r||s does not verify over the message", i)
			}
		}
		for _, r := range signRequests(s)[n:] {
			if r.SigningAlgorithm != kmstest.AlgECDSASHA256 || r.MessageType != kmstest.MessageDigest || r.MessageLen != 32 {
				t.Fatalf("backend sent %+v, want ECDSA_SHA_256 over a 32-byte DIGEST", r)
			}
		}
	})
}
