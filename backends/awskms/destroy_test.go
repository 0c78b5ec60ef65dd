package awskms_test

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/awskms"
	"github.com/keysvc/keysvc/internal/kmstest"
	"github.com/keysvc/keysvc/signer"
)

func scheduleRequests(s *kmstest.Server) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Op == "ScheduleKeyDeletion" {
			n++
		}
	}
	return n
}

func arnOf(t *testing.T, ref string) string {
	t.Helper()
	r, err := awskms.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r.KeyID
}

// TestKMSDestroyKey: DestroyKey schedules deletion of the version's KMS
// key with the requested window (default 30 days) and returns the date;
// the key can no longer sign; a second call is idempotent (no second
// ScheduleKeyDeletion, same date); bad windows, another public key and an
// unknown key schedule nothing; a disabled key is still scheduled.
func TestKMSDestroyKey(t *testing.T) {
	s := startServer(t)
	b := newBackend(t, s.URL, s.Region(), func(c *awskms.Config) { c.MaxAttempts = 2; c.Timeout = 2 * time.Second })
	h, cs, _ := createSigner(t, b, kid1, signer.AlgEdDSA)
	arn := arnOf(t, h.Ref)
	var _ backends.Destroyer = b

	for _, days := range []int{6, 31, -1} {
		if _, err := b.DestroyKey(ctx, kid1, h, backends.DestroyOptions{PendingWindowDays: days}); err == nil || !strings.Contains(err.Error(), "7 to 30") {
			t.Fatalf("%d pending days: %v", days, err)
		}
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	_, err := b.DestroyKey(ctx, kid1, backends.Handle{Ref: h.Ref, Public: other}, backends.DestroyOptions{})
	wantErr(t, err, backends.ErrKeyMismatch)
	unknown := awskms.Ref{KeyID: "arn:aws:kms:" + s.Region() + ":111122223333:key/00000000-0000-0000-0000-000000000000"}.String()
	_, err = b.DestroyKey(ctx, kid1, backends.Handle{Ref: unknown, Public: h.Public}, backends.DestroyOptions{})
	wantErr(t, err, backends.ErrUnavailable)
	if st := s.KeyState(arn); st != "Enabled" || scheduleRequests(s) != 0 {
		t.Fatalf("refused calls left the key %s with %d ScheduleKeyDeletion requests", st, scheduleRequests(s))
	}

	start := time.Now()
	res, err := b.DestroyKey(ctx, kid1, h, backends.DestroyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeletionDate == nil || res.AlreadyDestroyed || !strings.Contains(res.Note, arn) {
		t.Fatalf("DestroyKey: %+v", res)
	}
	if d := res.DeletionDate.Sub(start); d < 30*24*time.Hour-2*time.Second || d > 30*24*time.Hour+2*time.Second {
		t.Fatalf("deletion date %s is %s away, want 30 days (the default)", res.DeletionDate, d)
	}
	if st := s.KeyState(arn); st != "PendingDeletion" || scheduleRequests(s) != 1 {
		t.Fatalf("key %s after DestroyKey, %d ScheduleKeyDeletion requests", st, scheduleRequests(s))
	}
	_, err = cs.Sign(nil, []byte("payload"), crypto.Hash(0))
	wantErr(t, err, backends.ErrKeyDisabled)
	_, err = b.Signer(ctx, kid1, h)
	wantErr(t, err, backends.ErrKeyDisabled)

	// Idempotent: already pending deletion is success with KMS's date.
	again, err := b.DestroyKey(ctx, kid1, h, backends.DestroyOptions{PendingWindowDays: 7})
	if err != nil {
		t.Fatal(err)
	}
	if !again.AlreadyDestroyed || again.DeletionDate == nil || !again.DeletionDate.Equal(*res.DeletionDate) || scheduleRequests(s) != 1 {
		t.Fatalf("second DestroyKey: %+v (first date %s), %d ScheduleKeyDeletion requests", again, res.DeletionDate, scheduleRequests(s))
	}

	// A 7-day window on a disabled ES256 key.
	kid2 := "villaakerlyckan.se-2026-05-18-02"
	h2, _, _ := createSigner(t, b, kid2, signer.AlgES256)
	if err := b.DisableKey(ctx, h2.Ref); err != nil {
		t.Fatal(err)
	}
	fresh := newBackend(t, s.URL, s.Region()) // no cached public key
	start = time.Now()
	res2, err := fresh.DestroyKey(ctx, kid2, h2, backends.DestroyOptions{PendingWindowDays: 7})
	if err != nil {
		t.Fatal(err)
	}
	if d := res2.DeletionDate.Sub(start); d < 7*24*time.Hour-2*time.Second || d > 7*24*time.Hour+2*time.Second || !strings.Contains(res2.Note, "disabled") {
		t.Fatalf("disabled key: %+v (%s away)", res2, d)
	}
	if st := s.KeyState(arnOf(t, h2.Ref)); st != "PendingDeletion" {
		t.Fatalf("disabled key after DestroyKey: %s", st)
	}
}
