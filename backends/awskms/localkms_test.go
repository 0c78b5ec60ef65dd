package awskms_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/awskms"
	"github.com/keysvc/keysvc/internal/kmstest"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/store"
)

// Tests of the ES256 path against the third-party emulator
// github.com/nsmithuk/local-kms (real KMS JSON protocol, P-256, no
// Ed25519). Under CI=true a missing emulator fails the test.

func startLocalKMS(t *testing.T) *kmstest.LocalKMS {
	t.Helper()
	return kmstest.StartLocalKMS(t)
}

// TestLocalKMSES256 creates a P-256 key version in local-kms, signs ES256
// JWS, and verifies them with crypto/ecdsa (64-byte r||s) and go-jose
// using only the published JWK.
func TestLocalKMSES256(t *testing.T) {
	lk := startLocalKMS(t)
	b := newBackend(t, lk.Endpoint, lk.Region)
	h, cs, js := createSigner(t, b, kid1, signer.AlgES256)
	if _, ok := h.Public.(*ecdsa.PublicKey); !ok {
		t.Fatalf("public %T", h.Public)
	}
	r, err := awskms.ParseRef(h.Ref)
	if err != nil || r.Region != lk.Region || r.Alias != "alias/keysvc/villaakerlyckan_se-2026-05-18-01" {
		t.Fatalf("ref %s: %+v %v", h.Ref, r, err)
	}
	// The alias and tags are in the emulator.
	c := b.Client()
	d, err := c.DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String(r.Alias)})
	if err != nil || *d.KeyMetadata.Arn != r.KeyID || d.KeyMetadata.KeySpec != types.KeySpecEccNistP256 {
		t.Fatalf("DescribeKey by alias: %+v %v", d, err)
	}
	tags, err := c.ListResourceTags(ctx, &kms.ListResourceTagsInput{KeyId: aws.String(r.KeyID)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tg := range tags.Tags {
		got[*tg.TagKey] = *tg.TagValue
	}
	if got["keysvc:key"] != "villa" || got["keysvc:kid"] != kid1 {
		t.Fatalf("tags %v", got)
	}
	for i := 0; i < 3; i++ {
		jws, err := js.Sign([]byte(`{"offer_id":"offer:villaakerlyckan.se:2026-09-02/05"}`), "JWT")
		if err != nil {
			t.Fatal(err)
		}
		checkRawSignature(t, jws, h.Public)
		verifyWithJWK(t, jws, h.Public, kid1, signer.AlgES256)
	}
	// ES256 signs a digest: no 4096-byte limit on the payload.
	big := make([]byte, 64<<10)
	jws, err := js.Sign(big, "")
	if err != nil {
		t.Fatalf("64 KiB payload: %v", err)
	}
	verifyWithJWK(t, jws, h.Public, kid1, signer.AlgES256)
	// A digest of the wrong size or hash is refused locally.
	if _, err := cs.Sign(nil, []byte("short"), crypto.SHA256); err == nil {
		t.Fatal("short digest accepted")
	}
	if err := b.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLocalKMSErrors maps the emulator's errors.
func TestLocalKMSErrors(t *testing.T) {
	lk := startLocalKMS(t)
	b := newBackend(t, lk.Endpoint, lk.Region, func(c *awskms.Config) { c.MaxAttempts = 2 })
	h, cs, js := createSigner(t, b, kid1, signer.AlgES256)
	digest := sha256.Sum256([]byte("x"))

	// Disable → Sign fails with ErrKeyDisabled, and so does a new load.
	if err := b.DisableKey(ctx, h.Ref); err != nil {
		t.Fatal(err)
	}
	_, err := cs.Sign(nil, digest[:], crypto.SHA256)
	wantErr(t, err, backends.ErrKeyDisabled)
	_, err = js.Sign([]byte("{}"), "")
	wantErr(t, err, backends.ErrKeyDisabled)
	_, err = b.Signer(ctx, kid1, h)
	wantErr(t, err, backends.ErrKeyDisabled)
	// Re-enabled in AWS, it signs again.
	r, _ := awskms.ParseRef(h.Ref)
	if _, err := b.Client().EnableKey(ctx, &kms.EnableKeyInput{KeyId: aws.String(r.KeyID)}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Sign(nil, digest[:], crypto.SHA256); err != nil {
		t.Fatalf("after EnableKey: %v", err)
	}
	// Pending deletion → ErrKeyDisabled.
	if _, err := b.ScheduleKeyDeletion(ctx, h.Ref, 7); err != nil {
		t.Fatal(err)
	}
	_, err = cs.Sign(nil, digest[:], crypto.SHA256)
	wantErr(t, err, backends.ErrKeyDisabled)
	// A key that does not exist → ErrUnavailable.
	missing := awskms.Ref{KeyID: "arn:aws:kms:us-east-1:111122223333:key/00000000-0000-0000-0000-000000000000"}.String()
	_, err = b.Signer(ctx, "x", backends.Handle{Ref: missing, Public: h.Public})
	wantErr(t, err, backends.ErrUnavailable)
	// local-kms has no Ed25519: CreateKey fails (a client error, not an outage).
	_, err = b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: "ed", Algorithm: signer.AlgEdDSA})
	if err == nil {
		t.Fatal("local-kms created an Ed25519 key")
	}
	// The emulator stopped → ErrUnavailable, and Healthy says so.
	b2 := newBackend(t, "http://127.0.0.1:1", lk.Region, func(c *awskms.Config) { c.MaxAttempts = 2 })
	wantErr(t, b2.Healthy(ctx), backends.ErrUnavailable)
}

// TestLocalKMSRotation runs the rotation Manager on a SQLite key history
// with the awskms backend: create an ES256 key, sign, rotate, sign with the
// new version, and check both verify against the JWKS built from key
// history; then revoke the old version (its signer leaves the Keyring) and
// disable its KMS key (its crypto.Signer gets ErrKeyDisabled).
func TestLocalKMSRotation(t *testing.T) {
	lk := startLocalKMS(t)
	b := newBackend(t, lk.Endpoint, lk.Region)
	cfg := store.Config{SQLitePath: filepath.Join(t.TempDir(), "keysvc.db")}
	if _, err := store.Migrate(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := rotation.New(rotation.Config{Store: st, Backends: []backends.Backend{b}, Logger: quietLogger()})
	if err := m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	actor := rotation.Actor{Name: "officer", Reason: "test"}
	_, v1, err := m.CreateKey(ctx, rotation.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se", Algorithm: signer.AlgES256, Backend: awskms.Kind}, actor)
	if err != nil {
		t.Fatal(err)
	}
	s1 := m.Keyring().Keys["villa"].Active
	jws1, err := s1.Sign([]byte(`{"n":1}`), "JWT")
	if err != nil {
		t.Fatal(err)
	}
	v2, old, err := m.Rotate(ctx, "villa", actor)
	if err != nil {
		t.Fatal(err)
	}
	if old.KID != v1.KID || v2.KID == v1.KID {
		t.Fatalf("rotate: new %s old %s", v2.KID, old.KID)
	}
	s2 := m.Keyring().Keys["villa"].Active
	if s2.KID() != v2.KID {
		t.Fatalf("active %s after rotation, want %s", s2.KID(), v2.KID)
	}
	jws2, err := s2.Sign([]byte(`{"n":2}`), "JWT")
	if err != nil {
		t.Fatal(err)
	}
	// Both verify with the JWKS entries built from key history.
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(m.Keyring().Keys["villa"].JWKS.Body, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 {
		t.Fatalf("JWKS has %d keys", len(set.Keys))
	}
	for _, k := range set.Keys {
		if k["kty"] != "EC" || k["crv"] != "P-256" || k["alg"] != "ES256" {
			t.Fatalf("JWKS entry %v", k)
		}
	}
	for _, c := range []struct {
		jws string
		v   store.KeyVersion
	}{{jws1, v1}, {jws2, v2}} {
		pub, err := jwksserve.ParsePublicJWK(c.v.PublicJWK)
		if err != nil {
			t.Fatal(err)
		}
		verifyWithJWK(t, c.jws, pub, c.v.KID, signer.AlgES256)
		if r, err := awskms.ParseRef(c.v.BackendRef); err != nil || r.Alias != awskms.AliasFor(awskms.DefaultAliasPrefix, c.v.KID) {
			t.Fatalf("backend ref %s: %v", c.v.BackendRef, err)
		}
	}
	// Revoke v1: no Keyring entry signs with it any more.
	if _, _, err := m.Revoke(ctx, v1.KID, time.Now().Add(-time.Minute), "key compromise drill", actor); err != nil {
		t.Fatal(err)
	}
	if a := m.Keyring().Keys["villa"].SignerAt(time.Now()); a == nil || a.KID() != v2.KID {
		t.Fatalf("after revoking %s the signing version is %v", v1.KID, a)
	}
	// Disabling the KMS key stops even a held crypto.Signer.
	if err := b.DisableKey(ctx, v1.BackendRef); err != nil {
		t.Fatal(err)
	}
	_, err = s1.Sign([]byte("{}"), "")
	wantErr(t, err, backends.ErrKeyDisabled)
	// A fresh Manager (a restart) loads only the active version from KMS.
	m2 := rotation.New(rotation.Config{Store: st, Backends: []backends.Backend{b}, Logger: quietLogger()})
	if err := m2.Reload(ctx); err != nil {
		t.Fatalf("reload with a disabled retired/revoked key: %v", err)
	}
	if _, err := m2.Keyring().Keys["villa"].Active.Sign([]byte("{}"), ""); err != nil {
		t.Fatal(err)
	}
}
