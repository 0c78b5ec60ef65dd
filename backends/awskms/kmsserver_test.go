package awskms_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/awskms"
	"github.com/keysvc/keysvc/internal/kmstest"
	"github.com/keysvc/keysvc/signer"
)

// Tests of the Ed25519 path (and the shared machinery) against the
// test-only KMS server in internal/kmstest, driven by the real SDK client.

const kid1 = "villaakerlyckan.se-2026-05-18-01"

func verifyES256(pub *ecdsa.PublicKey, input, sig []byte) bool {
	d := sha256.Sum256(input)
	return ecdsa.Verify(pub, d[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
}

func signRequests(s *kmstest.Server) []kmstest.Request {
	var out []kmstest.Request
	for _, r := range s.Requests() {
		if r.Op == "Sign" {
			out = append(out, r)
		}
	}
	return out
}

func TestKMSRefAndAlias(t *testing.T) {
	if got := awskms.AliasFor(awskms.DefaultAliasPrefix, kid1); got != "alias/keysvc/villaakerlyckan_se-2026-05-18-01" {
		t.Fatalf("alias %s", got)
	}
	if got := awskms.AliasFor("alias/x/", "a b+ü"); got != "alias/x/a_x20b_x2B_xC3_xBC" {
		t.Fatalf("alias %s", got)
	}
	r := awskms.Ref{KeyID: "arn:aws:kms:eu-north-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab", Alias: "alias/keysvc/x", Region: "eu-north-1"}
	s := r.String()
	if s != "awskms:arn:aws:kms:eu-north-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab?alias=alias%2Fkeysvc%2Fx&region=eu-north-1" {
		t.Fatalf("ref %s", s)
	}
	back, err := awskms.ParseRef(s)
	if err != nil || back != r {
		t.Fatalf("ParseRef: %+v %v", back, err)
	}
	for _, bad := range []string{"software:x", "awskms:", "awskms:arn:aws:s3:::bucket",
		"awskms:arn:aws:kms:eu-north-1:111122223333:key/k?region=us-east-1"} {
		if _, err := awskms.ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) accepted", bad)
		}
	}
	for _, cfg := range []awskms.Config{{}, {Region: "x", AliasPrefix: "keysvc/"}, {Region: "x", AliasPrefix: "alias/aws/"},
		{Region: "x", AliasPrefix: "alias/a.b/"}, {Region: "x", Endpoint: "127.0.0.1:1"}} {
		if _, err := awskms.New(ctx, cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestKMSEd25519 creates an Ed25519 key version in the test KMS, signs JWS
// through signer.JWSSigner and checks: tags, alias, reference, that
// go-jose verifies the JWS with the published JWK, and that every Sign
// request was ED25519_SHA_512 over RAW — never the pre-hash mode.
func TestKMSEd25519(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.URL, s.Region())
	h, _, js := createSigner(t, b, kid1, signer.AlgEdDSA)

	r, err := awskms.ParseRef(h.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h.Ref, "awskms:arn:aws:kms:us-east-1:111122223333:key/") || r.Region != "us-east-1" ||
		r.Alias != "alias/keysvc/villaakerlyckan_se-2026-05-18-01" || h.Sealed != nil {
		t.Fatalf("handle %+v", h)
	}
	if tags := s.Tags(r.KeyID); tags["keysvc:key"] != "villa" || tags["keysvc:kid"] != kid1 {
		t.Fatalf("tags %v", tags)
	}
	if target := s.AliasTarget(r.Alias); target == "" || !strings.HasSuffix(r.KeyID, target) {
		t.Fatalf("alias points to %q, key %s", target, r.KeyID)
	}
	if _, ok := h.Public.(ed25519.PublicKey); !ok {
		t.Fatalf("public %T", h.Public)
	}
	for i := 0; i < 3; i++ {
		jws, err := js.Sign([]byte(`{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05"}`), "JWT")
		if err != nil {
			t.Fatal(err)
		}
		checkRawSignature(t, jws, h.Public)
		verifyWithJWK(t, jws, h.Public, kid1, signer.AlgEdDSA)
	}
	signs := signRequests(s)
	if len(signs) != 3 {
		t.Fatalf("%d Sign requests, want 3", len(signs))
	}
	for _, r := range signs {
		if r.SigningAlgorithm != "ED25519_SHA_512" || r.MessageType != "RAW" {
			t.Fatalf("Sign request %+v: want ED25519_SHA_512 over RAW", r)
		}
	}
	for _, r := range s.Requests() {
		if r.SigningAlgorithm == "ED25519_PH_SHA_512" {
			t.Fatalf("the backend used Ed25519ph: %+v", r)
		}
	}
	// A second load of the same version reuses the cached public key.
	before := len(s.Requests())
	if _, err := b.Signer(ctx, kid1, h); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Requests()[before:] {
		if r.Op == "GetPublicKey" {
			t.Fatal("GetPublicKey called again for a cached key")
		}
	}
}

// TestEd25519MessageLimit: a RAW message of 4096 bytes is signed; 4097
// bytes is refused with ErrMessageTooLarge before any request is sent.
func TestKMSEd25519MessageLimit(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.URL, s.Region())
	h, cs, js := createSigner(t, b, kid1, signer.AlgEdDSA)
	msg := make([]byte, awskms.MaxRawMessage)
	_, _ = rand.Read(msg)
	sig, err := cs.Sign(nil, msg, crypto.Hash(0))
	if err != nil || !ed25519.Verify(h.Public.(ed25519.PublicKey), msg, sig) {
		t.Fatalf("4096-byte message: %v", err)
	}
	n := len(s.Requests())
	_, err = cs.Sign(nil, append(msg, 'x'), crypto.Hash(0))
	wantErr(t, err, backends.ErrMessageTooLarge)
	// Through the JWS layer: a payload whose signing input exceeds 4096.
	_, err = js.Sign(make([]byte, 3100), "")
	wantErr(t, err, backends.ErrMessageTooLarge)
	if got := len(s.Requests()); got != n {
		t.Fatalf("%d requests sent for refused messages", got-n)
	}
	// The pre-hash and context variants are refused, never sent.
	if _, err := cs.Sign(nil, msg[:64], crypto.SHA512); err == nil {
		t.Fatal("Ed25519ph accepted")
	}
	if _, err := cs.Sign(nil, msg[:10], &ed25519.Options{Context: "x"}); err == nil {
		t.Fatal("Ed25519ctx accepted")
	}
	if got := len(s.Requests()); got != n {
		t.Fatalf("%d requests sent for refused modes", got-n)
	}
}

// TestKMSServerRules holds the test server to the real API's rules, with the
// raw SDK client.
func TestKMSServerRules(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.URL, s.Region(), func(c *awskms.Config) { c.MaxAttempts = 1 })
	c := b.Client()
	ed, err := c.CreateKey(ctx, &kms.CreateKeyInput{KeySpec: types.KeySpecEccNistEdwards25519, KeyUsage: types.KeyUsageTypeSignVerify})
	if err != nil {
		t.Fatal(err)
	}
	p256, err := c.CreateKey(ctx, &kms.CreateKeyInput{KeySpec: types.KeySpecEccNistP256, KeyUsage: types.KeyUsageTypeSignVerify})
	if err != nil {
		t.Fatal(err)
	}
	edID, pID := ed.KeyMetadata.Arn, p256.KeyMetadata.Arn
	msg := []byte("stackd ECC interoperability")
	digest := sha256.Sum256(msg)
	apiCode := func(err error) (string, string) {
		var ae smithy.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("not an API error: %v", err)
		}
		return ae.ErrorCode(), ae.ErrorMessage()
	}
	cases := []struct {
		name     string
		in       kms.SignInput
		code     string
		contains string
	}{
		{"ed25519 digest", kms.SignInput{KeyId: edID, Message: make([]byte, 64), MessageType: types.MessageTypeDigest, SigningAlgorithm: types.SigningAlgorithmSpecEd25519Sha512},
			"ValidationException", "Message type DIGEST is incompatible with algorithm ED25519_SHA_512."},
		{"ed25519ph raw", kms.SignInput{KeyId: edID, Message: msg, MessageType: types.MessageTypeRaw, SigningAlgorithm: types.SigningAlgorithmSpecEd25519PhSha512},
			"ValidationException", "incompatible"},
		{"raw too long", kms.SignInput{KeyId: edID, Message: make([]byte, 4097), MessageType: types.MessageTypeRaw, SigningAlgorithm: types.SigningAlgorithmSpecEd25519Sha512},
			"ValidationException", "4096"},
		{"ecdsa on ed25519", kms.SignInput{KeyId: edID, Message: digest[:], MessageType: types.MessageTypeDigest, SigningAlgorithm: types.SigningAlgorithmSpecEcdsaSha256},
			"InvalidKeyUsageException", ""},
		{"ed25519 on p256", kms.SignInput{KeyId: pID, Message: msg, MessageType: types.MessageTypeRaw, SigningAlgorithm: types.SigningAlgorithmSpecEd25519Sha512},
			"InvalidKeyUsageException", ""},
		{"p256 short digest", kms.SignInput{KeyId: pID, Message: msg, MessageType: types.MessageTypeDigest, SigningAlgorithm: types.SigningAlgorithmSpecEcdsaSha256},
			"ValidationException", "Digest"},
		{"unknown key", kms.SignInput{KeyId: aws.String("alias/nope"), Message: msg, MessageType: types.MessageTypeRaw, SigningAlgorithm: types.SigningAlgorithmSpecEd25519Sha512},
			"NotFoundException", ""},
	}
	for _, tc := range cases {
		_, err := c.Sign(ctx, &tc.in)
		code, m := apiCode(err)
		if code != tc.code || !strings.Contains(m, tc.contains) {
			t.Errorf("%s: %s %q, want %s containing %q", tc.name, code, m, tc.code, tc.contains)
		}
	}
	// DisableKey → DisabledException; ScheduleKeyDeletion → KMSInvalidStateException.
	if _, err := c.DisableKey(ctx, &kms.DisableKeyInput{KeyId: edID}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Sign(ctx, &kms.SignInput{KeyId: edID, Message: msg, MessageType: types.MessageTypeRaw, SigningAlgorithm: types.SigningAlgorithmSpecEd25519Sha512})
	if code, _ := apiCode(err); code != "DisabledException" {
		t.Fatalf("disabled key: %s", code)
	}
	if _, err := c.ScheduleKeyDeletion(ctx, &kms.ScheduleKeyDeletionInput{KeyId: pID, PendingWindowInDays: aws.Int32(6)}); err == nil {
		t.Fatal("pending window of 6 days accepted")
	}
	if _, err := c.ScheduleKeyDeletion(ctx, &kms.ScheduleKeyDeletionInput{KeyId: pID, PendingWindowInDays: aws.Int32(7)}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Sign(ctx, &kms.SignInput{KeyId: pID, Message: digest[:], MessageType: types.MessageTypeDigest, SigningAlgorithm: types.SigningAlgorithmSpecEcdsaSha256})
	if code, _ := apiCode(err); code != "KMSInvalidStateException" {
		t.Fatalf("key pending deletion: %s", code)
	}
	// ListKeys paginates.
	page, err := c.ListKeys(ctx, &kms.ListKeysInput{Limit: aws.Int32(1)})
	if err != nil || len(page.Keys) != 1 || !page.Truncated || page.NextMarker == nil {
		t.Fatalf("ListKeys: %+v %v", page, err)
	}
	// SigV4 is verified: another secret is refused.
	bad := newBackend(t, s.URL, s.Region(), func(c *awskms.Config) {
		c.MaxAttempts = 1
		c.Credentials = staticCreds(aws.Credentials{AccessKeyID: testCreds.AccessKeyID, SecretAccessKey: "wrong"})
	})
	_, err = bad.Client().ListKeys(ctx, &kms.ListKeysInput{})
	if code, _ := apiCode(err); code != "InvalidSignatureException" {
		t.Fatalf("bad secret: %s", code)
	}
	wantErr(t, bad.Healthy(ctx), backends.ErrUnavailable)
}

// TestRFC8037ThroughKMS seeds the test KMS with the RFC 8037 A.1 private
// key: signing A.4's protected header and payload through the backend must
// give A.4's compact JWS exactly (Ed25519 is deterministic).
func TestRFC8037ThroughKMS(t *testing.T) {
	var v struct {
		JWK     struct{ D, X string } `json:"jwk_private"`
		Header  string                `json:"protected_header"`
		Payload string                `json:"payload"`
		JWS     string                `json:"compact_jws"`
	}
	readVector(t, "rfc8037-ed25519-jws.json", &v)
	seed := b64url(t, v.JWK.D)
	priv := ed25519.NewKeyFromSeed(seed)
	s := startServer(t)
	arn, err := s.SeedKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, s.URL, s.Region())
	ref := awskms.Ref{KeyID: arn, Region: s.Region()}.String()
	pub, err := b.PublicKey(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if x := b64urlEncode(pub.(ed25519.PublicKey)); x != v.JWK.X {
		t.Fatalf("public x %s, want %s", x, v.JWK.X)
	}
	cs, err := b.Signer(ctx, "rfc8037", backends.Handle{Ref: ref, Public: pub})
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.SignCompact(b64urlEncode([]byte(v.Header)), []byte(v.Payload), signer.AlgEdDSA, cs)
	if err != nil {
		t.Fatal(err)
	}
	if jws != v.JWS {
		t.Fatalf("JWS through KMS\n%s\nwant\n%s", jws, v.JWS)
	}
}

// TestThrottling: throttled calls are retried with backoff; when every
// attempt is throttled the error is ErrThrottled, after MaxAttempts tries.
func TestKMSThrottling(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.URL, s.Region(), func(c *awskms.Config) { c.MaxAttempts = 3 })
	_, cs, js := createSigner(t, b, kid1, signer.AlgEdDSA)

	s.Throttle("Sign", 2)
	n := len(signRequests(s))
	if _, err := js.Sign([]byte("after two throttles"), ""); err != nil {
		t.Fatalf("two throttles then success: %v", err)
	}
	if got := len(signRequests(s)) - n; got != 3 {
		t.Fatalf("%d Sign attempts, want 3", got)
	}

	s.Throttle("Sign", 100)
	n = len(signRequests(s))
	_, err := cs.Sign(nil, []byte("always throttled"), crypto.Hash(0))
	wantErr(t, err, backends.ErrThrottled)
	if got := len(signRequests(s)) - n; got != 3 {
		t.Fatalf("%d Sign attempts, want MaxAttempts=3", got)
	}
	// The same through the JWS layer, as the HTTP API sees it.
	_, err = js.Sign([]byte("x"), "")
	wantErr(t, err, backends.ErrThrottled)
	// LimitExceededException is KMS's other rate error.
	s.FailNext("Sign", 3, "LimitExceededException", 400)
	_, err = cs.Sign(nil, []byte("limit"), crypto.Hash(0))
	wantErr(t, err, backends.ErrThrottled)
}

// TestKMSErrorMapping covers the mapping of KMS errors to backends sentinels
// at load and at sign time.
func TestKMSErrorMapping(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.URL, s.Region(), func(c *awskms.Config) { c.MaxAttempts = 2; c.Timeout = time.Second })
	h, cs, _ := createSigner(t, b, kid1, signer.AlgEdDSA)
	hp, _, _ := createSigner(t, b, "villaakerlyckan.se-2026-05-18-02", signer.AlgES256)
	msg := []byte("payload")

	t.Run("internal error is unavailable", func(t *testing.T) {
		s.FailNext("Sign", 2, "KMSInternalException", 500)
		_, err := cs.Sign(nil, msg, crypto.Hash(0))
		wantErr(t, err, backends.ErrUnavailable)
		s.FailNext("Sign", 1, "KMSInternalException", 500)
		if _, err := cs.Sign(nil, msg, crypto.Hash(0)); err != nil {
			t.Fatalf("one 500 then success: %v", err)
		}
	})
	t.Run("access denied is unavailable", func(t *testing.T) {
		s.FailNext("Sign", 1, "AccessDeniedException", 400)
		_, err := cs.Sign(nil, msg, crypto.Hash(0))
		wantErr(t, err, backends.ErrUnavailable)
	})
	t.Run("wrong public key is a mismatch", func(t *testing.T) {
		other, _, _ := ed25519.GenerateKey(rand.Reader)
		_, err := b.Signer(ctx, kid1, backends.Handle{Ref: h.Ref, Public: other})
		wantErr(t, err, backends.ErrKeyMismatch)
	})
	t.Run("wrong key spec is a mismatch", func(t *testing.T) {
		_, err := b.Signer(ctx, kid1, backends.Handle{Ref: h.Ref, Public: hp.Public})
		wantErr(t, err, backends.ErrKeyMismatch)
	})
	t.Run("unknown key is unavailable", func(t *testing.T) {
		ref := awskms.Ref{KeyID: "arn:aws:kms:us-east-1:111122223333:key/00000000-0000-0000-0000-000000000000"}.String()
		_, err := b.Signer(ctx, kid1, backends.Handle{Ref: ref, Public: h.Public})
		wantErr(t, err, backends.ErrUnavailable)
	})
	t.Run("other region is refused", func(t *testing.T) {
		ref := awskms.Ref{KeyID: "arn:aws:kms:eu-north-1:111122223333:key/00000000-0000-0000-0000-000000000000"}.String()
		_, err := b.Signer(ctx, kid1, backends.Handle{Ref: ref, Public: h.Public})
		wantErr(t, err, backends.ErrUnavailable)
	})
	t.Run("timeout is unavailable", func(t *testing.T) {
		s.SetLatency(1500 * time.Millisecond)
		defer s.SetLatency(0)
		start := time.Now()
		_, err := cs.Sign(nil, msg, crypto.Hash(0))
		wantErr(t, err, backends.ErrUnavailable)
		if d := time.Since(start); d > 1400*time.Millisecond {
			t.Fatalf("Sign took %s with a 1s timeout", d)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		if err := b.DisableKey(ctx, h.Ref); err != nil {
			t.Fatal(err)
		}
		_, err := cs.Sign(nil, msg, crypto.Hash(0))
		wantErr(t, err, backends.ErrKeyDisabled)
		_, err = b.Signer(ctx, kid1, h)
		wantErr(t, err, backends.ErrKeyDisabled)
	})
	t.Run("pending deletion", func(t *testing.T) {
		at, err := b.ScheduleKeyDeletion(ctx, hp.Ref, 7)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Until(at); d < 6*24*time.Hour || d > 8*24*time.Hour {
			t.Fatalf("deletion date %s", at)
		}
		if _, err := b.ScheduleKeyDeletion(ctx, hp.Ref, 31); err == nil {
			t.Fatal("31-day window accepted")
		}
		_, err = b.Signer(ctx, "villaakerlyckan.se-2026-05-18-02", hp)
		wantErr(t, err, backends.ErrKeyDisabled)
	})
	t.Run("server gone is unavailable", func(t *testing.T) {
		_ = s.Close()
		_, err := cs.Sign(nil, msg, crypto.Hash(0))
		wantErr(t, err, backends.ErrUnavailable)
	})
}

// TestConcurrencyLimit: with MaxConcurrency 4 and a slow KMS, a burst of 48
// signatures queues: all succeed and KMS never sees more than 4 at once.
func TestKMSConcurrencyLimit(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.URL, s.Region(), func(c *awskms.Config) { c.MaxConcurrency = 4 })
	_, cs, _ := createSigner(t, b, kid1, signer.AlgEdDSA)
	s.SetLatency(20 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 48)
	for i := 0; i < 48; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cs.Sign(nil, []byte("burst"), crypto.Hash(0))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if m := s.MaxInFlight(); m > 4 {
		t.Fatalf("KMS saw %d concurrent requests, limit 4", m)
	}
	// A queue that cannot drain within the timeout is throttling, not an outage.
	b2 := newBackend(t, s.URL, s.Region(), func(c *awskms.Config) { c.MaxConcurrency = 1; c.Timeout = 300 * time.Millisecond })
	_, cs2, _ := createSigner(t, b2, "villaakerlyckan.se-2026-05-18-09", signer.AlgEdDSA)
	s.SetLatency(200 * time.Millisecond)
	var throttled, ok int
	var mu sync.Mutex
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cs2.Sign(nil, []byte("q"), crypto.Hash(0))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, backends.ErrThrottled):
				throttled++
			default:
				t.Errorf("queued sign: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok == 0 || throttled == 0 {
		t.Fatalf("ok %d, throttled %d: want both", ok, throttled)
	}
}

func TestKMSHealthy(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.URL, s.Region(), func(c *awskms.Config) { c.HealthTTL = time.Millisecond; c.MaxAttempts = 1 })
	if err := b.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	s.Throttle("ListKeys", 1)
	time.Sleep(2 * time.Millisecond)
	if err := b.Healthy(ctx); err != nil {
		t.Fatalf("a throttled probe means KMS answers: %v", err)
	}
	_ = s.Close()
	time.Sleep(2 * time.Millisecond)
	wantErr(t, b.Healthy(ctx), backends.ErrUnavailable)

	// Results are cached for HealthTTL.
	s2 := startServer(t)
	b2 := newBackend(t, s2.URL, s2.Region(), func(c *awskms.Config) { c.HealthTTL = time.Hour })
	for i := 0; i < 5; i++ {
		if err := b2.Healthy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s2.Requests()); n != 1 {
		t.Fatalf("%d ListKeys calls for 5 cached probes", n)
	}
}

// TestCreateKeyCleansUp: when the alias already exists (another deployment
// with the same issuer), CreateKey fails and schedules the new KMS key for
// deletion instead of leaving an orphan.
func TestKMSCreateKeyCleansUp(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.URL, s.Region())
	createSigner(t, b, kid1, signer.AlgEdDSA)
	_, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid1, Algorithm: signer.AlgEdDSA})
	if err == nil || !strings.Contains(err.Error(), "AlreadyExistsException") {
		t.Fatalf("duplicate alias: %v", err)
	}
	var orphan string
	for _, r := range s.Requests() {
		if r.Op == "ScheduleKeyDeletion" {
			orphan = r.KeyID
		}
	}
	if orphan == "" || s.KeyState(orphan) != "PendingDeletion" {
		t.Fatalf("orphaned key %q not scheduled for deletion", orphan)
	}
	if _, err := b.CreateKey(ctx, backends.CreateRequest{KID: "x", Algorithm: "RS256"}); !errors.Is(err, backends.ErrUnsupportedAlgorithm) {
		t.Fatalf("RS256: %v", err)
	}
}
