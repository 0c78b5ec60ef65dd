package awskms_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/awskms"
	"github.com/keysvc/keysvc/signer"
)

// TestLiveAWSKMS runs against the real AWS KMS service, only when asked:
// KEYSVC_AWSKMS_LIVE=1, credentials in the environment (AWS_ACCESS_KEY_ID
// or AWS_PROFILE) and a region (KEYSVC_AWSKMS_REGION or AWS_REGION). It
// creates one Ed25519 and one P-256 key (about USD 1/month each until
// deleted), signs JWS with both, checks them with go-jose using the
// published JWK, checks the 4096-byte RAW limit is enforced before the
// call, then disables both keys and schedules their deletion (7 days).
// The credentials need the permissions listed in docs/kms.md.
func TestLiveAWSKMS(t *testing.T) {
	region := os.Getenv("KEYSVC_AWSKMS_REGION")
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	switch {
	case os.Getenv("KEYSVC_AWSKMS_LIVE") != "1":
		t.Skip("SKIPPING live AWS KMS test: set KEYSVC_AWSKMS_LIVE=1 with AWS credentials (AWS_ACCESS_KEY_ID or AWS_PROFILE) and KEYSVC_AWSKMS_REGION or AWS_REGION to run it; it creates billable KMS keys")
	case os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "":
		t.Skip("SKIPPING live AWS KMS test: KEYSVC_AWSKMS_LIVE=1 but no AWS credentials in the environment (AWS_ACCESS_KEY_ID or AWS_PROFILE)")
	case region == "":
		t.Skip("SKIPPING live AWS KMS test: no region (KEYSVC_AWSKMS_REGION or AWS_REGION)")
	}
	b, err := awskms.New(ctx, awskms.Config{Region: region, AliasPrefix: "alias/keysvc-live-test/"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Healthy(ctx); err != nil {
		t.Fatalf("Healthy: %v", err)
	}
	stamp := time.Now().UTC().Format("20060102-150405")
	for _, alg := range []string{signer.AlgEdDSA, signer.AlgES256} {
		t.Run(alg, func(t *testing.T) {
			kid := fmt.Sprintf("live-test.keysvc.invalid-%s-%s", stamp, alg)
			h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "live-test", KID: kid, Algorithm: alg})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = b.DisableKey(ctx, h.Ref)
				if at, err := b.ScheduleKeyDeletion(ctx, h.Ref, 7); err != nil {
					t.Errorf("schedule deletion of %s: %v (delete it by hand)", h.Ref, err)
				} else {
					t.Logf("%s scheduled for deletion on %s", h.Ref, at)
				}
			})
			cs, err := b.Signer(ctx, kid, h)
			if err != nil {
				t.Fatal(err)
			}
			js, err := signer.NewJWSSigner(kid, alg, cs)
			if err != nil {
				t.Fatal(err)
			}
			jws, err := js.Sign([]byte(`{"probe":"keysvc live test"}`), "JWT")
			if err != nil {
				t.Fatal(err)
			}
			checkRawSignature(t, jws, h.Public)
			verifyWithJWK(t, jws, h.Public, kid, alg)
			if alg == signer.AlgEdDSA {
				_, err := js.Sign(make([]byte, 3100), "")
				wantErr(t, err, backends.ErrMessageTooLarge)
			}
			if err := b.DisableKey(ctx, h.Ref); err != nil {
				t.Fatal(err)
			}
			_, err = js.Sign([]byte(`{}`), "")
			wantErr(t, err, backends.ErrKeyDisabled)
		})
	}
}
