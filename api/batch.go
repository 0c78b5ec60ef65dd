package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/signer"
)

// ItemError is the error of one batch item.
type ItemError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// BatchResult is one item's result: the single-item response, or an error.
type BatchResult[T any] struct {
	Result *T         `json:"result,omitempty"`
	Error  *ItemError `json:"error,omitempty"`
}

// decodeBatch decodes a batch body {"items": [...]}. The envelope itself is
// held to the strict rules (JSON object, only "items", once, an array,
// nothing after it); each item stays raw and is decoded strictly on its
// own, so that a duplicate name or invalid UTF-8 inside one item fails that
// item alone.
func (s *Server) decodeBatch(body []byte) ([]jsontext.Value, error) {
	lenient := []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}
	malformed := fail(http.StatusBadRequest, strictjson.CodeInvalidJSON, `body must be a JSON object {"items": [...]}`)
	dec := jsontext.NewDecoder(bytes.NewReader(body), lenient...)
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, malformed
	}
	// Items are slices of body, which is ours: no copy per item.
	items := make([]jsontext.Value, 0, min(s.cfg.MaxBatchItems, 128))
	seen := false
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return nil, malformed
		}
		switch {
		case name.String() != "items":
			return nil, fail(http.StatusBadRequest, strictjson.CodeUnknownField, "unknown field /%s", name.String())
		case seen:
			return nil, fail(http.StatusBadRequest, strictjson.CodeDuplicateKey, "duplicate member name in object at /")
		}
		seen = true
		if dec.PeekKind() != '[' {
			return nil, fail(http.StatusBadRequest, strictjson.CodeInvalidField, "field /items has the wrong type or value")
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, malformed
		}
		for dec.PeekKind() != ']' {
			v, err := dec.ReadValue()
			if err != nil {
				return nil, malformed
			}
			if len(items) == s.cfg.MaxBatchItems {
				return nil, fail(http.StatusBadRequest, CodeBatchTooLarge, "at most %d items per batch", s.cfg.MaxBatchItems)
			}
			end := int(dec.InputOffset())
			items = append(items, jsontext.Value(body[end-len(v):end:end]))
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, malformed
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, malformed
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, fail(http.StatusBadRequest, strictjson.CodeTrailingData, "unexpected data after the JSON value")
	}
	if len(items) == 0 {
		return nil, fail(http.StatusBadRequest, CodeInvalidRequest, "items must hold at least one item")
	}
	return items, nil
}

func itemError(err error) *ItemError {
	var ae *apiError
	if errors.As(err, &ae) {
		return &ItemError{Code: ae.Code, Message: ae.Message}
	}
	return &ItemError{Code: CodeInternal, Message: "internal error"}
}

// runBatch answers a batch, results in item order. Each item is signed by
// the version that signs at its own signing instant (ADR 0014), so a batch
// that straddles an activation never signs past a version's window. A
// failure of the backend itself fails the whole batch with its status,
// since no later item could succeed; so does a failure to record the
// signatures for the transparency log (all of them are withheld).
//
// The items are signed in contiguous runs on up to GOMAXPROCS goroutines
// (batchWorkers; ADR 0032): a batch's latency at one connection then
// falls with the cores, and under load the same CPU is spent.
func runBatch[R any, T issuer](s *Server, c echo.Context, one func(req R, run *backendRun) (T, error)) error {
	body, err := s.readBody(c, s.cfg.MaxBatchBodyBytes)
	if err != nil {
		return err
	}
	// A batch of canonical items is decoded in one pass (reqs), anything
	// else by the envelope decoder and then item by item.
	items, reqs, ok := canonicalBatch[R](body, s.cfg.MaxBatchItems)
	if !ok {
		if items, err = s.decodeBatch(body); err != nil {
			return err
		}
	}
	if err := s.chargeBatch(c, len(items)); err != nil {
		return err
	}
	out := batchResponse[T]{Results: make([]BatchResult[T], len(items))}
	results := make([]T, len(items)) // one allocation for every item's result
	// signRun signs items[lo:hi] and stops at a backend failure (5xx).
	signRun := func(lo, hi int) error {
		var req R // one per run, zeroed per item: decoding into it allocates once
		run := new(backendRun)
		defer run.flush(s)
		for i := lo; i < hi; i++ {
			raw := items[i]
			if int64(len(raw)) > s.cfg.MaxBodyBytes {
				// An item is bounded like the single request it stands for.
				out.Results[i].Error = &ItemError{Code: CodeBodyTooLarge, Message: fmt.Sprintf("item exceeds %d bytes (the request body limit)", s.cfg.MaxBodyBytes)}
				continue
			}
			if reqs != nil {
				req = reqs[i]
			} else {
				req = *new(R)
				if err := decodeItem(raw, &req); err != nil {
					out.Results[i].Error = itemError(err)
					continue
				}
			}
			run.item = i
			res, err := one(req, run)
			if err != nil {
				var ae *apiError
				if errors.As(err, &ae) && ae.Status >= 500 {
					return err
				}
				out.Results[i].Error = itemError(err)
				continue
			}
			results[i] = res
			out.Results[i].Result = &results[i]
		}
		// The run's in-memory Ed25519 signatures, computed together.
		return s.signPending(run, func(i int, jws string) { results[i] = results[i].withJWS(jws).(T) })
	}
	if w := batchWorkers(len(items)); w <= 1 {
		if err := signRun(0, len(items)); err != nil {
			return err
		}
	} else {
		// Runs in item order: the first failure reported is that of the
		// lowest item, as in a sequential pass.
		errs := make([]error, w)
		var wg sync.WaitGroup
		for k := range w {
			lo, hi := k*len(items)/w, (k+1)*len(items)/w
			wg.Go(func() { errs[k] = signRun(lo, hi) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
	}
	issued := make([]string, 0, len(items))
	for _, r := range out.Results {
		if r.Result != nil {
			issued = append(issued, (*r.Result).issuedJWS())
		}
	}
	if err := s.recordIssued(c, issued...); err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// minItemsPerWorker is the smallest run of batch items worth a goroutine
// of its own: 16 Ed25519 signatures are about 0.5 ms of CPU here, against
// a few microseconds to start and join a goroutine.
const minItemsPerWorker = 16

// batchWorkers is how many goroutines sign a batch of n items: one per
// core (GOMAXPROCS), at most one per minItemsPerWorker items, at least one.
// A variable so that tests can compare sequential with parallel signing.
var batchWorkers = defaultBatchWorkers

func defaultBatchWorkers(n int) int {
	return max(1, min(runtime.GOMAXPROCS(0), n/minItemsPerWorker))
}

func (s *Server) signBatch(c echo.Context) error {
	e, err := s.entry(c.Param("name"))
	if err != nil {
		return err
	}
	return runBatch(s, c, func(req signRequest, run *backendRun) (SignResponse, error) { return s.signOne(e, req, run) })
}

func (s *Server) transportBatch(c echo.Context) error {
	e, err := s.entry(c.Param("name"))
	if err != nil {
		return err
	}
	return runBatch(s, c, func(req transportRequest, run *backendRun) (TransportResponse, error) {
		return s.transportOne(e, req, run)
	})
}

// commonShapeDecoder is a request type (a single request or a batch
// item) with a decoder of its own for the shape nearly every request has;
// decodeCommon returns false for anything else, which then goes to
// strictjson.Decode and its exact errors. It exists because reflection
// decoding was 7 % of a batch's server CPU (issue 18).
type commonShapeDecoder interface {
	decodeCommon(raw []byte) bool
}

// decodeItem decodes raw, a request body or a batch item that the caller
// owns (the result may point into it), into *req: through R's
// decodeCommon when it has one and raw has the common shape, else through
// strictjson.Decode, whose errors come back as the 400 jsonError maps
// them to. *req must be zero.
func decodeItem[R any](raw []byte, req *R) error {
	if fd, ok := any(req).(commonShapeDecoder); ok && fd.decodeCommon(raw) {
		return nil
	}
	*req = *new(R) // decodeCommon may have set members before it gave up
	if err := strictjson.Decode(raw, req, strictjson.Limits{}); err != nil {
		return jsonError(err)
	}
	return nil
}

// decodeCommon decodes {"payload":{...}} with an optional "typ" string in
// one pass, holding it to strictjson.Decode's rules: strictjson's pooled
// decoder refuses duplicate names, invalid UTF-8 and lone surrogates, the
// payload's nesting is bounded as strictjson's default depth bounds it,
// and nothing may follow the object. Payload is a slice of raw (the batch
// body, which the handler owns) with its capacity cut at its end, so that
// formatting it in place cannot reach the next item.
func (r *signRequest) decodeCommon(raw []byte) bool {
	if r.decodeCanonical(raw) {
		return true
	}
	*r = signRequest{}
	ok := false
	_ = strictjson.WithDecoder(raw, func(dec *jsontext.Decoder) error {
		if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
			return nil
		}
		for dec.PeekKind() == '"' {
			name, err := dec.ReadValue() // quoted; a name with escapes matches neither case
			if err != nil {
				return nil
			}
			switch string(name) {
			case `"payload"`:
				if dec.PeekKind() != '{' {
					return nil
				}
				v, err := dec.ReadValue()
				if err != nil || nestingDepth(v) > maxPayloadDepth {
					return nil
				}
				end := int(dec.InputOffset())
				r.Payload = jsontext.Value(raw[end-len(v) : end : end])
			case `"typ"`:
				if dec.PeekKind() != '"' {
					return nil
				}
				tok, err := dec.ReadToken()
				if err != nil {
					return nil
				}
				r.Typ = tok.String()
			default:
				return nil
			}
		}
		if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
			return nil
		}
		if _, err := dec.ReadToken(); err != io.EOF {
			return nil // trailing data
		}
		ok = r.Payload != nil
		return nil
	})
	return ok
}

// decodeCanonical decodes the bytes a careful client sends, with no
// decoder at all: exactly {"payload":P} or {"payload":P,"typ":"T"}, no
// whitespace, where P is an object that signer.CanonicalObjectPrefix
// measures (valid, already RFC 8785, nested at most maxPayloadDepth deep)
// and T printable ASCII without '"' or '\'. Such bytes are one JSON value
// with distinct names, valid UTF-8 and bounded depth — what
// strictjson.Decode checks — and P needs no formatting, so r.canonical is
// set, with r.layer the layer P claims (read by the same scan). Anything
// else returns false.
func (r *signRequest) decodeCanonical(raw []byte) bool {
	return r.decodeCanonicalAt(raw) == len(raw)
}

// decodeCanonicalAt is decodeCanonical for an item at the start of b,
// which may go on past it (the rest of a batch body): it returns the
// item's length, having set *r, or -1 with *r unchanged when b does not
// start with a canonical item. Payload is a slice of b, its capacity cut
// at its end.
func (r *signRequest) decodeCanonicalAt(b []byte) int {
	const head, typHead = `{"payload":`, `,"typ":"`
	if len(b) < len(head)+3 || string(b[:len(head)]) != head || b[len(head)] != '{' {
		return -1
	}
	n, layer := signer.CanonicalObjectPrefix(b[len(head):], maxPayloadDepth)
	if n < 0 {
		return -1
	}
	end := len(head) + n
	typ, size := "", 0
	switch tail := b[end:]; {
	case len(tail) > 0 && tail[0] == '}':
		size = end + 1
	case len(tail) >= len(typHead) && string(tail[:len(typHead)]) == typHead:
		t := tail[len(typHead):]
		q := bytes.IndexByte(t, '"')
		if q < 0 || q+1 >= len(t) || t[q+1] != '}' || !plainASCII(string(t[:q])) {
			return -1
		}
		typ, size = string(t[:q]), end+len(typHead)+q+2
	default:
		return -1
	}
	*r = signRequest{Payload: jsontext.Value(b[len(head):end:end]), Typ: typ, canonical: true, layer: layer}
	return size
}

// canonicalItemDecoder is a request type whose canonical batch item can
// be measured and decoded in the same pass (decodeCanonicalAt), so that a
// batch of such items is scanned once, not once for its envelope and
// again per item (canonicalBatch).
type canonicalItemDecoder interface {
	decodeCanonicalAt(b []byte) int
}

// canonicalBatch decodes body when it is exactly {"items":[I,...]} with
// no whitespace, 1 to maxItems items, each one a canonical item of R
// (decodeCanonicalAt): the items (slices of body) and their requests. For
// anything else — whitespace, another member, an item of another form,
// too many items — it returns ok false, and decodeBatch and decodeItem
// decode the body as before, with their exact errors. What it accepts,
// that path accepts too, with the same items and requests
// (FuzzCanonicalBatch).
func canonicalBatch[R any](body []byte, maxItems int) (items []jsontext.Value, reqs []R, ok bool) {
	const head = `{"items":[`
	if _, can := any(new(R)).(canonicalItemDecoder); !can || len(body) < len(head) || string(body[:len(head)]) != head {
		return nil, nil, false
	}
	rest := body[len(head):]
	items = make([]jsontext.Value, 0, min(maxItems, 128))
	reqs = make([]R, 0, min(maxItems, 128))
	for len(items) < maxItems {
		// Decoded in place: a local R behind the interface would escape,
		// one allocation per item.
		reqs = append(reqs, *new(R))
		n := any(&reqs[len(reqs)-1]).(canonicalItemDecoder).decodeCanonicalAt(rest)
		if n < 0 {
			return nil, nil, false
		}
		items = append(items, jsontext.Value(rest[:n:n]))
		switch rest = rest[n:]; {
		case len(rest) > 0 && rest[0] == ',':
			rest = rest[1:]
		case string(rest) == "]}":
			return items, reqs, true
		default:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// decodeCommon decodes a transport request whose members are all of the
// expected kinds — "arguments" an object, every other member a string —
// in one pass, under the rules of signRequest.decodeCommon (duplicate
// names, UTF-8, nesting, trailing data). Arguments is a slice of raw,
// its capacity cut at its end. Any other member, or a member of another
// kind, returns false.
func (r *transportRequest) decodeCommon(raw []byte) bool {
	if r.decodePlain(raw) {
		return true
	}
	ok := false
	_ = strictjson.WithDecoder(raw, func(dec *jsontext.Decoder) error {
		if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
			return nil
		}
		for dec.PeekKind() == '"' {
			name, err := dec.ReadValue() // quoted; a name with escapes matches no case
			if err != nil {
				return nil
			}
			_, dst, known := r.member(string(name[1 : len(name)-1]))
			switch {
			case !known:
				return nil
			case dst == nil: // arguments
				if dec.PeekKind() != '{' {
					return nil
				}
				v, err := dec.ReadValue()
				if err != nil || nestingDepth(v) > maxPayloadDepth {
					return nil
				}
				end := int(dec.InputOffset())
				r.Arguments = jsontext.Value(raw[end-len(v) : end : end])
				continue
			}
			if dec.PeekKind() != '"' {
				return nil
			}
			tok, err := dec.ReadToken()
			if err != nil {
				return nil
			}
			*dst = tok.String()
		}
		if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
			return nil
		}
		if _, err := dec.ReadToken(); err != io.EOF {
			return nil // trailing data
		}
		ok = r.Arguments != nil
		return nil
	})
	return ok
}

// decodePlain decodes, with no decoder at all, the transport request a
// careful client sends: one object without whitespace whose members are
// known names, each once, written without escapes — "arguments" an
// object that signer.CanonicalPrefix measures (valid, already RFC 8785,
// nested at most maxPayloadDepth deep), every other member a string of
// printable ASCII without '"' or '\'. Such bytes pass strictjson.Decode's
// checks (one value, distinct names, valid UTF-8, bounded depth) and
// decode to the same members (TestTransportDecodeCommonMatchesStrict,
// FuzzTransportDecodeCommon). Anything else returns false with *r
// unchanged, for the decoder to take. Arguments is a slice of raw, its
// capacity cut at its end.
func (r *transportRequest) decodePlain(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '{' {
		return false
	}
	var out transportRequest
	var seen uint8
	for i := 1; ; {
		name, ok := plainStringAt(raw, i)
		if !ok || i+len(name)+2 >= len(raw) || raw[i+len(name)+2] != ':' {
			return false
		}
		i += len(name) + 3
		bit, dst, known := out.member(string(name))
		if !known {
			return false
		}
		if seen&bit != 0 {
			return false // a duplicate: the decoder refuses it with its error
		}
		seen |= bit
		if dst == nil {
			if i >= len(raw) || raw[i] != '{' {
				return false
			}
			n := signer.CanonicalPrefix(raw[i:], maxPayloadDepth)
			if n < 0 {
				return false
			}
			out.Arguments = jsontext.Value(raw[i : i+n : i+n])
			i += n
		} else {
			v, ok := plainStringAt(raw, i)
			if !ok {
				return false
			}
			*dst = string(v)
			i += len(v) + 2
		}
		switch {
		case i < len(raw) && raw[i] == ',':
			i++
		case i == len(raw)-1 && raw[i] == '}' && out.Arguments != nil:
			*r = out
			return true
		default:
			return false
		}
	}
}

// plainStringAt returns the contents of the JSON string at b[i] when it
// is written without escapes in printable ASCII other than '"' and '\\'
// (plainASCII, as decodeCanonicalAt reads typ).
func plainStringAt(b []byte, i int) ([]byte, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, false
	}
	q := bytes.IndexByte(b[i+1:], '"')
	if q < 0 || !plainASCII(string(b[i+1:i+1+q])) {
		return nil, false
	}
	return b[i+1 : i+1+q], true
}

// member maps a transport request's member name (unquoted, as written
// without escapes) to its bit in decodePlain's set of members seen and
// to its string field; dst is nil for "arguments", the one object
// member. known is false for any other name. Both decoders of the
// request read its members through it.
func (r *transportRequest) member(name string) (bit uint8, dst *string, known bool) {
	switch name {
	case "arguments":
		return 1 << 0, nil, true
	case "tool":
		return 1 << 1, &r.Tool, true
	case "served_at":
		return 1 << 2, &r.ServedAt, true
	case "offer_ref":
		return 1 << 3, &r.OfferRef, true
	case "session_id":
		return 1 << 4, &r.SessionID, true
	case "ref":
		return 1 << 5, &r.Ref, true
	case "valid_for":
		return 1 << 6, &r.ValidFor, true
	}
	return 0, nil, false
}

// maxPayloadDepth is how deeply a payload may nest inside its item under
// strictjson's default depth limit (32 levels, the item's object is one).
const maxPayloadDepth = 31

// nestingDepth is the deepest nesting of objects and arrays in v, valid
// JSON (v itself counts as one when it is an object or array).
func nestingDepth(v []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped character
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}
