package mcpserve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/keysvc/keysvc/internal/strictjson"
)

// JSON-RPC 2.0 error codes of the endpoint (JSON-RPC 2.0 §5.1; MCP
// 2025-11-25 reserves -32020..-32099, and -32000..-32019 are
// implementation-defined).
const (
	RPCParseError          = -32700 // body is not one strict JSON value
	RPCInvalidRequest      = -32600 // not an acceptable JSON-RPC request / HTTP request
	RPCMethodNotFound      = -32601 // a method this endpoint does not serve
	RPCInvalidParams       = -32602 // (from the SDK) params of the wrong shape
	RPCUnsupportedProtocol = -32022 // MCP: unsupported protocol version (data: supported, requested)
	RPCMethodNotAllowed    = -32000 // HTTP method other than POST (and OPTIONS preflight)
	RPCOriginNotAllowed    = -32001 // Origin not in the allow-list
	RPCRateLimited         = -32002 // per-client rate limit; see Retry-After
)

// Stable error names, in the data.error member of every error this
// endpoint produces itself (the SDK's own errors carry none).
const (
	ErrMethodNotAllowed      = "method_not_allowed"           // 405
	ErrOriginNotAllowed      = "origin_not_allowed"           // 403
	ErrRateLimited           = "rate_limited"                 // 429
	ErrUnsupportedMediaType  = "unsupported_media_type"       // 415: Content-Type not application/json (utf-8)
	ErrNotAcceptable         = "not_acceptable"               // 406: Accept lacks application/json or text/event-stream
	ErrBodyTooLarge          = "body_too_large"               // 413
	ErrBatchNotSupported     = "batch_not_supported"          // 400: a JSON array (JSON-RPC batch; removed in MCP 2025-06-18)
	ErrInvalidRequest        = "invalid_request"              // 400: not a JSON-RPC 2.0 request or notification
	ErrProtocolVersionNeeded = "protocol_version_required"    // 400: MCP-Protocol-Version missing after initialize
	ErrUnsupportedProtocol   = "unsupported_protocol_version" // 400: MCP-Protocol-Version not served here
	ErrMethodNotFound        = "method_not_found"             // 200: JSON-RPC method not served
)

// ProtocolVersion is the one MCP revision this endpoint implements
// (Streamable HTTP transport, MCP 2025-11-25). An initialize that proposes
// another version is answered with this one (MCP lifecycle, version
// negotiation); every later request must name it in MCP-Protocol-Version.
const ProtocolVersion = "2025-11-25"

// Header names (MCP 2025-11-25, basic/transports §Protocol Version Header).
const headerProtocolVersion = "MCP-Protocol-Version"

// methods are the JSON-RPC methods this endpoint serves; anything else is
// method_not_found before the SDK sees it.
var methods = map[string]bool{
	"initialize":                true,
	"notifications/initialized": true,
	"notifications/cancelled":   true,
	"ping":                      true,
	"tools/list":                true,
	"tools/call":                true,
	"resources/list":            true,
	"resources/read":            true,
	"resources/templates/list":  true,
}

// envelopeLimits bound the request JSON: the verifier's own nesting bound
// (verifier.MaxJSONDepth, 64) plus the JSON-RPC envelope, params and
// arguments around a receipt.
var envelopeLimits = strictjson.Limits{MaxDepth: 72}

// rpcError is a JSON-RPC error the transport front answers by itself.
type rpcError struct {
	status  int
	code    int
	name    string // data.error
	message string
	extra   map[string]any // more data members
	header  http.Header
}

func newRPCError(status, code int, name, format string, a ...any) *rpcError {
	return &rpcError{status: status, code: code, name: name, message: fmt.Sprintf(format, a...)}
}

// writeRPCError writes {"jsonrpc":"2.0","id":id,"error":{code,message,data}}
// with the HTTP status of e (id null when the request had none or could
// not be read, JSON-RPC 2.0 §5).
func writeRPCError(w http.ResponseWriter, id jsontext.Value, e *rpcError) {
	data := map[string]any{"error": e.name}
	for k, v := range e.extra {
		data[k] = v
	}
	if len(id) == 0 {
		id = jsontext.Value("null")
	}
	body, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   any             `json:"error"`
	}{"2.0", json.RawMessage(id), struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	}{e.code, e.message, data}})
	h := w.Header()
	for k, v := range e.header {
		h[k] = v
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.status)
	w.Write(append(body, '\n'))
}

// front validates every HTTP request before the SDK's Streamable HTTP
// handler (next) sees it, in this order: rate limit, HTTP method, Origin,
// Content-Type, Accept, body size, strict JSON, JSON-RPC shape (no
// batches), MCP-Protocol-Version, method allow-list. See the package
// documentation for the table of answers.
type front struct {
	next    http.Handler
	origins map[string]bool
	maxBody int64
	limits  *clientLimits
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ok, wait := f.limits.allow(r); !ok {
		e := newRPCError(http.StatusTooManyRequests, RPCRateLimited, ErrRateLimited, "rate limit for this client exceeded; retry after %s", retryAfter(wait)+"s")
		e.header = http.Header{"Retry-After": {retryAfter(wait)}}
		writeRPCError(w, nil, e)
		return
	}
	origin, originOK := f.checkOrigin(r)
	if !originOK {
		writeRPCError(w, nil, newRPCError(http.StatusForbidden, RPCOriginNotAllowed, ErrOriginNotAllowed, "Origin is not allowed to call this endpoint"))
		return
	}
	if origin != "" {
		// CORS (Fetch standard) for an allowed browser origin.
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", "Content-Type")
	}
	switch r.Method {
	case http.MethodPost:
	case http.MethodOptions:
		if origin != "" {
			h := w.Header()
			h.Set("Access-Control-Allow-Methods", "POST")
			h.Set("Access-Control-Allow-Headers", "Content-Type, Accept, MCP-Protocol-Version")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		fallthrough
	default:
		// No standalone SSE stream (GET) and no sessions to delete
		// (DELETE): the endpoint is stateless (MCP 2025-11-25 transports
		// §2.2.3: 405 means the server offers no SSE stream).
		e := newRPCError(http.StatusMethodNotAllowed, RPCMethodNotAllowed, ErrMethodNotAllowed, "method %s not allowed; POST JSON-RPC messages", r.Method)
		e.header = http.Header{"Allow": {"POST, OPTIONS"}}
		writeRPCError(w, nil, e)
		return
	}
	if e := checkContentType(r.Header.Get("Content-Type")); e != nil {
		writeRPCError(w, nil, e)
		return
	}
	if !accepts(r.Header.Values("Accept")) {
		writeRPCError(w, nil, newRPCError(http.StatusNotAcceptable, RPCInvalidRequest, ErrNotAcceptable, "Accept must list application/json and text/event-stream"))
		return
	}
	body, e := f.readBody(r)
	if e != nil {
		writeRPCError(w, nil, e)
		return
	}
	msg, e := parseMessage(body)
	if e != nil {
		writeRPCError(w, msg.id, e)
		return
	}
	if e := checkProtocolVersion(r.Header.Values(headerProtocolVersion), msg.method); e != nil {
		writeRPCError(w, msg.id, e)
		return
	}
	if !methods[msg.method] {
		if msg.id == nil {
			// An unknown notification is ignored (JSON-RPC 2.0 §4.1:
			// notifications get no response).
			w.WriteHeader(http.StatusAccepted)
			return
		}
		writeRPCError(w, msg.id, newRPCError(http.StatusOK, RPCMethodNotFound, ErrMethodNotFound, "method %q is not served by this endpoint", msg.method))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	f.next.ServeHTTP(w, r)
}

// checkOrigin returns the request's Origin when it is allowed ("" when
// absent: a non-browser client), and false when it is present but not on
// the allow-list (MCP 2025-11-25 transports §Security Warning: servers MUST
// validate Origin to prevent DNS rebinding). Two Origin headers are refused.
func (f *front) checkOrigin(r *http.Request) (string, bool) {
	values := r.Header.Values("Origin")
	switch len(values) {
	case 0:
		return "", true
	case 1:
		o := strings.ToLower(strings.TrimSpace(values[0]))
		return values[0], f.origins[o]
	}
	return "", false
}

// checkContentType requires application/json, with no charset or utf-8.
func checkContentType(v string) *rpcError {
	mt, params, err := mime.ParseMediaType(v)
	if err != nil || mt != "application/json" {
		return newRPCError(http.StatusUnsupportedMediaType, RPCInvalidRequest, ErrUnsupportedMediaType, "Content-Type must be application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return newRPCError(http.StatusUnsupportedMediaType, RPCInvalidRequest, ErrUnsupportedMediaType, "charset must be utf-8")
	}
	return nil
}

// accepts reports whether Accept lists both application/json and
// text/event-stream (MCP 2025-11-25 transports §Sending Messages to the
// Server), wildcards included.
func accepts(values []string) bool {
	var jsonOK, streamOK bool
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(part, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK && streamOK
}

func (f *front) readBody(r *http.Request) ([]byte, *rpcError) {
	tooLarge := newRPCError(http.StatusRequestEntityTooLarge, RPCInvalidRequest, ErrBodyTooLarge, "request body exceeds %d bytes", f.maxBody)
	if r.ContentLength > f.maxBody {
		return nil, tooLarge
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, f.maxBody+1))
	if err != nil {
		return nil, newRPCError(http.StatusBadRequest, RPCParseError, strictjson.CodeInvalidJSON, "reading the request body failed")
	}
	if int64(len(body)) > f.maxBody {
		return nil, tooLarge
	}
	return body, nil
}

// message is what the front reads of a JSON-RPC message.
type message struct {
	id     jsontext.Value // nil for a notification
	method string
}

// parseMessage checks body as one strict JSON value holding one JSON-RPC
// 2.0 request or notification (JSON-RPC 2.0 §4): an object with exactly
// the members jsonrpc ("2.0"), method (a non-empty string), optionally id
// (a string or an integer; null is refused) and params (an object: MCP
// params are always objects). Arrays (batches) are refused, and so are
// responses: this endpoint sends no requests to its clients.
func parseMessage(body []byte) (message, *rpcError) {
	var msg message
	if err := strictjson.Check(body, envelopeLimits); err != nil {
		var se *strictjson.Error
		code := strictjson.CodeInvalidJSON
		text := "body is not valid JSON"
		if errors.As(err, &se) {
			code, text = se.Code, se.Message
		}
		return msg, newRPCError(http.StatusBadRequest, RPCParseError, code, "%s", text)
	}
	v := jsontext.Value(body)
	switch v.Kind() {
	case '[':
		return msg, newRPCError(http.StatusBadRequest, RPCInvalidRequest, ErrBatchNotSupported, "JSON-RPC batches are not supported (MCP %s): send one message per request", ProtocolVersion)
	case '{':
	default:
		return msg, newRPCError(http.StatusBadRequest, RPCInvalidRequest, ErrInvalidRequest, "a JSON-RPC message must be a JSON object")
	}
	invalid := func(format string, a ...any) (message, *rpcError) {
		return msg, newRPCError(http.StatusBadRequest, RPCInvalidRequest, ErrInvalidRequest, format, a...)
	}
	var haveVersion, haveMethod bool
	err := strictjson.WithDecoder(body, func(dec *jsontext.Decoder) error {
		if _, err := dec.ReadToken(); err != nil { // '{'
			return err
		}
		for dec.PeekKind() != '}' {
			tok, err := dec.ReadToken()
			if err != nil {
				return err
			}
			name := tok.String() // a token is valid only until the next read
			val, err := dec.ReadValue()
			if err != nil {
				return err
			}
			switch name {
			case "jsonrpc":
				if val.Kind() != '"' || string(val) != `"2.0"` {
					return errField("jsonrpc must be \"2.0\"")
				}
				haveVersion = true
			case "method":
				var m string
				if val.Kind() != '"' || json.Unmarshal(val, &m) != nil || m == "" {
					return errField("method must be a non-empty string")
				}
				msg.method, haveMethod = m, true
			case "id":
				switch val.Kind() {
				case '"':
				case '0':
					if _, err := strconv.ParseInt(string(val), 10, 64); err != nil {
						return errField("id must be a string or an integer")
					}
				default:
					return errField("id must be a string or an integer")
				}
				msg.id = val.Clone()
			case "params":
				if val.Kind() != '{' {
					return errField("params must be an object")
				}
			case "result", "error":
				return errField("this endpoint sends no requests, so it accepts no responses")
			default:
				return errField(fmt.Sprintf("unknown member %q", printableTruncated(name)))
			}
		}
		return nil
	})
	var fe errField
	switch {
	case errors.As(err, &fe):
		id := msg.id
		msg.id = nil
		m, e := invalid("%s", string(fe))
		m.id = id
		return m, e
	case err != nil:
		return invalid("body is not a JSON-RPC message")
	case !haveVersion:
		return invalid(`jsonrpc "2.0" is required`)
	case !haveMethod:
		return invalid("method is required")
	}
	return msg, nil
}

type errField string

func (e errField) Error() string { return string(e) }

// checkProtocolVersion applies the MCP-Protocol-Version rules
// (MCP 2025-11-25 transports §Protocol Version Header): every request after
// initialize names the negotiated version, and it must be ProtocolVersion
// (anything else: 400). initialize may omit it (the version is negotiated
// in its params). The header appears at most once.
func checkProtocolVersion(values []string, method string) *rpcError {
	if len(values) == 0 {
		if method == "initialize" {
			return nil
		}
		return newRPCError(http.StatusBadRequest, RPCInvalidRequest, ErrProtocolVersionNeeded, "the %s header is required after initialize (this endpoint speaks MCP %s)", headerProtocolVersion, ProtocolVersion)
	}
	requested := strings.TrimSpace(values[0])
	if len(values) > 1 || requested != ProtocolVersion {
		if len(values) > 1 {
			requested = strings.Join(values, ", ")
		}
		e := newRPCError(http.StatusBadRequest, RPCUnsupportedProtocol, ErrUnsupportedProtocol, "unsupported protocol version: this endpoint speaks MCP %s", ProtocolVersion)
		e.extra = map[string]any{"supported": []string{ProtocolVersion}, "requested": printableTruncated(requested)}
		return e
	}
	return nil
}

// printableTruncated bounds a client-supplied string echoed in an error to
// 64 printable ASCII characters.
func printableTruncated(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < 64; i++ {
		if c := s[i]; c >= 0x20 && c <= 0x7e {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// parseOrigins validates allow-list entries: http(s) origins
// (scheme://host[:port], RFC 6454 §6.2), compared in lower case.
func parseOrigins(list []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, o := range list {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("mcpserve: allowed origin %q: want scheme://host[:port]", o)
		}
		out[strings.ToLower(u.Scheme+"://"+u.Host)] = true
	}
	return out, nil
}

// CheckOrigins validates Config.AllowedOrigins entries without building
// the endpoint (for configuration checks).
func CheckOrigins(list []string) error {
	_, err := parseOrigins(list)
	return err
}
