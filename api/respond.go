package api

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"
)

// jsonAppender is a response body that writes its own JSON. The signing
// responses (one JWS, a transport attestation, a batch of them) implement
// it so that the hot path encodes without reflection into a pooled buffer:
// encoding a 100-item batch by reflection cost as much CPU as 15 of its
// signatures (docs/performance.md). Strings go through jsontext.AppendQuote
// (RFC 8785 §3.2.2.2 minimal escaping); member names are constants.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

var contentTypeJSON = []string{echo.MIMEApplicationJSON}

// bodyPool holds response buffers; buffers grown past maxPooledBody are
// left to the garbage collector so that one huge answer does not pin memory.
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledBody = 1 << 20

// chunkingBuffer is how much output net/http's server holds back before it
// must choose between a Content-Length it counted and chunked framing
// (bufferBeforeChunkingSize in net/http/server.go: 2048 in Go 1.26).
// TestWriteJSONFraming holds a real server to it: every answer of
// writeJSON carries a Content-Length and no Transfer-Encoding.
const chunkingBuffer = 2048

// writeJSON answers status with v in one write with Content-Length, so that
// even a batch answer of 100 JWS goes out without chunked framing. An
// answer of at most chunkingBuffer bytes gets its Content-Length from
// net/http itself, which counts a handler's output when it returns with
// no more than that written (RFC 9112 §6.3; two allocations fewer per
// single sign); a longer one declares it here.
func writeJSON(c echo.Context, status int, v jsonAppender) error {
	bp := bodyPool.Get().(*[]byte)
	b := v.appendJSON((*bp)[:0])
	h := c.Response().Header()
	h["Content-Type"] = contentTypeJSON
	if len(b) > chunkingBuffer {
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
	}
	c.Response().WriteHeader(status)
	_, err := c.Response().Write(b)
	if cap(b) <= maxPooledBody {
		*bp = b
		bodyPool.Put(bp)
	}
	return err
}

// appendString appends s as a JSON string. Invalid UTF-8 (which the strict
// decoder keeps out of every input) would be written as U+FFFD. Printable
// ASCII without '"' and '\\' — every JWS, kid and alg — needs no escape
// and is copied as it is; anything else goes through jsontext.AppendQuote.
func appendString(b []byte, s string) []byte {
	if !plainASCII(s) {
		b, _ = jsontext.AppendQuote(b, s)
		return b
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainASCII reports whether every byte of s is printable ASCII other than
// '"' and '\\' (0x20–0x7e), eight bytes at a time: a JWS is most of a
// signing response's bytes, and the byte loop was 2 % of a single sign's
// instructions (issue 18). The word test may report a byte that is fine
// (a borrow from a flagged byte); the bytes of such a word are then
// checked one by one, so the answer is exact (TestPlainASCII).
func plainASCII(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		q, bs := x^(ones*'"'), x^(ones*'\\')
		// A byte below 0x20, a zero byte of q or bs ('"' or '\\'), or a
		// byte of 0x7f and above (x+1 or x itself has the high bit).
		if ((x-ones*0x20)|(q-ones)|(bs-ones)|(x+ones)|x)&highs != 0 &&
			!plainBytes(s[i:i+8]) {
			return false
		}
	}
	return plainBytes(s[i:])
}

// plainBytes is plainASCII one byte at a time.
func plainBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			return false
		}
	}
	return true
}

// appendJWSMember is appendMember for a compact JWS that keysvc made
// (signer.SignCompact): base64url segments joined by '.' (RFC 7515 §7.1,
// RFC 4648 §5), which JSON needs no escapes for, so the bytes are copied
// without plainASCII's scan (signer's compactAlphabet test holds
// SignCompact to that alphabet, for any typ and payload). A JWS is most of
// a signing answer's bytes, twice in a transport answer (jws and the
// attestation's signature).
func appendJWSMember(b []byte, first bool, name, jws string) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, '"', ':', '"')
	b = append(b, jws...)
	return append(b, '"')
}

// appendMember appends `"name":"value"`, preceded by a comma unless first.
func appendMember(b []byte, first bool, name, value string) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, value)
}

func (r SignResponse) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = appendJWSMember(b, true, "jws", r.JWS)
	b = appendMember(b, false, "kid", r.KID)
	b = appendMember(b, false, "alg", r.Alg)
	return append(b, '}')
}

func (r TransportResponse) appendJSON(b []byte) []byte {
	a := r.Assertion
	b = append(b, `{"assertion":{`...)
	b = appendMember(b, true, "vrp_mcp_profile_version", a.ProfileVersion)
	b = appendMember(b, false, "type", a.Type)
	b = appendMember(b, false, "tool", a.Tool)
	b = appendMember(b, false, "arguments_sha256", a.ArgumentsSHA256)
	b = appendMember(b, false, "served_at", a.ServedAt)
	b = appendMember(b, false, "issuer", a.Issuer)
	if a.OfferRef != "" {
		b = appendMember(b, false, "offer_ref", a.OfferRef)
	}
	if a.SessionID != "" {
		b = appendMember(b, false, "session_id", a.SessionID)
	}
	b = append(b, '}')
	b = appendJWSMember(b, false, "jws", r.JWS)
	b = appendMember(b, false, "kid", r.KID)
	t := r.Attestation
	b = append(b, `,"attestation":{`...)
	b = appendMember(b, true, "layer", t.Layer)
	b = appendMember(b, false, "source", t.Source)
	b = appendJWSMember(b, false, "signature", t.Signature)
	if t.Ref != "" {
		b = appendMember(b, false, "ref", t.Ref)
	}
	b = appendMember(b, false, "valid_from", t.ValidFrom)
	b = appendMember(b, false, "valid_until", t.ValidUntil)
	return append(b, '}', '}')
}

func (e ItemError) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = appendMember(b, true, "code", e.Code)
	b = appendMember(b, false, "message", e.Message)
	return append(b, '}')
}

// batchResponse is the answer of the batch routes: {"results":[...]} with
// each element {"result":{...}} or {"error":{"code","message"}}.
type batchResponse[T jsonAppender] struct {
	Results []BatchResult[T] `json:"results"`
}

func (r batchResponse[T]) appendJSON(b []byte) []byte {
	b = append(b, `{"results":[`...)
	for i, res := range r.Results {
		if i > 0 {
			b = append(b, ',')
		}
		switch {
		case res.Error != nil:
			b = append(b, `{"error":`...)
			b = res.Error.appendJSON(b)
		case res.Result != nil:
			b = append(b, `{"result":`...)
			b = (*res.Result).appendJSON(b)
		default:
			b = append(b, '{')
		}
		b = append(b, '}')
	}
	return append(b, ']', '}')
}

// observerCache resolves a metric child once per label set (at most four
// labels): WithLabelValues hashes its labels on every call, which the
// signing path would otherwise pay per request and per batch item. Label
// values are bounded (see metrics), so the cache is too. The map is
// copied on write and read through one atomic load: the batch path looks
// children up from every core at once, and a read lock's shared counter
// was a cache line each of them wrote per signature.
type observerCache[T any] struct {
	mu sync.Mutex // serializes writers
	m  atomic.Pointer[map[[4]string]T]
}

func (o *observerCache[T]) get(resolve func(...string) T, labels ...string) T {
	var k [4]string
	copy(k[:], labels)
	if m := o.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	next := make(map[[4]string]T, 1)
	if old != nil {
		maps.Copy(next, *old)
	}
	// A copy, so that the caller's variadic labels do not escape (the
	// fast path above then allocates nothing).
	v := resolve(append([]string(nil), labels...)...)
	next[k] = v
	o.m.Store(&next)
	return v
}
