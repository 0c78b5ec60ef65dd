package signer

import (
	"bytes"
	"encoding/base64"
	"testing"

	asmbase64 "github.com/segmentio/asm/base64"
)

// TestBase64MatchesStdlib: the payload encoder (segmentio/asm, AVX2 on
// amd64) writes exactly what encoding/base64's RawURLEncoding writes, for
// every length up to 4 KiB (each AVX2 block boundary and remainder) and
// for inputs holding every byte value, so that no signing input is ever
// encoded differently; and it is the encoder in use (its start-up check
// passed), so a failing check cannot fall back unnoticed.
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
	if !encoderAgrees(asmbase64.RawURLEncoding.Encode, asmbase64.RawURLEncoding.EncodedLen) {
		t.Fatal("segmentio/asm's encoder fails the start-up check: payloads are encoded by encoding/base64")
	}
	if got := asmbase64.RawURLEncoding.EncodeToString([]byte("foobar")); got != "Zm9vYmFy" {
		t.Errorf("b64(foobar) = %q", got)
	}
	if got := asmbase64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff, 0xbf}, 16)); got != "-_-_"+"-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_" {
		t.Errorf("b64(fb ff bf ...) = %q", got)
	}
}

func checkBase64(t *testing.T, src []byte) {
	t.Helper()
	want := base64.RawURLEncoding.EncodeToString(src)
	if n := asmbase64.RawURLEncoding.EncodedLen(len(src)); n != len(want) {
		t.Fatalf("EncodedLen(%d) = %d, want %d", len(src), n, len(want))
	}
	for name, encode := range map[string]func(dst, src []byte){"segmentio/asm": asmbase64.RawURLEncoding.Encode, "encodePayload": encodePayload} {
		dst := bytes.Repeat([]byte{'!'}, len(want)+8) // nothing past EncodedLen is written
		encode(dst, src)
		if string(dst[:len(want)]) != want || string(dst[len(want):]) != "!!!!!!!!" {
			t.Fatalf("%s(% x)\n got %q\nwant %q", name, src, dst, want)
		}
	}
}

// TestEncoderAgrees: the start-up check refuses an encoder that is wrong
// for one length only, or that writes past EncodedLen, or whose
// EncodedLen is wrong.
func TestEncoderAgrees(t *testing.T) {
	std := base64.RawURLEncoding
	if !encoderAgrees(std.Encode, std.EncodedLen) {
		t.Fatal("encoding/base64 itself fails the check")
	}
	wrongAt := func(n int) func(dst, src []byte) {
		return func(dst, src []byte) {
			std.Encode(dst, src)
			if len(src) == n {
				dst[0] ^= 1
			}
		}
	}
	for _, c := range []struct {
		name   string
		encode func(dst, src []byte)
		length func(int) int
	}{
		{"wrong for 200 bytes", wrongAt(200), std.EncodedLen},
		{"wrong for 1 byte", wrongAt(1), std.EncodedLen},
		{"writes one byte past the end", func(dst, src []byte) { std.Encode(dst, src); dst[std.EncodedLen(len(src))] = 'A' }, std.EncodedLen},
		{"padded length", std.Encode, base64.URLEncoding.EncodedLen},
	} {
		if encoderAgrees(c.encode, c.length) {
			t.Errorf("%s: passed the check", c.name)
		}
	}
}

// FuzzBase64: any input encodes as encoding/base64 encodes it.
func FuzzBase64(f *testing.F) {
	f.Add([]byte("foobar"))
	f.Add(bytes.Repeat([]byte{0xfb, 0xff, 0xbf}, 40))
	f.Fuzz(func(t *testing.T, src []byte) { checkBase64(t, src) })
}
