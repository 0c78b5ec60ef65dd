package signer

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"strings"
	"testing"
)

// TestSignEd25519BatchMatchesStdlib holds the batch signer to
// crypto/ed25519 byte for byte: pure Ed25519 is deterministic, so any
// difference in R's encoding (the step the batch shares) or in S shows.
// Every batch size from 0 to 70, and 100, 257 and 1000, each under its own
// key, with message lengths from 0 to 1 KiB.
func TestSignEd25519BatchMatchesStdlib(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(2026, 12))
	sizes := []int{100, 257, 1000}
	for n := 0; n <= 70; n++ {
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		var seed [ed25519.SeedSize]byte
		for i := range seed {
			seed[i] = byte(rng.Uint32())
		}
		key := ed25519.NewKeyFromSeed(seed[:])
		msgs := make([][]byte, n)
		for i := range msgs {
			msgs[i] = make([]byte, rng.IntN(1025))
			for j := range msgs[i] {
				msgs[i][j] = byte(rng.Uint32())
			}
		}
		sigs := make([][ed25519.SignatureSize]byte, n)
		if err := SignEd25519Batch(key, msgs, sigs); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		for i, m := range msgs {
			if want := ed25519.Sign(key, m); !bytes.Equal(sigs[i][:], want) {
				t.Fatalf("n=%d, message %d (%d bytes):\n got %x\nwant %x", n, i, len(m), sigs[i], want)
			}
		}
	}
}

// TestSignEd25519BatchRFC8032 signs the RFC 8032 §7.1 test vectors (TEST
// 1, 2 and 3), each in a batch with other messages under its key, and
// expects the RFC's signatures exactly.
func TestSignEd25519BatchRFC8032(t *testing.T) {
	for _, v := range []struct{ name, seed, pub, msg, sig string }{
		{"TEST 1", "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
			"e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"},
		{"TEST 2", "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb", "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
			"92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"},
		{"TEST 3", "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7", "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
			"6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"},
	} {
		t.Run(v.name, func(t *testing.T) {
			key := ed25519.NewKeyFromSeed(mustHex(t, v.seed))
			if got := hex.EncodeToString(key[ed25519.SeedSize:]); got != v.pub {
				t.Fatalf("public key %s, want %s", got, v.pub)
			}
			msgs := [][]byte{[]byte("before"), mustHex(t, v.msg), []byte("after"), {}}
			sigs := make([][ed25519.SignatureSize]byte, len(msgs))
			if err := SignEd25519Batch(key, msgs, sigs); err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(sigs[1][:]); got != v.sig {
				t.Fatalf("signature\n got %s\nwant %s", got, v.sig)
			}
			for i, m := range msgs {
				if !ed25519.Verify(key.Public().(ed25519.PublicKey), m, sigs[i][:]) {
					t.Fatalf("signature %d does not verify", i)
				}
			}
		})
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSignEd25519BatchErrors(t *testing.T) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	msgs := [][]byte{[]byte("a"), []byte("b")}
	for _, c := range []struct {
		name string
		key  ed25519.PrivateKey
		sigs int
		want string
	}{
		{"short key", key[:32], 2, "signer: Ed25519 private key must be 64 bytes"},
		{"no key", nil, 2, "signer: Ed25519 private key must be 64 bytes"},
		{"one signature short", key, 1, "signer: one signature per message"},
		{"one signature over", key, 3, "signer: one signature per message"},
	} {
		sigs := make([][ed25519.SignatureSize]byte, c.sigs)
		if err := SignEd25519Batch(c.key, msgs, sigs); err == nil || err.Error() != c.want {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
		for i := range sigs {
			if sigs[i] != ([ed25519.SignatureSize]byte{}) {
				t.Errorf("%s: signature %d written on an error", c.name, i)
			}
		}
	}
}

// TestSignBatchMatchesSign: JWSSigner.SignBatch returns Sign's strings,
// for the RFC 8037 vector's key (whose JWS is known: RFC 8037 A.4) among
// other payloads and typs, and for keys it does not batch (ES256; an
// Ed25519 key behind a crypto.Signer, as PKCS#11 and KMS are).
func TestSignBatchMatchesSign(t *testing.T) {
	key, v := rfc8037Key(t)
	vec, err := NewJWSSigner("", AlgEdDSA, key)
	if err != nil {
		t.Fatal(err)
	}
	if !vec.Batches() {
		t.Fatal("an in-memory Ed25519 key does not batch")
	}
	payloads := [][]byte{[]byte(`{"a":1}`), []byte(v["payload"]), []byte(`{}`), []byte(strings.Repeat("x", 1000)), []byte(v["payload"])}
	typs := []string{"JWT", "", "vrp-offer+jws", "", "JWT"}
	out, err := vec.SignBatch(payloads, typs)
	if err != nil {
		t.Fatal(err)
	}
	if out[1] != v["compact_jws"] {
		t.Fatalf("RFC 8037 A.4 JWS\n got %s\nwant %s", out[1], v["compact_jws"])
	}

	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	es, err := NewJWSSigner("es", AlgES256, p256)
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := NewJWSSigner("wrapped", AlgEdDSA, opaqueSigner{key})
	if err != nil {
		t.Fatal(err)
	}
	for name, j := range map[string]*JWSSigner{"in memory": vec, "ES256": es, "crypto.Signer": wrapped} {
		t.Run(name, func(t *testing.T) {
			if j != vec && j.Batches() {
				t.Fatal("batches a key not held in memory as ed25519.PrivateKey")
			}
			out, err := j.SignBatch(payloads, typs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range payloads {
				if j.Alg() == AlgES256 {
					// ES256 signatures are randomized: same signing input.
					one, err := j.Sign(payloads[i], typs[i])
					if err != nil {
						t.Fatal(err)
					}
					if in := out[i][:strings.LastIndexByte(out[i], '.')]; in != one[:strings.LastIndexByte(one, '.')] {
						t.Fatalf("payload %d: signing input %s, want %s", i, in, one)
					}
					continue
				}
				one, err := j.Sign(payloads[i], typs[i])
				if err != nil {
					t.Fatal(err)
				}
				if out[i] != one {
					t.Fatalf("payload %d:\n got %s\nwant %s", i, out[i], one)
				}
			}
		})
	}

	if _, err := vec.SignBatch(payloads, typs[:2]); err == nil || err.Error() != "signer: one typ per payload" {
		t.Fatalf("typs short: %v", err)
	}
	bad := []string{"JWT", "bad\x01typ", "", "", ""}
	if out, err := vec.SignBatch(payloads, bad); err == nil || err.Error() != "signer: typ must be printable ASCII, at most 64 bytes" || out != nil {
		t.Fatalf("bad typ: %v, %d JWS", err, len(out))
	}
	if out, err := vec.SignBatch(nil, nil); err != nil || len(out) != 0 {
		t.Fatalf("empty batch: %v, %d JWS", err, len(out))
	}
}

// opaqueSigner hides the key's type, as a PKCS#11 or KMS crypto.Signer does.
type opaqueSigner struct{ k ed25519.PrivateKey }

func (o opaqueSigner) Public() crypto.PublicKey { return o.k.Public() }
func (o opaqueSigner) Sign(r io.Reader, m []byte, opts crypto.SignerOpts) ([]byte, error) {
	return o.k.Sign(r, m, opts)
}

// BenchmarkSignEd25519Batch compares a batch worker's 50 signatures over
// 408-byte JWS signing inputs (the side-by-side offer's) signed one
// ed25519.Sign after another with SignEd25519Batch; us/sig is per
// signature.
func BenchmarkSignEd25519Batch(b *testing.B) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	msgs := make([][]byte, 50)
	for i := range msgs {
		msgs[i] = bytes.Repeat([]byte{byte('A' + i%26)}, 408)
	}
	sigs := make([][ed25519.SignatureSize]byte, len(msgs))
	perSig := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs))/1e3, "us/sig")
	}
	b.Run("ed25519.Sign", func(b *testing.B) {
		for b.Loop() {
			for i, m := range msgs {
				copy(sigs[i][:], ed25519.Sign(key, m))
			}
		}
		perSig(b)
	})
	for _, n := range []int{2, 16, 50} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			for b.Loop() {
				for lo := 0; lo < len(msgs); lo += n {
					hi := min(lo+n, len(msgs))
					if err := SignEd25519Batch(key, msgs[lo:hi], sigs[lo:hi]); err != nil {
						b.Fatal(err)
					}
				}
			}
			perSig(b)
		})
	}
}

// TestBatchAgrees: the start-up check passes for SignEd25519Batch and
// refuses a signer that is wrong in one bit of one signature, or fails.
func TestBatchAgrees(t *testing.T) {
	if !batchAgrees() {
		t.Fatal("SignEd25519Batch fails its known-answer check")
	}
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	if !batchMatchesSign(key, SignEd25519Batch) {
		t.Fatal("SignEd25519Batch refused")
	}
	flip := func(k ed25519.PrivateKey, m [][]byte, s [][ed25519.SignatureSize]byte) error {
		err := SignEd25519Batch(k, m, s)
		s[len(s)-1][63] ^= 1
		return err
	}
	if batchMatchesSign(key, flip) {
		t.Fatal("a signer wrong in one bit passes")
	}
	failing := func(ed25519.PrivateKey, [][]byte, [][ed25519.SignatureSize]byte) error { return fmt.Errorf("no") }
	if batchMatchesSign(key, failing) {
		t.Fatal("a failing signer passes")
	}
}

// TestSignEd25519BatchAliased: a message that shares memory with sigs (a
// caller signing in place) still gets ed25519.Sign's signature of the
// message as it was. Were sigs written between the two hashes of a
// message, r and k would come from different bytes under one R, and the
// signature together with a correct one would give away the private
// scalar.
func TestSignEd25519BatchAliased(t *testing.T) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	for _, n := range []int{1, 2, 3, 17} {
		sigs := make([][ed25519.SignatureSize]byte, n)
		msgs := make([][]byte, n)
		orig := make([][]byte, n)
		for i := range msgs {
			msgs[i] = []byte(fmt.Sprintf("message %d", i))
			if i%2 == 0 { // every other message is a signature slot's bytes
				copy(sigs[(i+1)%n][:], fmt.Sprintf("a 64-byte message signed in place, slot %d .................", i))
				msgs[i] = sigs[(i+1)%n][:]
			}
			orig[i] = bytes.Clone(msgs[i])
		}
		if err := SignEd25519Batch(key, msgs, sigs); err != nil {
			t.Fatal(err)
		}
		for i := range orig {
			if want := ed25519.Sign(key, orig[i]); !bytes.Equal(sigs[i][:], want) {
				t.Fatalf("n=%d, message %d:\n got %x\nwant %x", n, i, sigs[i], want)
			}
		}
	}
}

// FuzzSignEd25519Batch: for any key, messages (data cut at the given
// lengths) and a message aliased to a signature slot or not, the batch
// signer returns ed25519.Sign's signatures of the messages as given.
func FuzzSignEd25519Batch(f *testing.F) {
	f.Add([]byte("seed"), []byte("some messages to sign in a batch"), []byte{3, 0, 9, 200}, false)
	f.Add([]byte{}, []byte{}, []byte{0, 0}, true)
	f.Add(bytes.Repeat([]byte{0xff}, 32), bytes.Repeat([]byte("x"), 300), []byte{64, 64, 64, 64, 64}, true)
	f.Fuzz(func(t *testing.T, seed, data, cuts []byte, alias bool) {
		if len(cuts) > 64 {
			cuts = cuts[:64]
		}
		var sd [ed25519.SeedSize]byte
		copy(sd[:], seed)
		key := ed25519.NewKeyFromSeed(sd[:])
		msgs := make([][]byte, len(cuts))
		for i, c := range cuts {
			n := min(int(c), len(data))
			msgs[i], data = data[:n], data[n:]
		}
		sigs := make([][ed25519.SignatureSize]byte, len(msgs))
		if alias && len(msgs) > 0 {
			copy(sigs[len(sigs)-1][:], msgs[0])
			msgs[0] = sigs[len(sigs)-1][:len(msgs[0])%65]
		}
		want := make([][]byte, len(msgs))
		for i, m := range msgs {
			want[i] = ed25519.Sign(key, m)
		}
		if err := SignEd25519Batch(key, msgs, sigs); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if !bytes.Equal(sigs[i][:], want[i]) {
				t.Fatalf("message %d of %d (alias %v): got %x, want %x", i, len(msgs), alias, sigs[i], want[i])
			}
		}
	})
}

// TestHeaderCacheBounded: a token holder that sends a new typ with every
// request does not grow the signer's header cache past maxCachedHeaders,
// and every JWS still carries its own typ.
func TestHeaderCacheBounded(t *testing.T) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	j, err := NewJWSSigner("k", AlgEdDSA, key)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * maxCachedHeaders {
		typ := fmt.Sprintf("typ-%d", i)
		jws, err := j.Sign([]byte(`{}`), typ)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := EncodeHeader(ProtectedHeader{Alg: AlgEdDSA, KID: "k", Typ: typ})
		if !strings.HasPrefix(jws, want+".") {
			t.Fatalf("typ %s: JWS %s", typ, jws)
		}
	}
	n := 0
	j.headers.Range(func(any, any) bool { n++; return true })
	if n != maxCachedHeaders || j.nHeaders.Load() != maxCachedHeaders {
		t.Fatalf("%d headers cached (counter %d), want %d", n, j.nHeaders.Load(), maxCachedHeaders)
	}
}
