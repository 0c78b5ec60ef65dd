package signer

import (
	"bytes"
	"encoding/base64"
	"testing"
)

// TestBase64MatchesStdlib: the JWS encoder (segmentio/asm, AVX2 on amd64)
// writes exactly what encoding/base64's RawURLEncoding writes, for every
// length up to 4 KiB (each AVX2 block boundary and remainder) and for
// inputs holding every byte value, so that no signing input or signature
// is ever encoded differently.
func TestBase64MatchesStdlib(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for n := 0; n <= 4096; n++ {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*131 + n*7)
		}
		checkBase64(t, src)
		if n <= len(all) {
			checkBase64(t, all[len(all)-n:])
			checkBase64(t, bytes.Repeat([]byte{0xff}, n))
		}
	}
	// A known value (RFC 4648 §10, in the URL alphabet, no padding), and
	// the two characters that differ from the standard alphabet.
	if got := b64.EncodeToString([]byte("foobar")); got != "Zm9vYmFy" {
		t.Errorf("b64(foobar) = %q", got)
	}
	if got := b64.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff, 0xbf}, 16)); got != "-_-_"+"-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_" {
		t.Errorf("b64(fb ff bf ...) = %q", got)
	}
}

func checkBase64(t *testing.T, src []byte) {
	t.Helper()
	want := base64.RawURLEncoding.EncodeToString(src)
	if b64.EncodedLen(len(src)) != len(want) {
		t.Fatalf("EncodedLen(%d) = %d, want %d", len(src), b64.EncodedLen(len(src)), len(want))
	}
	dst := bytes.Repeat([]byte{'!'}, len(want)+8) // nothing past EncodedLen is written
	b64.Encode(dst, src)
	if string(dst[:len(want)]) != want || string(dst[len(want):]) != "!!!!!!!!" {
		t.Fatalf("Encode(% x)\n got %q\nwant %q", src, dst, want)
	}
}

// FuzzBase64: any input encodes as encoding/base64 encodes it.
func FuzzBase64(f *testing.F) {
	f.Add([]byte("foobar"))
	f.Add(bytes.Repeat([]byte{0xfb, 0xff, 0xbf}, 40))
	f.Fuzz(func(t *testing.T, src []byte) { checkBase64(t, src) })
}
