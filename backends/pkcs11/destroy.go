package pkcs11

import (
	"context"
	"fmt"

	p11 "github.com/miekg/pkcs11"

	"github.com/keysvc/keysvc/backends"
)

// DestroyKey implements backends.Destroyer: it destroys (C_DestroyObject)
// the private key object of key version kid, found the way Signer finds
// it — by the CKA_ID and CKA_LABEL of h.Ref, checked against the recorded
// public key h.Public (key type, and the public key object's CKA_EC_POINT
// or a test signature) — and then the public key object of the same
// CKA_ID and label, which is public data but would otherwise stay behind
// as a reminder of a key that no longer exists. Destruction is immediate
// and irreversible (opt is ignored): only a token backup taken before it
// still holds the key.
//
// It is idempotent: when the token (reachable, checked with
// C_GetTokenInfo) holds no such private key any more, the result is
// success with AlreadyDestroyed set. A reference to another version's
// object, several matching objects or an object that does not match the
// recorded public key are refused with backends.ErrKeyMismatch and nothing
// is destroyed; a token that cannot be reached gives
// backends.ErrUnavailable. Failing to remove the public key object after
// the private one is gone is not an error: Note says so.
func (b *Backend) DestroyKey(ctx context.Context, kid string, h backends.Handle, _ backends.DestroyOptions) (backends.DestroyResult, error) {
	k, err := b.keyObject(kid, h)
	if err != nil {
		return backends.DestroyResult{}, err
	}
	var res backends.DestroyResult
	err = b.withSession(ctx, "destroy key "+k.label, func(s *session) error {
		res = backends.DestroyResult{} // withSession may retry fn on a fresh session
		privs, err := s.findObjects(labelTemplate(p11.CKO_PRIVATE_KEY, k.label, k.id))
		if err != nil {
			return err
		}
		switch len(privs) {
		case 0:
			// Gone, or the token went away (SoftHSM2 then finds nothing):
			// only a reachable token proves the former.
			if _, err := s.c.GetTokenInfo(s.st.slot); err != nil {
				return fmt.Errorf("C_GetTokenInfo: %w", err)
			}
			res.AlreadyDestroyed, res.Note = true, "private key object already absent from the token"
		case 1:
			// find checks the key type and the recorded public key, so a
			// reference that names someone else's object destroys nothing.
			priv, err := k.find(s)
			if err != nil {
				return err
			}
			if err := s.c.DestroyObject(s.sh, priv); err != nil {
				return fmt.Errorf("C_DestroyObject(private key %s): %w", k.label, err)
			}
			res.Note = "private key object destroyed"
		default:
			return fmt.Errorf("%w: %s: token %q holds %d private keys with CKA_ID %x and label %q; refusing to guess which to destroy",
				backends.ErrKeyMismatch, kid, b.cfg.TokenLabel, len(privs), k.id, k.label)
		}
		pubs, err := s.findObjects(labelTemplate(p11.CKO_PUBLIC_KEY, k.label, k.id))
		if err != nil {
			res.Note += "; public key object not looked up: " + err.Error()
			return nil
		}
		for _, pub := range pubs {
			if err := s.c.DestroyObject(s.sh, pub); err != nil {
				res.Note += fmt.Sprintf("; public key object left in the token: C_DestroyObject: %v", err)
				return nil
			}
		}
		if len(pubs) > 0 {
			res.Note += " (and its public key object)"
		}
		return nil
	})
	if err != nil {
		return backends.DestroyResult{}, fmt.Errorf("destroy %s: %w", kid, err)
	}
	b.log.Warn("destroyed the private key of a key version in the token", "kid", kid, "label", k.label, "already_absent", res.AlreadyDestroyed)
	return res, nil
}

var _ backends.Destroyer = (*Backend)(nil)
