package api

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/labstack/echo/v4"

	"github.com/keysvc/keysvc/signer"
)

// TestAppendJSONMatchesMarshal holds the hand-written response encoders to
// encoding/json/v2's bytes for the same values, including strings that
// need escaping and omitted optional members.
func TestAppendJSONMatchesMarshal(t *testing.T) {
	tr := TransportResponse{
		Assertion: signer.TransportAssertion{ProfileVersion: "1.0", Type: "vrp.mcp.transport.1", Tool: "get_\"offer\"",
			ArgumentsSHA256: "ab", ServedAt: "2026-06-24T11:40:00Z", Issuer: "villaakerlyckan.se", SessionID: "s<1>&\u2028"},
		JWS: "eyJhbGciOiJFZERTQSJ9.eyJhIjoxfQ.-_09azAZ", KID: "k-1", // the base64url alphabet and '.': copied unscanned
		Attestation: Attestation{Layer: "transport", Source: "https://x/.well-known/jwks.json", Signature: "eyJhbGciOiJFZERTQSJ9.eyJhIjoxfQ.-_09azAZ",
			Ref: "offer:\\x\n\t\u0001é", ValidFrom: "2026-06-24T11:40:00Z", ValidUntil: "2026-06-24T12:40:00Z"},
	}
	tr2 := tr
	tr2.Assertion.SessionID, tr2.Assertion.OfferRef, tr2.Attestation.Ref = "", "offer:1", ""
	sr := SignResponse{JWS: "eyJhbGciOiJFZERTQSJ9.eyJhIjoxfQ.-_09azAZ", KID: "villaakerlyckan.se-2026-05-18-01", Alg: "EdDSA"}
	for _, c := range []struct {
		name string
		v    jsonAppender
	}{
		{"sign", sr},
		{"transport", tr},
		{"transport without optional members", tr2},
		{"error", ItemError{Code: "invalid_json", Message: `field "/a\b" is <bad>`}},
		{"batch", batchResponse[SignResponse]{Results: []BatchResult[SignResponse]{
			{Result: &sr}, {Error: &ItemError{Code: "duplicate_key", Message: "duplicate member name in object at /payload"}}, {Result: &sr}}}},
		{"transport batch", batchResponse[TransportResponse]{Results: []BatchResult[TransportResponse]{{Result: &tr}, {Result: &tr2}}}},
	} {
		want, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.v.appendJSON(nil); string(got) != string(want) {
			t.Errorf("%s:\n got  %s\n want %s", c.name, got, want)
		}
	}
}

// TestPlainASCII holds the word-at-a-time test to the byte loop: every
// byte value at every position of strings of 0–24 bytes, over a plain
// background and next to each other byte value.
func TestPlainASCII(t *testing.T) {
	for n := 0; n <= 24; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := []byte(strings.Repeat("eyJ-_.9", 4)[:n])
				b[pos] = byte(c)
				if got, want := plainASCII(string(b)), plainBytes(string(b)); got != want {
					t.Fatalf("%q: plainASCII %v, byte loop %v", b, got, want)
				}
				if pos+1 < n {
					for d := 0; d < 256; d += 17 {
						b[pos+1] = byte(d)
						if got, want := plainASCII(string(b)), plainBytes(string(b)); got != want {
							t.Fatalf("%q: plainASCII %v, byte loop %v", b, got, want)
						}
					}
				}
			}
		}
	}
	if !plainASCII(" ~") || plainASCII("\x1f") || plainASCII("\x7f") || plainASCII(`a"`) || plainASCII(`\`) {
		t.Fatal("boundaries")
	}
}

// rawJSON is a jsonAppender of fixed bytes, for TestWriteJSONFraming.
type rawJSON []byte

func (r rawJSON) appendJSON(b []byte) []byte { return append(b, r...) }

// TestWriteJSONFraming runs writeJSON behind a real net/http server, over
// TCP, for answers around chunkingBuffer: each must arrive with a
// Content-Length equal to its size and no chunked framing, whether
// net/http counted it (at most chunkingBuffer bytes) or writeJSON
// declared it (more).
func TestWriteJSONFraming(t *testing.T) {
	e := echo.New()
	var size atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := e.NewContext(r, w)
		body := append([]byte(`"`), bytes.Repeat([]byte("a"), int(size.Load())-2)...)
		if err := writeJSON(c, http.StatusOK, rawJSON(append(body, '"'))); err != nil {
			t.Error(err)
		}
	}))
	defer srv.Close()
	for _, n := range []int64{2, 100, chunkingBuffer - 1, chunkingBuffer, chunkingBuffer + 1, 4096, 60000} {
		size.Store(n)
		res, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.ContentLength != n || len(got) != int(n) || len(res.TransferEncoding) != 0 || res.Header.Get("Content-Length") != strconv.FormatInt(n, 10) {
			t.Errorf("%d-byte answer: Content-Length %d (header %q), %d bytes read, Transfer-Encoding %v; want Content-Length %d and no chunking",
				n, res.ContentLength, res.Header.Get("Content-Length"), len(got), res.TransferEncoding, n)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%d-byte answer: Content-Type %q", n, ct)
		}
	}
}

// TestObserverCacheOnce: concurrent look-ups of new label sets resolve each
// set exactly once, and every caller gets the child resolved for its set.
func TestObserverCacheOnce(t *testing.T) {
	var o observerCache[string]
	var mu sync.Mutex
	resolved := map[string]int{}
	resolve := func(labels ...string) string {
		mu.Lock()
		defer mu.Unlock()
		key := strings.Join(labels, "/")
		resolved[key]++
		return key
	}
	sets := [][]string{{"software", "sign"}, {"pkcs11", "sign"}, {"awskms", "sign"}, {"software", "sign", "x", "y"}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				labels := sets[(g+i)%len(sets)]
				if got, want := o.get(resolve, labels...), strings.Join(labels, "/"); got != want {
					t.Errorf("get(%v) = %q, want %q", labels, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, labels := range sets {
		if n := resolved[strings.Join(labels, "/")]; n != 1 {
			t.Errorf("label set %v resolved %d times, want once", labels, n)
		}
	}
}
