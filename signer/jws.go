package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	asmbase64 "github.com/segmentio/asm/base64"
)

// JWS algorithms keysvc signs with (RFC 7518 §3.1, RFC 8037 §3.1).
const (
	AlgEdDSA = "EdDSA" // Ed25519, RFC 8037
	AlgES256 = "ES256" // ECDSA P-256 SHA-256, RFC 7518 §3.4, fixed 64-byte r||s
)

// ES256SignatureSize is the size of an ES256 JWS signature: r||s, 32 bytes each.
const ES256SignatureSize = 64

// b64 encodes JWS parts: base64url without padding (RFC 7515 §2, RFC 4648
// §5).
var b64 = base64.RawURLEncoding

// encodePayload writes b64.Encode's bytes for the payload part of a
// signing input, the longest part of every JWS. It is segmentio/asm's
// encoder — AVX2 on amd64, NEON on arm64, encoding/base64 elsewhere:
// about a quarter of encoding/base64's time for an offer's payload
// (issue 18, ADR 0042) — when that encoder passes a known-answer check
// against encoding/base64 at start-up (encoderAgrees), and b64.Encode
// otherwise. The check matters because the signature covers the encoded
// bytes: a wrong encoding would be a valid JWS over other bytes.
// TestBase64MatchesStdlib and FuzzBase64 hold the encoder to
// encoding/base64 in CI; the check holds it on the machine that signs.
// The assembly's arguments escape, so only heap buffers are passed to it.
var encodePayload = func() func(dst, src []byte) {
	asm := asmbase64.RawURLEncoding
	if encoderAgrees(asm.Encode, asm.EncodedLen) {
		return asm.Encode
	}
	return b64.Encode
}()

// encoderAgrees reports whether encode writes exactly b64's bytes, and
// nothing past encodedLen, for every length from 0 to 256 (each vector
// block size and tail) over inputs that cover every byte value: the
// known-answer check behind encodePayload. It takes a few tens of
// microseconds.
func encoderAgrees(encode func(dst, src []byte), encodedLen func(int) int) bool {
	src := make([]byte, 256)
	for i := range src {
		src[i] = byte(i*167 + 13)
	}
	want := make([]byte, b64.EncodedLen(len(src))+1)
	got := make([]byte, len(want))
	for n := 0; n <= len(src); n++ {
		m := b64.EncodedLen(n)
		if encodedLen(n) != m {
			return false
		}
		want[m], got[m] = 0x5a, 0x5a
		b64.Encode(want, src[:n])
		encode(got, src[:n])
		if string(got[:m+1]) != string(want[:m+1]) {
			return false
		}
	}
	return true
}

// ProtectedHeader is the JOSE header keysvc puts on every JWS. Members are
// serialized in this (lexicographic) order: {"alg","kid","typ"}; typ is
// omitted when empty and kid is omitted only when empty (keysvc always sets
// it; RFC 8037 test vectors do not).
type ProtectedHeader struct {
	Alg string `json:"alg"`
	KID string `json:"kid,omitempty"`
	Typ string `json:"typ,omitempty"`
}

// JWSSigner signs compact JWS (RFC 7515 §7.1) with one key version. The
// base64url protected header is computed once per typ and cached, so the
// hot path is: base64url(payload), one signature, three concatenations.
// Safe for concurrent use; the private key stays inside the crypto.Signer.
type JWSSigner struct {
	kid    string
	alg    string
	signer crypto.Signer
	// headers caches base64url(protected header) by typ, for at most
	// maxCachedHeaders typs: typ is the client's, and an unbounded cache
	// would grow with every distinct typ a token holder sends.
	headers  sync.Map // string -> string
	nHeaders atomic.Int32
}

// NewJWSSigner returns a JWSSigner for key version kid. alg must match the
// signer's public key: AlgEdDSA for ed25519.PublicKey, AlgES256 for a P-256
// *ecdsa.PublicKey. Errors on a mismatch or an unsupported key.
func NewJWSSigner(kid, alg string, s crypto.Signer) (*JWSSigner, error) {
	if err := checkAlg(alg, s.Public()); err != nil {
		return nil, err
	}
	return &JWSSigner{kid: kid, alg: alg, signer: s}, nil
}

// KID returns the key version's kid.
func (j *JWSSigner) KID() string { return j.kid }

// Alg returns the JWS alg.
func (j *JWSSigner) Alg() string { return j.alg }

// Public returns the public key.
func (j *JWSSigner) Public() crypto.PublicKey { return j.signer.Public() }

// Sign returns the compact JWS of payload under the header
// {"alg":<alg>,"kid":<kid>[,"typ":<typ>]}. payload is signed byte for byte as
// given. typ must be printable ASCII of at most 64 bytes.
func (j *JWSSigner) Sign(payload []byte, typ string) (string, error) {
	h, err := j.header(typ)
	if err != nil {
		return "", err
	}
	return SignCompact(h, payload, j.alg, j.signer)
}

// header returns the base64url protected header for typ, cached.
func (j *JWSSigner) header(typ string) (string, error) {
	h, ok := j.headers.Load(typ)
	if !ok {
		if len(typ) > 64 || !printableASCII(typ) {
			return "", errors.New("signer: typ must be printable ASCII, at most 64 bytes")
		}
		enc, err := EncodeHeader(ProtectedHeader{Alg: j.alg, KID: j.kid, Typ: typ})
		if err != nil {
			return "", err
		}
		if j.nHeaders.Add(1) > maxCachedHeaders {
			j.nHeaders.Add(-1)
			return enc, nil
		}
		var loaded bool
		if h, loaded = j.headers.LoadOrStore(typ, enc); loaded {
			j.nHeaders.Add(-1)
		}
	}
	return h.(string), nil
}

// maxCachedHeaders bounds JWSSigner's header cache: keysvc's own typs and
// a node's few fit; past it a header is encoded per signature (~0.3 µs).
const maxCachedHeaders = 64

// Batches reports whether SignBatch signs this key's JWS together (an
// Ed25519 key held in memory, the software backend) rather than one after
// another.
func (j *JWSSigner) Batches() bool {
	_, ok := j.signer.(ed25519.PrivateKey)
	return ok && j.alg == AlgEdDSA && batchAgrees()
}

// batchAgrees is the known-answer check behind Batches, run once, on the
// machine that signs: SignEd25519Batch must return ed25519.Sign's bytes
// for the RFC 8032 §7.1 TEST 1 key over four messages (one of them TEST
// 1's own, the empty message). If it does not, nothing is signed in
// batches. It takes about 0.2 ms.
var batchAgrees = sync.OnceValue(func() bool {
	seed := []byte{
		0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c, 0xc4,
		0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60,
	}
	return batchMatchesSign(ed25519.NewKeyFromSeed(seed), SignEd25519Batch)
})

// BatchSigningAgrees runs the known-answer check behind Batches (once per
// process; later calls return its result): serve calls it at start so
// that a failure is logged there, not found on the first batch.
func BatchSigningAgrees() bool { return batchAgrees() }

// batchMatchesSign reports whether sign writes ed25519.Sign's signatures
// under key for four messages of different lengths, the empty one among
// them.
func batchMatchesSign(key ed25519.PrivateKey, sign func(ed25519.PrivateKey, [][]byte, [][ed25519.SignatureSize]byte) error) bool {
	msgs := [][]byte{nil, []byte("keysvc"), []byte(strings.Repeat("batch", 90)), {0x72}}
	sigs := make([][ed25519.SignatureSize]byte, len(msgs))
	if err := sign(key, msgs, sigs); err != nil {
		return false
	}
	for i, m := range msgs {
		if string(sigs[i][:]) != string(ed25519.Sign(key, m)) {
			return false
		}
	}
	return true
}

// SignBatch returns the compact JWS of each payloads[i] under the header
// with typs[i], byte for byte the strings Sign returns for them one at a
// time. When Batches is true the Ed25519 signatures are computed together
// (SignEd25519Batch: one field inversion for the whole batch, ADR 0044);
// otherwise SignBatch calls Sign for each. typs holds one typ per payload
// (Sign's rule for each). On an error no JWS is returned.
func (j *JWSSigner) SignBatch(payloads [][]byte, typs []string) ([]string, error) {
	if len(typs) != len(payloads) {
		return nil, errors.New("signer: one typ per payload")
	}
	out := make([]string, len(payloads))
	if !j.Batches() || len(payloads) < 2 {
		for i, p := range payloads {
			jws, err := j.Sign(p, typs[i])
			if err != nil {
				return nil, err
			}
			out[i] = jws
		}
		return out, nil
	}
	// Every JWS is laid out in one buffer as header '.' payload '.'
	// signature, and the signatures are computed over the first two parts
	// in place (RFC 7515 §5.1: the signing input).
	const sigLen = 86 // base64url of 64 bytes, unpadded
	headers := make([]string, len(payloads))
	total := 0
	for i, p := range payloads {
		h, err := j.header(typs[i])
		if err != nil {
			return nil, err
		}
		headers[i] = h
		total += signingInputLen(h, p) + 1 + sigLen
	}
	buf := make([]byte, total)
	msgs := make([][]byte, len(payloads))
	ends := make([]int, len(payloads)) // end of each signing input in buf
	off := 0
	for i, p := range payloads {
		end := off + signingInputLen(headers[i], p)
		putSigningInput(buf[off:end], headers[i], p)
		msgs[i], ends[i] = buf[off:end], end
		off = end + 1 + sigLen
	}
	sigs := make([][ed25519.SignatureSize]byte, len(payloads))
	if err := SignEd25519Batch(j.signer.(ed25519.PrivateKey), msgs, sigs); err != nil {
		return nil, err
	}
	for i, end := range ends {
		buf[end] = '.'
		b64.Encode(buf[end+1:end+1+sigLen], sigs[i][:])
	}
	// One string for the whole buffer; each JWS is a substring of it.
	all := string(buf)
	start := 0
	for i, end := range ends {
		out[i] = all[start : end+1+sigLen]
		start = end + 1 + sigLen
	}
	return out, nil
}

// SignDetached returns the raw signature of msg, the RFC 8785 bytes of a
// JSON object (ADR 0028): Ed25519 (RFC 8032 §5.1.6) over msg itself, or
// ES256 over SHA-256(msg) as the fixed 64-byte big-endian r||s in low-S
// form (RFC 7518 §3.4, ADR 0018). msg must begin with '{': a JWS signing
// input (RFC 7515 §5.1) is base64url ASCII and a '.' and can never begin
// with it, so no detached signature is ever a valid JWS signature of this
// key, and no JWS signature a detached one. Errors: msg not beginning with
// '{' (ErrNotDetachedInput), or the backend's.
func (j *JWSSigner) SignDetached(msg []byte) ([]byte, error) {
	if len(msg) == 0 || msg[0] != '{' {
		return nil, ErrNotDetachedInput
	}
	return signInput(msg, j.alg, j.signer)
}

// ErrNotDetachedInput: SignDetached was given bytes that are not a JSON
// object's (they do not begin with '{').
var ErrNotDetachedInput = errors.New("signer: a detached signature covers a JSON object's RFC 8785 bytes only")

// EncodeHeader returns base64url(JSON(h)) with members in the order alg, kid, typ.
func EncodeHeader(h ProtectedHeader) (string, error) {
	raw, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("signer: header: %w", err)
	}
	return b64.EncodeToString(raw), nil
}

// SignCompact signs and assembles "<headerB64>.<base64url(payload)>.<sig>".
// The signing input is the ASCII of the first two segments (RFC 7515 §5.1).
// For ES256 the signer's ASN.1 DER output is converted to the fixed 64-byte
// r||s form (RFC 7518 §3.4).
//
// The result is the one allocation of an Ed25519 signature by an in-memory
// key (ed25519.PrivateKey, the software backend): the signing input is
// built in a pooled buffer and the signature on the stack. Other signers
// (PKCS#11, KMS) get a signing input of their own, which they may keep.
func SignCompact(headerB64 string, payload []byte, alg string, s crypto.Signer) (string, error) {
	n := signingInputLen(headerB64, payload)
	key, inMemory := s.(ed25519.PrivateKey)
	inMemory = inMemory && alg == AlgEdDSA
	var buf []byte
	var bp *[]byte
	if inMemory {
		bp = inputPool.Get().(*[]byte)
		buf = slices.Grow((*bp)[:0], n)[:n]
	} else {
		buf = make([]byte, n)
	}
	putSigningInput(buf, headerB64, payload)
	var sigBuf [ed25519.SignatureSize]byte
	var sig []byte
	if inMemory {
		// Pure Ed25519 (RFC 8032 §5.1.6), as PrivateKey.Sign with
		// crypto.Hash(0) computes it, without the interface call that moves
		// the signature to the heap.
		copy(sigBuf[:], ed25519.Sign(key, buf))
		sig = sigBuf[:]
	} else {
		var err error
		if sig, err = signInput(buf, alg, s); err != nil {
			return "", err
		}
	}
	var enc [88]byte // base64url of a 64-byte signature is 86 bytes
	encSig := enc[:b64.EncodedLen(len(sig))]
	b64.Encode(encSig, sig) // not encodePayload: its assembly would move both arrays to the heap
	var jws strings.Builder
	jws.Grow(n + 1 + len(encSig))
	jws.Write(buf)
	jws.WriteByte('.')
	jws.Write(encSig)
	if bp != nil && cap(buf) <= maxPooledInput {
		*bp = buf
		inputPool.Put(bp)
	}
	return jws.String(), nil
}

// signingInputLen is the length of the JWS signing input (RFC 7515 §5.1)
// of payload under the base64url protected header headerB64.
func signingInputLen(headerB64 string, payload []byte) int {
	return len(headerB64) + 1 + b64.EncodedLen(len(payload))
}

// putSigningInput writes the JWS signing input, headerB64 '.'
// BASE64URL(payload) (RFC 7515 §5.1), into dst, which must be exactly
// signingInputLen long.
func putSigningInput(dst []byte, headerB64 string, payload []byte) {
	n := copy(dst, headerB64)
	dst[n] = '.'
	encodePayload(dst[n+1:], payload)
}

// inputPool holds signing-input buffers for in-memory Ed25519 keys (whose
// ed25519.Sign keeps no reference to its message); buffers grown past
// maxPooledInput are left to the garbage collector.
var inputPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledInput = 64 << 10

func signInput(input []byte, alg string, s crypto.Signer) ([]byte, error) {
	switch alg {
	case AlgEdDSA:
		// Pure Ed25519 (RFC 8032 §5.1.6): no pre-hash, crypto.Hash(0).
		sig, err := s.Sign(rand.Reader, input, crypto.Hash(0))
		if err != nil {
			return nil, fmt.Errorf("signer: Ed25519 sign: %w", err)
		}
		if len(sig) != ed25519.SignatureSize {
			return nil, fmt.Errorf("signer: Ed25519 signature has %d bytes, want %d", len(sig), ed25519.SignatureSize)
		}
		return sig, nil
	case AlgES256:
		digest := sha256.Sum256(input)
		der, err := s.Sign(rand.Reader, digest[:], crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("signer: ES256 sign: %w", err)
		}
		rs, err := ES256RawFromDER(der)
		if err != nil {
			return nil, err
		}
		return LowS(rs), nil
	}
	return nil, fmt.Errorf("signer: unsupported alg %q", alg)
}

// ES256RawFromDER converts an ASN.1 DER ECDSA-Sig-Value (RFC 3279 §2.2.3) to
// the 64-byte big-endian r||s of RFC 7518 §3.4. A signer that already returns
// 64 raw bytes is passed through.
func ES256RawFromDER(sig []byte) ([]byte, error) {
	if len(sig) == ES256SignatureSize {
		return sig, nil
	}
	var v struct{ R, S *big.Int }
	rest, err := asn1.Unmarshal(sig, &v)
	if err != nil || len(rest) != 0 || v.R == nil || v.S == nil || v.R.Sign() <= 0 || v.S.Sign() <= 0 {
		return nil, errors.New("signer: ES256 signature is not a valid DER ECDSA-Sig-Value")
	}
	if v.R.BitLen() > 256 || v.S.BitLen() > 256 {
		return nil, errors.New("signer: ES256 signature component exceeds 32 bytes")
	}
	out := make([]byte, ES256SignatureSize)
	v.R.FillBytes(out[:32])
	v.S.FillBytes(out[32:])
	return out, nil
}

// p256N and p256HalfN are the order n of P-256 and n/2.
var (
	p256N     = elliptic.P256().Params().N
	p256HalfN = new(big.Int).Rsh(p256N, 1)
)

// LowS returns the 64-byte ES256 signature rs in its low-S form: s is
// replaced by n - s when s > n/2 (n the order of P-256). (r, s) and
// (r, n - s) verify alike (SEC 1 v2 §4.1.4); keysvc emits only the low
// form, so every signature it makes has exactly one encoding, whatever the
// backend (software, PKCS#11, KMS) returned (ADR 0018). rs is modified in
// place and returned.
func LowS(rs []byte) []byte {
	if len(rs) != ES256SignatureSize {
		return rs
	}
	s := new(big.Int).SetBytes(rs[32:])
	if s.Cmp(p256HalfN) > 0 {
		s.Sub(p256N, s)
		s.FillBytes(rs[32:])
	}
	return rs
}

func checkAlg(alg string, pub crypto.PublicKey) error {
	switch alg {
	case AlgEdDSA:
		if k, ok := pub.(ed25519.PublicKey); ok && len(k) == ed25519.PublicKeySize {
			return nil
		}
	case AlgES256:
		if k, ok := pub.(*ecdsa.PublicKey); ok && k.Curve == elliptic.P256() {
			return nil
		}
	default:
		return fmt.Errorf("signer: unsupported alg %q (want %s or %s)", alg, AlgEdDSA, AlgES256)
	}
	return fmt.Errorf("signer: public key %T does not match alg %s", pub, alg)
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
