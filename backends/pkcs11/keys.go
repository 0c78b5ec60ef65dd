package pkcs11

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strings"
	"sync/atomic"

	p11 "github.com/miekg/pkcs11"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/signer"
)

// CreateKey generates a key pair in the token: Ed25519 with
// CKM_EC_EDWARDS_KEY_PAIR_GEN for EdDSA, P-256 with CKM_EC_KEY_PAIR_GEN for
// ES256. Both halves are token objects labelled prefix+kid with a fresh
// random 16-byte CKA_ID; the private half is CKA_PRIVATE, CKA_SENSITIVE,
// not CKA_EXTRACTABLE and may only sign, and CreateKey reads those
// attributes back, refusing a token that did not honour them. The public
// key comes from the public object's CKA_EC_POINT. Handle.Ref is an RFC
// 7512 URI (see the package documentation); Handle.Sealed is nil.
//
// If the surrounding key-history transaction does not commit, the objects
// stay in the token: see Orphans.
func (b *Backend) CreateKey(ctx context.Context, req backends.CreateRequest) (backends.Handle, error) {
	if req.Algorithm != signer.AlgEdDSA && req.Algorithm != signer.AlgES256 {
		return backends.Handle{}, fmt.Errorf("%w: %q", backends.ErrUnsupportedAlgorithm, req.Algorithm)
	}
	if req.KID == "" {
		return backends.Handle{}, errors.New("pkcs11 backend: CreateKey needs a kid")
	}
	label := b.cfg.KeyLabelPrefix + req.KID
	id := make([]byte, keyIDSize)
	if _, err := rand.Read(id); err != nil {
		return backends.Handle{}, err
	}
	var pub crypto.PublicKey
	err := b.withSession(ctx, "generate "+req.Algorithm+" key pair "+label, func(s *session) error {
		if old, err := s.findObjects(labelTemplate(p11.CKO_PRIVATE_KEY, label, nil)); err == nil && len(old) > 0 {
			b.log.Warn("the token already holds a private key with this label, left by a key creation whose key-history transaction did not commit; it is an orphan (see `keysvc backend orphans`); the new key pair gets its own CKA_ID", "label", label)
		}
		pubH, privH, err := s.generate(req.Algorithm, label, id, true)
		if err != nil {
			return err
		}
		if pub, err = s.checkGenerated(req.Algorithm, pubH, privH); err != nil {
			_ = s.c.DestroyObject(s.sh, privH)
			_ = s.c.DestroyObject(s.sh, pubH)
			return err
		}
		return nil
	})
	if err != nil {
		return backends.Handle{}, err
	}
	return backends.Handle{Ref: b.ref(label, id), Public: pub}, nil
}

func (b *Backend) ref(label string, id []byte) string {
	return objectURI{Token: b.cfg.TokenLabel, Object: label, ID: id, Type: "private", ModulePath: b.cfg.ModulePath}.String()
}

// generate creates a key pair for alg; token=false makes session objects
// (backend check).
func (s *session) generate(alg, label string, id []byte, token bool) (pub, priv p11.ObjectHandle, err error) {
	var mech, keyType uint
	var params [][]byte
	switch alg {
	case signer.AlgEdDSA:
		mech, keyType, params = ckmECEdwardsKeyPairGen, ckkECEdwards, [][]byte{oidEd25519, printableEd25519}
	case signer.AlgES256:
		mech, keyType, params = p11.CKM_EC_KEY_PAIR_GEN, p11.CKK_EC, [][]byte{oidP256}
	default:
		return 0, 0, fmt.Errorf("%w: %q", backends.ErrUnsupportedAlgorithm, alg)
	}
	for i, p := range params {
		pubT := publicKeyTemplate(keyType, p, token, label)
		privT := privateKeyTemplate(keyType, token, label)
		if len(id) > 0 {
			pubT = append(pubT, p11.NewAttribute(p11.CKA_ID, id))
			privT = append(privT, p11.NewAttribute(p11.CKA_ID, id))
		}
		pub, priv, err = s.c.GenerateKeyPair(s.sh, []*p11.Mechanism{p11.NewMechanism(mech, nil)}, pubT, privT)
		if err == nil {
			return pub, priv, nil
		}
		var ce p11.Error
		if errors.As(err, &ce) {
			switch ce {
			case p11.CKR_ATTRIBUTE_VALUE_INVALID, p11.CKR_CURVE_NOT_SUPPORTED, p11.CKR_DOMAIN_PARAMS_INVALID:
				if i+1 < len(params) {
					continue // try the curve-name form of CKA_EC_PARAMS
				}
			case p11.CKR_MECHANISM_INVALID:
				return 0, 0, fmt.Errorf("%w: the token does not offer %s (%v)", backends.ErrUnsupportedAlgorithm, mechanismName(mech), err)
			}
		}
		return 0, 0, fmt.Errorf("C_GenerateKeyPair(%s): %w", mechanismName(mech), err)
	}
	return 0, 0, err
}

// checkGenerated reads back what a token made of a new key pair: the
// private half must be sensitive and not extractable; the public key is
// parsed from CKA_EC_POINT.
func (s *session) checkGenerated(alg string, pubH, privH p11.ObjectHandle) (crypto.PublicKey, error) {
	attrs, err := s.c.GetAttributeValue(s.sh, privH, []*p11.Attribute{
		p11.NewAttribute(p11.CKA_SENSITIVE, nil),
		p11.NewAttribute(p11.CKA_EXTRACTABLE, nil),
	})
	if err != nil {
		return nil, fmt.Errorf("C_GetAttributeValue(private key): %w", err)
	}
	if !attrBool(attrs[0]) || attrBool(attrs[1]) {
		return nil, errors.New("pkcs11 backend: the token did not make the private key CKA_SENSITIVE and non-CKA_EXTRACTABLE; refusing it")
	}
	return s.publicKey(alg, pubH)
}

func (s *session) publicKey(alg string, pubH p11.ObjectHandle) (crypto.PublicKey, error) {
	attrs, err := s.c.GetAttributeValue(s.sh, pubH, []*p11.Attribute{p11.NewAttribute(p11.CKA_EC_POINT, nil)})
	if err != nil {
		return nil, fmt.Errorf("C_GetAttributeValue(CKA_EC_POINT): %w", err)
	}
	if alg == signer.AlgEdDSA {
		return parseEd25519Point(attrs[0].Value)
	}
	return parseP256Point(attrs[0].Value)
}

func attrBool(a *p11.Attribute) bool { return len(a.Value) == 1 && a.Value[0] != 0 }

func labelTemplate(class uint, label string, id []byte) []*p11.Attribute {
	t := []*p11.Attribute{p11.NewAttribute(p11.CKA_CLASS, class), p11.NewAttribute(p11.CKA_LABEL, label)}
	if id != nil {
		t = append(t, p11.NewAttribute(p11.CKA_ID, id))
	}
	return t
}

// findObjects returns every object matching t (always ending the search).
func (s *session) findObjects(t []*p11.Attribute) ([]p11.ObjectHandle, error) {
	if err := s.c.FindObjectsInit(s.sh, t); err != nil {
		return nil, fmt.Errorf("C_FindObjectsInit: %w", err)
	}
	var all []p11.ObjectHandle
	var ferr error
	for {
		objs, _, err := s.c.FindObjects(s.sh, 100)
		if err != nil {
			ferr = fmt.Errorf("C_FindObjects: %w", err)
			break
		}
		all = append(all, objs...)
		if len(objs) == 0 {
			break
		}
	}
	if err := s.c.FindObjectsFinal(s.sh); err != nil && ferr == nil {
		ferr = fmt.Errorf("C_FindObjectsFinal: %w", err)
	}
	return all, ferr
}

func (s *session) sign(mech uint, key p11.ObjectHandle, data []byte) ([]byte, error) {
	if err := s.c.SignInit(s.sh, []*p11.Mechanism{p11.NewMechanism(mech, nil)}, key); err != nil {
		return nil, fmt.Errorf("C_SignInit(%s): %w", mechanismName(mech), err)
	}
	sig, err := s.c.Sign(s.sh, data)
	if err != nil {
		return nil, fmt.Errorf("C_Sign(%s): %w", mechanismName(mech), err)
	}
	return sig, nil
}

// Signer finds the private key object named by h.Ref (by CKA_ID and
// CKA_LABEL) and returns a crypto.Signer for it, safe for concurrent use.
// It checks the key against h.Public: the public key object's CKA_EC_POINT
// must equal it (or, without a public object, a test signature must verify
// under it); otherwise the error wraps backends.ErrKeyMismatch, as it does
// for a reference that does not name kid. A token that cannot be reached,
// or that no longer holds the key, gives an error wrapping
// backends.ErrUnavailable.
//
// The signer signs through the session pool with the backend's timeout:
// EdDSA with CKM_EDDSA over the message itself (opts.HashFunc() must be
// 0: pure Ed25519, RFC 8032 §5.1; Ed25519ph and contexts are refused),
// ES256 with CKM_ECDSA over a 32-byte SHA-256 digest (opts.HashFunc() must
// be crypto.SHA256), returning the ASN.1 DER ECDSA-Sig-Value like
// crypto/ecdsa does (signer.ES256RawFromDER makes the JWS r||s).
// Object handles are cached per token connection and looked up again
// after a reconnect.
func (b *Backend) Signer(ctx context.Context, kid string, h backends.Handle) (crypto.Signer, error) {
	k, err := b.keyObject(kid, h)
	if err != nil {
		return nil, err
	}
	err = b.withSession(ctx, "load key "+k.label, func(s *session) error {
		_, err := k.find(s)
		return err
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// keyObject checks that h.Ref names the private key object of key version
// kid on this backend's token and returns a keySigner for it (nothing is
// looked up in the token yet). Errors wrap backends.ErrKeyMismatch for a
// reference that is not this version's, backends.ErrUnavailable for a key
// on another token and backends.ErrUnsupportedAlgorithm for a public key
// keysvc cannot use.
func (b *Backend) keyObject(kid string, h backends.Handle) (*keySigner, error) {
	u, err := parseObjectURI(h.Ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: backend reference %q: %v", backends.ErrKeyMismatch, kid, h.Ref, err)
	}
	switch {
	case len(u.ID) == 0 || u.Object == "":
		return nil, fmt.Errorf("%w: %s: backend reference %q lacks the object id or label", backends.ErrKeyMismatch, kid, h.Ref)
	case u.Type != "" && u.Type != "private":
		return nil, fmt.Errorf("%w: %s: backend reference %q does not name a private key", backends.ErrKeyMismatch, kid, h.Ref)
	case kid == "" || !strings.HasSuffix(u.Object, kid):
		return nil, fmt.Errorf("%w: %s: backend reference names object %q, which is not this key version's", backends.ErrKeyMismatch, kid, u.Object)
	case u.Token != b.cfg.TokenLabel:
		return nil, fmt.Errorf("%w: %s lives on PKCS#11 token %q; this backend serves token %q", backends.ErrUnavailable, kid, u.Token, b.cfg.TokenLabel)
	}
	k := &keySigner{b: b, kid: kid, id: u.ID, label: u.Object}
	switch pub := h.Public.(type) {
	case ed25519.PublicKey:
		k.alg, k.mech, k.pub = signer.AlgEdDSA, ckmEdDSA, pub
	case *ecdsa.PublicKey:
		if pub.Curve != elliptic.P256() {
			return nil, fmt.Errorf("%w: %s: only P-256 ECDSA keys", backends.ErrUnsupportedAlgorithm, kid)
		}
		k.alg, k.mech, k.pub = signer.AlgES256, p11.CKM_ECDSA, pub
	default:
		return nil, fmt.Errorf("%w: %s: public key %T", backends.ErrUnsupportedAlgorithm, kid, h.Public)
	}
	return k, nil
}

// keySigner is a crypto.Signer for one private key object in the token.
type keySigner struct {
	b     *Backend
	kid   string
	alg   string
	mech  uint
	id    []byte
	label string
	pub   crypto.PublicKey
	cache atomic.Pointer[cachedHandle]
}

type cachedHandle struct {
	st *tokenState
	h  p11.ObjectHandle
}

// Public returns the public key recorded in key history.
func (k *keySigner) Public() crypto.PublicKey { return k.pub }

// Sign signs digest in the token; see Backend.Signer. Errors from the
// device wrap backends.ErrUnavailable.
func (k *keySigner) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	switch k.alg {
	case signer.AlgEdDSA:
		if opts.HashFunc() != crypto.Hash(0) {
			return nil, errors.New("pkcs11 backend: Ed25519ph is not supported; sign the message itself with crypto.Hash(0)")
		}
		if o, ok := opts.(*ed25519.Options); ok && o.Context != "" {
			return nil, errors.New("pkcs11 backend: Ed25519ctx is not supported")
		}
	case signer.AlgES256:
		if opts.HashFunc() != crypto.SHA256 || len(digest) != sha256.Size {
			return nil, errors.New("pkcs11 backend: ES256 signs a 32-byte SHA-256 digest (crypto.SHA256)")
		}
	}
	var sig []byte
	err := k.b.withSession(context.Background(), "sign", func(s *session) error {
		h, err := k.handle(s)
		if err != nil {
			return err
		}
		sig, err = s.sign(k.mech, h, digest)
		if errors.Is(err, p11.Error(p11.CKR_OBJECT_HANDLE_INVALID)) || errors.Is(err, p11.Error(p11.CKR_KEY_HANDLE_INVALID)) {
			// The token forgot the handle (object store reloaded, or the
			// object is gone): look the key up again.
			k.cache.Store(nil)
			if h, err = k.find(s); err != nil {
				return err
			}
			sig, err = s.sign(k.mech, h, digest)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sign with %s: %w", k.kid, err)
	}
	if k.alg == signer.AlgEdDSA {
		if len(sig) != ed25519SignatureSize {
			return nil, fmt.Errorf("%w: token returned a %d-byte Ed25519 signature", backends.ErrUnavailable, len(sig))
		}
		return sig, nil
	}
	return ecdsaDER(sig)
}

// ecdsaDER turns the PKCS#11 CKM_ECDSA output (r||s, each the size of the
// group order)
// into the ASN.1 DER ECDSA-Sig-Value crypto.Signer returns for ECDSA.
func ecdsaDER(raw []byte) ([]byte, error) {
	if len(raw) != p256RawSignatureSize {
		return nil, fmt.Errorf("%w: token returned a %d-byte P-256 signature, want %d", backends.ErrUnavailable, len(raw), p256RawSignatureSize)
	}
	return asn1.Marshal(struct{ R, S *big.Int }{new(big.Int).SetBytes(raw[:32]), new(big.Int).SetBytes(raw[32:])})
}

func (k *keySigner) handle(s *session) (p11.ObjectHandle, error) {
	if c := k.cache.Load(); c != nil && c.st == s.st {
		return c.h, nil
	}
	return k.find(s)
}

// find looks the private key up by CKA_ID and CKA_LABEL, checks it against
// the recorded public key and caches its handle for s's token state.
func (k *keySigner) find(s *session) (p11.ObjectHandle, error) {
	objs, err := s.findObjects(labelTemplate(p11.CKO_PRIVATE_KEY, k.label, k.id))
	if err != nil {
		return 0, err
	}
	switch len(objs) {
	case 0:
		// Either the key was deleted or the token went away (SoftHSM2
		// then simply finds nothing): tell the two apart.
		if _, err := s.c.GetTokenInfo(s.st.slot); err != nil {
			return 0, fmt.Errorf("C_GetTokenInfo: %w", err)
		}
		return 0, fmt.Errorf("%w: %s: token %q holds no private key with CKA_ID %x and label %q", backends.ErrUnavailable, k.kid, k.b.cfg.TokenLabel, k.id, k.label)
	case 1:
	default:
		return 0, fmt.Errorf("%w: %s: token %q holds %d private keys with CKA_ID %x and label %q", backends.ErrKeyMismatch, k.kid, k.b.cfg.TokenLabel, len(objs), k.id, k.label)
	}
	priv := objs[0]
	attrs, err := s.c.GetAttributeValue(s.sh, priv, []*p11.Attribute{p11.NewAttribute(p11.CKA_KEY_TYPE, nil)})
	if err != nil {
		return 0, fmt.Errorf("C_GetAttributeValue(CKA_KEY_TYPE): %w", err)
	}
	want := uint(p11.CKK_EC)
	if k.alg == signer.AlgEdDSA {
		want = ckkECEdwards
	}
	if got := attrUint(attrs[0]); got != want {
		return 0, fmt.Errorf("%w: %s: the token's key has CKA_KEY_TYPE 0x%x, not the %s key type 0x%x", backends.ErrKeyMismatch, k.kid, got, k.alg, want)
	}
	if err := k.matchPublic(s, priv); err != nil {
		return 0, err
	}
	k.cache.Store(&cachedHandle{st: s.st, h: priv})
	return priv, nil
}

// matchPublic checks that priv belongs to k.pub: by the public key object
// with the same CKA_ID and label when there is one, else by a test
// signature.
func (k *keySigner) matchPublic(s *session, priv p11.ObjectHandle) error {
	pubs, err := s.findObjects(labelTemplate(p11.CKO_PUBLIC_KEY, k.label, k.id))
	if err != nil {
		return err
	}
	if len(pubs) == 1 {
		got, err := s.publicKey(k.alg, pubs[0])
		if err != nil {
			var ce p11.Error
			if errors.As(err, &ce) {
				return err
			}
			return fmt.Errorf("%w: %s: %v", backends.ErrKeyMismatch, k.kid, err)
		}
		if !publicEqual(got, k.pub) {
			return fmt.Errorf("%w: %s: the token's key (CKA_ID %x) does not match the recorded public key", backends.ErrKeyMismatch, k.kid, k.id)
		}
		return nil
	}
	if err := testSign(s, k.alg, priv, k.pub); err != nil {
		var ce p11.Error
		if errors.As(err, &ce) {
			return err
		}
		return fmt.Errorf("%w: %s: %v", backends.ErrKeyMismatch, k.kid, err)
	}
	return nil
}

// testSign signs a random message with priv in the token and verifies the
// signature under pub with Go's crypto.
func testSign(s *session, alg string, priv p11.ObjectHandle, pub crypto.PublicKey) error {
	msg := make([]byte, 48)
	if _, err := rand.Read(msg); err != nil {
		return err
	}
	switch alg {
	case signer.AlgEdDSA:
		sig, err := s.sign(ckmEdDSA, priv, msg)
		if err != nil {
			return err
		}
		p, ok := pub.(ed25519.PublicKey)
		if !ok || !ed25519.Verify(p, msg, sig) {
			return errors.New("an Ed25519 test signature from the token does not verify with crypto/ed25519")
		}
	case signer.AlgES256:
		d := sha256.Sum256(msg)
		raw, err := s.sign(p11.CKM_ECDSA, priv, d[:])
		if err != nil {
			return err
		}
		p, ok := pub.(*ecdsa.PublicKey)
		if !ok || len(raw) != p256RawSignatureSize ||
			!ecdsa.Verify(p, d[:], new(big.Int).SetBytes(raw[:32]), new(big.Int).SetBytes(raw[32:])) {
			return errors.New("an ES256 test signature from the token does not verify with crypto/ecdsa")
		}
	default:
		return fmt.Errorf("%w: %q", backends.ErrUnsupportedAlgorithm, alg)
	}
	return nil
}

// attrUint decodes a CK_ULONG attribute (host byte order).
func attrUint(a *p11.Attribute) uint {
	switch len(a.Value) {
	case 8:
		return uint(binary.NativeEndian.Uint64(a.Value))
	case 4:
		return uint(binary.NativeEndian.Uint32(a.Value))
	}
	return ^uint(0)
}

func publicEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(equaler)
	return ok && b != nil && ea.Equal(b)
}

// Import stores an existing private key in the token under kid, so a
// deployment can move a key version from the software backend to the HSM
// and keep its kid: C_CreateObject with the private key as CKA_VALUE (the
// 32-byte RFC 8032 seed of an Ed25519 key, RFC 8410 §7; the 32-byte scalar
// of a P-256 key), CKA_SENSITIVE, not CKA_EXTRACTABLE, plus the public key
// object, both labelled prefix+kid with a fresh CKA_ID. key must be an
// ed25519.PrivateKey or a P-256 *ecdsa.PrivateKey (what the software
// backend's Signer returns). Import refuses a label the token already
// holds, and checks the stored key with a test signature. The returned
// Handle is what key history must record for the version from then on
// (its backend reference, with backend "pkcs11"); keysvc's key history is
// not changed here.
func (b *Backend) Import(ctx context.Context, kid string, key crypto.Signer) (backends.Handle, error) {
	if kid == "" {
		return backends.Handle{}, errors.New("pkcs11 backend: Import needs a kid")
	}
	label := b.cfg.KeyLabelPrefix + kid
	id := make([]byte, keyIDSize)
	if _, err := rand.Read(id); err != nil {
		return backends.Handle{}, err
	}
	var alg string
	var keyType uint
	var params, value, point []byte
	switch k := key.(type) {
	case ed25519.PrivateKey:
		if len(k) != ed25519.PrivateKeySize {
			return backends.Handle{}, errors.New("pkcs11 backend: malformed Ed25519 private key")
		}
		alg, keyType, params = signer.AlgEdDSA, ckkECEdwards, oidEd25519
		value = bytes.Clone(k.Seed())
		point = ed25519PointDER(k.Public().(ed25519.PublicKey))
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return backends.Handle{}, fmt.Errorf("%w: only P-256 ECDSA keys", backends.ErrUnsupportedAlgorithm)
		}
		raw, err := k.Bytes()
		if err != nil {
			return backends.Handle{}, err
		}
		alg, keyType, params, value = signer.AlgES256, p11.CKK_EC, oidP256, raw
		if point, err = p256PointDER(&k.PublicKey); err != nil {
			return backends.Handle{}, err
		}
	default:
		return backends.Handle{}, fmt.Errorf("%w: cannot import a %T", backends.ErrUnsupportedAlgorithm, key)
	}
	defer clear(value)
	pub := key.Public()
	err := b.withSession(ctx, "import "+label, func(s *session) error {
		for _, class := range []uint{p11.CKO_PRIVATE_KEY, p11.CKO_PUBLIC_KEY} {
			old, err := s.findObjects(labelTemplate(class, label, nil))
			if err != nil {
				return err
			}
			if len(old) > 0 {
				return fmt.Errorf("pkcs11 backend: token %q already holds an object labelled %q", b.cfg.TokenLabel, label)
			}
		}
		privH, err := s.c.CreateObject(s.sh, append(privateKeyTemplate(keyType, true, label),
			p11.NewAttribute(p11.CKA_EC_PARAMS, params),
			p11.NewAttribute(p11.CKA_VALUE, value),
			p11.NewAttribute(p11.CKA_ID, id),
		))
		if err != nil {
			return fmt.Errorf("C_CreateObject(private key): %w", err)
		}
		pubH, err := s.c.CreateObject(s.sh, append(publicKeyTemplate(keyType, params, true, label),
			p11.NewAttribute(p11.CKA_EC_POINT, point),
			p11.NewAttribute(p11.CKA_ID, id),
		))
		if err != nil {
			_ = s.c.DestroyObject(s.sh, privH)
			return fmt.Errorf("C_CreateObject(public key): %w", err)
		}
		got, err := s.checkGenerated(alg, pubH, privH)
		if err == nil && !publicEqual(got, pub) {
			err = errors.New("pkcs11 backend: the imported public key object does not read back equal")
		}
		if err == nil {
			err = testSign(s, alg, privH, pub)
		}
		if err != nil {
			_ = s.c.DestroyObject(s.sh, privH)
			_ = s.c.DestroyObject(s.sh, pubH)
		}
		return err
	})
	if err != nil {
		return backends.Handle{}, err
	}
	return backends.Handle{Ref: b.ref(label, id), Public: pub}, nil
}

// Orphans lists the labels of key objects in the token that carry the key
// label prefix but whose kid (the label without the prefix) is not in
// knownKIDs — normally every kid in key history. A key pair is created in
// the token inside the key-history transaction, so a process that dies
// before the commit leaves such objects behind. Orphans never deletes
// anything: removing them (e.g. `pkcs11-tool --delete-object`) is an
// operator's decision. With an empty prefix every key object whose label
// is not a known kid is listed, keysvc's or not. Labels are sorted and
// listed once even when a private and a public object share them.
func (b *Backend) Orphans(ctx context.Context, knownKIDs map[string]bool) ([]string, error) {
	found := map[string]bool{}
	err := b.withSession(ctx, "list objects", func(s *session) error {
		clear(found)
		for _, class := range []uint{p11.CKO_PRIVATE_KEY, p11.CKO_PUBLIC_KEY} {
			objs, err := s.findObjects([]*p11.Attribute{p11.NewAttribute(p11.CKA_CLASS, class), p11.NewAttribute(p11.CKA_TOKEN, true)})
			if err != nil {
				return err
			}
			for _, o := range objs {
				attrs, err := s.c.GetAttributeValue(s.sh, o, []*p11.Attribute{p11.NewAttribute(p11.CKA_LABEL, nil)})
				if err != nil {
					return fmt.Errorf("C_GetAttributeValue(CKA_LABEL): %w", err)
				}
				label := string(attrs[0].Value)
				kid, ok := strings.CutPrefix(label, b.cfg.KeyLabelPrefix)
				if ok && kid != "" && !knownKIDs[kid] {
					found[label] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(found))
	for l := range found {
		out = append(out, l)
	}
	sort.Strings(out)
	return out, nil
}

// publicKeyTemplate is the one attribute policy of every public key keysvc
// puts in a token, generated or imported: verify-only, not private.
func publicKeyTemplate(keyType uint, params []byte, token bool, label string) []*p11.Attribute {
	return []*p11.Attribute{
		p11.NewAttribute(p11.CKA_CLASS, p11.CKO_PUBLIC_KEY),
		p11.NewAttribute(p11.CKA_KEY_TYPE, keyType),
		p11.NewAttribute(p11.CKA_EC_PARAMS, params),
		p11.NewAttribute(p11.CKA_TOKEN, token),
		p11.NewAttribute(p11.CKA_PRIVATE, false),
		p11.NewAttribute(p11.CKA_VERIFY, true),
		p11.NewAttribute(p11.CKA_ENCRYPT, false),
		p11.NewAttribute(p11.CKA_WRAP, false),
		p11.NewAttribute(p11.CKA_DERIVE, false),
		p11.NewAttribute(p11.CKA_LABEL, label),
	}
}

// privateKeyTemplate is the one attribute policy of every private key
// keysvc puts in a token, generated or imported: a signing-only key that is
// private, sensitive and never extractable.
func privateKeyTemplate(keyType uint, token bool, label string) []*p11.Attribute {
	return []*p11.Attribute{
		p11.NewAttribute(p11.CKA_CLASS, p11.CKO_PRIVATE_KEY),
		p11.NewAttribute(p11.CKA_KEY_TYPE, keyType),
		p11.NewAttribute(p11.CKA_TOKEN, token),
		p11.NewAttribute(p11.CKA_PRIVATE, true),
		p11.NewAttribute(p11.CKA_SENSITIVE, true),
		p11.NewAttribute(p11.CKA_EXTRACTABLE, false),
		p11.NewAttribute(p11.CKA_SIGN, true),
		p11.NewAttribute(p11.CKA_DECRYPT, false),
		p11.NewAttribute(p11.CKA_UNWRAP, false),
		p11.NewAttribute(p11.CKA_DERIVE, false),
		p11.NewAttribute(p11.CKA_LABEL, label),
	}
}
