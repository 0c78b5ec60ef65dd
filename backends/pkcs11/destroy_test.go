package pkcs11

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	p11 "github.com/miekg/pkcs11"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/pkcs11/softhsmtest"
	"github.com/keysvc/keysvc/signer"
)

// countObjects counts the private and public key objects labelled label.
func countObjects(t *testing.T, b *Backend, label string) (priv, pub int) {
	t.Helper()
	err := b.withSession(context.Background(), "count", func(s *session) error {
		privs, err := s.findObjects(labelTemplate(p11.CKO_PRIVATE_KEY, label, nil))
		if err != nil {
			return err
		}
		pubs, err := s.findObjects(labelTemplate(p11.CKO_PUBLIC_KEY, label, nil))
		priv, pub = len(privs), len(pubs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

// TestPKCS11DestroyKey, on a real SoftHSM2 token: DestroyKey removes the
// version's private (and public) key object; afterwards Signer for that
// version fails, a signer loaded before fails too, other versions still
// sign (also from a freshly opened backend); a second DestroyKey is
// success with AlreadyDestroyed; a reference to another version's object or
// a public key that does not match destroys nothing.
func TestPKCS11DestroyKey(t *testing.T) {
	tk := softhsmtest.New(t)
	b := openBackend(t, testConfig(t, tk))
	ctx := context.Background()
	kids := []string{"villaakerlyckan.se-2026-05-18-01", "villaakerlyckan.se-2026-05-18-02", "villaakerlyckan.se-2026-05-18-03"}
	algs := []string{signer.AlgEdDSA, signer.AlgES256, signer.AlgEdDSA}
	var hs []backends.Handle
	var ss []crypto.Signer
	for i, kid := range kids {
		h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: algs[i]})
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.Signer(ctx, kid, h)
		if err != nil {
			t.Fatal(err)
		}
		if err := signJWS(t, kid, algs[i], s, []byte(`{"n":1}`)); err != nil {
			t.Fatalf("%s before: %v", kid, err)
		}
		hs, ss = append(hs, h), append(ss, s)
	}

	// Refusals destroy nothing.
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := b.DestroyKey(ctx, kids[2], backends.Handle{Ref: hs[2].Ref, Public: other}, backends.DestroyOptions{}); !errors.Is(err, backends.ErrKeyMismatch) {
		t.Fatalf("another public key: %v, want ErrKeyMismatch", err)
	}
	if _, err := b.DestroyKey(ctx, kids[2], hs[1], backends.DestroyOptions{}); !errors.Is(err, backends.ErrKeyMismatch) {
		t.Fatalf("another version's reference: %v, want ErrKeyMismatch", err)
	}
	for _, kid := range kids {
		if priv, pub := countObjects(t, b, kid); priv != 1 || pub != 1 {
			t.Fatalf("%s after refused destructions: %d private, %d public objects", kid, priv, pub)
		}
	}

	res, err := b.DestroyKey(ctx, kids[0], hs[0], backends.DestroyOptions{PendingWindowDays: 7})
	if err != nil {
		t.Fatal(err)
	}
	if res.AlreadyDestroyed || res.DeletionDate != nil || !strings.Contains(res.Note, "private key object destroyed") || !strings.Contains(res.Note, "public key object") {
		t.Fatalf("DestroyKey: %+v", res)
	}
	if priv, pub := countObjects(t, b, kids[0]); priv != 0 || pub != 0 {
		t.Fatalf("after DestroyKey the token holds %d private and %d public objects labelled %s", priv, pub, kids[0])
	}
	if _, err := b.Signer(ctx, kids[0], hs[0]); !errors.Is(err, backends.ErrUnavailable) || !strings.Contains(err.Error(), "holds no private key") {
		t.Fatalf("Signer for the destroyed version: %v", err)
	}
	if err := signJWS(t, kids[0], algs[0], ss[0], []byte(`{"n":2}`)); err == nil {
		t.Fatal("a signer loaded before the destruction still signs")
	}
	for i := 1; i < len(kids); i++ {
		if err := signJWS(t, kids[i], algs[i], ss[i], []byte(`{"n":2}`)); err != nil {
			t.Fatalf("%s after %s was destroyed: %v", kids[i], kids[0], err)
		}
	}

	again, err := b.DestroyKey(ctx, kids[0], hs[0], backends.DestroyOptions{})
	if err != nil || !again.AlreadyDestroyed || !strings.Contains(again.Note, "already absent") {
		t.Fatalf("second DestroyKey: %+v %v", again, err)
	}

	// A fresh backend (another process) sees the same token.
	fresh := openBackend(t, testConfig(t, tk))
	if _, err := fresh.Signer(ctx, kids[0], hs[0]); !errors.Is(err, backends.ErrUnavailable) {
		t.Fatalf("fresh backend, destroyed version: %v", err)
	}
	for i := 1; i < len(kids); i++ {
		s, err := fresh.Signer(ctx, kids[i], hs[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := signJWS(t, kids[i], algs[i], s, []byte(`{"n":3}`)); err != nil {
			t.Fatalf("fresh backend, %s: %v", kids[i], err)
		}
	}
	orphans, err := fresh.Orphans(ctx, map[string]bool{kids[0]: true, kids[1]: true, kids[2]: true})
	if err != nil || len(orphans) != 0 {
		t.Fatalf("orphans after destruction: %v %v", orphans, err)
	}
}
