package signer

import (
	"crypto/ed25519"
	"crypto/fips140"
	"crypto/sha512"
	"errors"

	"filippo.io/edwards25519"
	"filippo.io/edwards25519/field"
)

// SignEd25519Batch writes to sigs[i] the pure Ed25519 signature (RFC 8032
// §5.1.6) of msgs[i] under key, for every i: byte for byte what
// ed25519.Sign(key, msgs[i]) returns, since pure Ed25519 is deterministic.
// len(sigs) must equal len(msgs); key must be a 64-byte ed25519.PrivateKey.
// A message may share memory with sigs (sigs is written only after every
// message is read for the last time), but must not change while the call
// runs.
//
// It differs from calling ed25519.Sign in a loop in one step (ADR 0044).
// Step 3 of §5.1.6 encodes the point R = [r]B, which the scalar
// multiplication leaves in extended coordinates (X:Y:Z:T); its encoding
// needs x = X/Z and y = Y/Z, hence one field inversion per signature,
// about a quarter of a signature's time. Here the Z of every signature of
// the batch are inverted together (Montgomery's simultaneous inversion:
// one inversion and three multiplications per signature). Every step is
// the constant-time field and scalar arithmetic of filippo.io/edwards25519,
// the same code crypto/ed25519 runs; nothing branches on secret values.
//
// With crypto/fips140 enabled it signs with ed25519.Sign, one message at a
// time, so that only the validated module signs.
func SignEd25519Batch(key ed25519.PrivateKey, msgs [][]byte, sigs [][ed25519.SignatureSize]byte) error {
	if len(key) != ed25519.PrivateKeySize {
		return errors.New("signer: Ed25519 private key must be 64 bytes")
	}
	if len(sigs) != len(msgs) {
		return errors.New("signer: one signature per message")
	}
	if len(msgs) == 0 {
		return nil
	}
	if len(msgs) == 1 || fips140.Enabled() {
		// Every message is signed before any signature is written: a
		// message may share memory with sigs.
		out := make([][]byte, len(msgs))
		for i, m := range msgs {
			out[i] = ed25519.Sign(key, m)
		}
		for i := range out {
			copy(sigs[i][:], out[i])
		}
		return nil
	}
	// RFC 8032 §5.1.5: the secret scalar s and the prefix from SHA-512 of
	// the seed; the public key A is the key's second half, as in
	// ed25519.Sign.
	seedHash := sha512.Sum512(key[:ed25519.SeedSize])
	var s edwards25519.Scalar
	if _, err := s.SetBytesWithClamping(seedHash[:32]); err != nil {
		return err
	}
	prefix, pub := seedHash[32:], key[ed25519.SeedSize:]

	items := make([]batchItem, len(msgs))
	h := sha512.New()
	var digest [sha512.Size]byte
	// §5.1.6 steps 2 and 3 up to the encoding: r = SHA-512(prefix || M)
	// mod L and R = [r]B, and acc[i] = Z[0]·…·Z[i].
	for i, m := range msgs {
		it := &items[i]
		h.Reset()
		h.Write(prefix)
		h.Write(m)
		if _, err := it.r.SetUniformBytes(h.Sum(digest[:0])); err != nil {
			return err
		}
		it.R.ScalarBaseMult(&it.r)
		_, _, z, _ := it.R.ExtendedCoordinates()
		if i == 0 {
			it.acc.Set(z)
		} else {
			it.acc.Multiply(&items[i-1].acc, z)
		}
	}
	// One inversion of the product, then from the last signature back:
	// 1/Z[i] = acc[i-1] · 1/(Z[0]·…·Z[i]), and 1/(Z[0]·…·Z[i-1]) =
	// Z[i] · 1/(Z[0]·…·Z[i]). Z is never zero for a point ScalarBaseMult
	// returns, so neither is the product.
	var inv, zInv, x, y field.Element
	inv.Invert(&items[len(items)-1].acc)
	for i := len(items) - 1; i >= 0; i-- {
		it := &items[i]
		X, Y, Z, _ := it.R.ExtendedCoordinates()
		if i > 0 {
			zInv.Multiply(&inv, &items[i-1].acc)
			inv.Multiply(&inv, Z)
		} else {
			zInv.Set(&inv)
		}
		x.Multiply(X, &zInv)
		y.Multiply(Y, &zInv)
		// §5.1.2: the encoding of R is y, little-endian, with the sign of
		// x in the top bit.
		copy(it.enc[:], y.Bytes())
		it.enc[31] |= byte(x.IsNegative() << 7)
	}
	// Steps 4 and 5: k = SHA-512(R || A || M) mod L, S = (r + k·s) mod L.
	var k edwards25519.Scalar
	for i, m := range msgs {
		it := &items[i]
		h.Reset()
		h.Write(it.enc[:])
		h.Write(pub)
		h.Write(m)
		if _, err := k.SetUniformBytes(h.Sum(digest[:0])); err != nil {
			return err
		}
		it.S.MultiplyAdd(&k, &s, &it.r)
	}
	// Only now, with every message read for the last time, are the
	// signatures written: a message that shares memory with sigs would
	// otherwise be hashed for r before a write and for k after it, and
	// two values of k under one r give away the private scalar.
	for i := range items {
		copy(sigs[i][:32], items[i].enc[:])
		copy(sigs[i][32:], items[i].S.Bytes())
	}
	// The nonces and the secret scalar are not left in memory.
	clear(items)
	clear(seedHash[:])
	s.Set(edwards25519.NewScalar())
	return nil
}

// batchItem is one signature's state between the steps of
// SignEd25519Batch: its nonce r, its point R = [r]B, the running product
// of the Z coordinates up to it, R's encoding and S.
type batchItem struct {
	r   edwards25519.Scalar
	R   edwards25519.Point
	acc field.Element
	enc [32]byte
	S   edwards25519.Scalar
}
