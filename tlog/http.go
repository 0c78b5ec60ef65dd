package tlog

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

// Limits of the HTTP surface.
const (
	// MaxAddBodyBytes bounds a POST add body.
	MaxAddBodyBytes = 4 << 10
	// MaxAddBatchBodyBytes bounds a POST add-batch body (10,000 entries of
	// about 110 bytes each, with room for whitespace).
	MaxAddBatchBodyBytes = 2 << 20
	// DefaultArchiveLimit and MaxArchiveLimit bound one page of GET
	// sth/archive.
	DefaultArchiveLimit = 100
	MaxArchiveLimit     = 1000
)

// Handler returns the operator's HTTP surface: the VRP Transparency Log
// v0.1 endpoints under tlogfmt.PathPrefix (add, add-batch, sth, proof,
// consistency, sth/archive, jwks.json, vkey) and, at the root, the C2SP
// tlog-tiles resources Tessera writes (/tile/…, /tile/entries/…, served
// as static files) and the checkpoint the operator has recorded
// (/checkpoint, see serveCheckpoint), so stock tlog clients and witnesses
// read the same tree. Every error answers
// {"error":{"code","message"}} with a tlogfmt.Code* code.
func (o *Operator) Handler() http.Handler {
	return http.HandlerFunc(o.serveHTTP)
}

func (o *Operator) serveHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if p == "/checkpoint" {
		o.serveCheckpoint(w, r)
		return
	}
	if strings.HasPrefix(p, "/tile/") {
		o.serveStatic(w, r)
		return
	}
	name, ok := strings.CutPrefix(p, tlogfmt.PathPrefix)
	if !ok {
		writeError(w, http.StatusNotFound, tlogfmt.CodeNotFound, "no such endpoint")
		return
	}
	type route struct {
		method string
		h      func(http.ResponseWriter, *http.Request)
	}
	routes := map[string]route{
		tlogfmt.EndpointAdd:         {http.MethodPost, o.handleAdd},
		tlogfmt.EndpointAddBatch:    {http.MethodPost, o.handleAddBatch},
		tlogfmt.EndpointSTH:         {http.MethodGet, o.handleSTH},
		tlogfmt.EndpointProof:       {http.MethodGet, o.handleProof},
		tlogfmt.EndpointConsistency: {http.MethodGet, o.handleConsistency},
		tlogfmt.EndpointArchive:     {http.MethodGet, o.handleArchive},
		tlogfmt.EndpointJWKS:        {http.MethodGet, o.handleJWKS},
		tlogfmt.EndpointVKey:        {http.MethodGet, o.handleVKey},
	}
	rt, ok := routes[name]
	if !ok {
		writeError(w, http.StatusNotFound, tlogfmt.CodeNotFound, "no such endpoint")
		return
	}
	if r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", rt.method)
		writeError(w, http.StatusMethodNotAllowed, tlogfmt.CodeMethodNotAllowed, "use "+rt.method)
		return
	}
	if rt.method == http.MethodPost && o.cfg.SubmitInProcessOnly {
		writeError(w, http.StatusForbidden, tlogfmt.CodeForbidden, "this log takes submissions from its own process only (keysvc serve's embedded log); its reads are public")
		return
	}
	if rt.method == http.MethodPost && !o.submitAllowed(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="keysvc-tlog"`)
		writeError(w, http.StatusUnauthorized, tlogfmt.CodeUnauthorized, "submitting needs a valid bearer token")
		return
	}
	rt.h(w, r)
}

// submitAllowed checks the submitter's bearer token when the operator has
// any (Config.SubmitTokenHashes): SHA-256 of the token, compared in
// constant time with every configured hash.
func (o *Operator) submitAllowed(r *http.Request) bool {
	if len(o.cfg.SubmitTokenHashes) == 0 {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return false
	}
	h := sha256.Sum256([]byte(tok))
	match := 0
	for _, want := range o.cfg.SubmitTokenHashes {
		match |= subtle.ConstantTimeCompare(h[:], want[:])
	}
	return match == 1
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var b tlogfmt.ErrorResponse
	b.Error.Code, b.Error.Message = code, msg
	writeJSON(w, status, b, "no-store")
}

func writeJSON(w http.ResponseWriter, status int, v any, cacheControl string) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", cacheControl)
	w.WriteHeader(status)
	w.Write(body) //nolint:errcheck // the client went away
}

func (o *Operator) internal(w http.ResponseWriter, what string, err error) {
	o.log.Error("tlog: "+what, "err", err)
	writeError(w, http.StatusInternalServerError, tlogfmt.CodeInternal, "internal error")
}

// readJSON enforces Content-Type application/json (charset utf-8 if any),
// the size limit and strict JSON (internal/strictjson), then decodes into v.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	_, ok := readJSONBody(w, r, limit, v)
	return ok
}

// readJSONBody is readJSON that also returns the body as received.
func readJSONBody(w http.ResponseWriter, r *http.Request, limit int64, v any) ([]byte, bool) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, tlogfmt.CodeUnsupportedMediaType, "Content-Type must be application/json")
		return nil, false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		writeError(w, http.StatusUnsupportedMediaType, tlogfmt.CodeUnsupportedMediaType, "charset must be utf-8")
		return nil, false
	}
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, tlogfmt.CodeBodyTooLarge, "request body exceeds "+strconv.FormatInt(limit, 10)+" bytes")
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, strictjson.CodeInvalidJSON, "reading request body failed")
		return nil, false
	}
	if int64(len(body)) > limit {
		writeError(w, http.StatusRequestEntityTooLarge, tlogfmt.CodeBodyTooLarge, "request body exceeds "+strconv.FormatInt(limit, 10)+" bytes")
		return nil, false
	}
	if err := strictjson.Decode(body, v, strictjson.Limits{}); err != nil {
		var se *strictjson.Error
		if errors.As(err, &se) {
			writeError(w, http.StatusBadRequest, se.Code, se.Message)
		} else {
			writeError(w, http.StatusBadRequest, strictjson.CodeInvalidJSON, "body is not valid JSON")
		}
		return nil, false
	}
	return body, true
}

func (o *Operator) handleAdd(w http.ResponseWriter, r *http.Request) {
	var sub tlogfmt.Submission
	if !readJSON(w, r, MaxAddBodyBytes, &sub) {
		return
	}
	o.add(w, r, []tlogfmt.Submission{sub})
}

func (o *Operator) handleAddBatch(w http.ResponseWriter, r *http.Request) {
	// ?promise=entries (the default: the SEP echoes every entry) or
	// ?promise=digest (one SEP over the body's SHA-256; ADR 0038).
	q, qerr := url.ParseQuery(r.URL.RawQuery)
	form, given := "", false
	if v, ok := q["promise"]; ok {
		form, given = v[0], true
		if len(v) > 1 {
			form = ""
		}
	}
	if qerr != nil || (given && form != "entries" && form != "digest") {
		writeError(w, http.StatusBadRequest, tlogfmt.CodeInvalidRequest, "promise must be entries or digest, once")
		return
	}
	var req tlogfmt.AddBatchRequest
	body, ok := readJSONBody(w, r, MaxAddBatchBodyBytes, &req)
	if !ok {
		return
	}
	if len(req.Entries) == 0 {
		writeError(w, http.StatusBadRequest, tlogfmt.CodeInvalidRequest, "entries must hold at least one entry")
		return
	}
	if len(req.Entries) > tlogfmt.MaxBatchEntries {
		writeError(w, http.StatusBadRequest, tlogfmt.CodeBatchTooLarge, "entries holds more than "+strconv.Itoa(tlogfmt.MaxBatchEntries)+" entries")
		return
	}
	if form == "digest" {
		jws, _, _, err := o.AddDigest(r.Context(), req.Entries, sha256.Sum256(body))
		o.answerAdd(w, jws, err)
		return
	}
	o.add(w, r, req.Entries)
}

func (o *Operator) add(w http.ResponseWriter, r *http.Request, subs []tlogfmt.Submission) {
	jws, _, err := o.Add(r.Context(), subs)
	o.answerAdd(w, jws, err)
}

// answerAdd writes the answer of add and add-batch: {"sep": jws}, or the
// error of Add/AddDigest.
func (o *Operator) answerAdd(w http.ResponseWriter, jws string, err error) {
	switch {
	case errors.Is(err, ErrInvalid):
		writeError(w, http.StatusBadRequest, tlogfmt.CodeInvalidRequest, strings.TrimPrefix(err.Error(), "tlog: "))
	case errors.Is(err, ErrUnavailable):
		o.log.Warn("tlog: add refused", "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, tlogfmt.CodeLogUnavailable, "the log cannot take entries right now; retry")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, tlogfmt.CodeLogUnavailable, "request ended before the entries were sequenced; retry")
	case err != nil:
		o.internal(w, "add", err)
	default:
		writeJSON(w, http.StatusOK, tlogfmt.AddResponse{SEP: jws}, "no-store")
	}
}

func (o *Operator) handleSTH(w http.ResponseWriter, r *http.Request) {
	a, ok := o.latest()
	if !ok {
		writeError(w, http.StatusServiceUnavailable, tlogfmt.CodeLogUnavailable, "no checkpoint published yet")
		return
	}
	writeJSON(w, http.StatusOK, tlogfmt.STHResponse{STH: a.sth, Checkpoint: a.checkpoint}, "public, max-age=1")
}

// queryUint reads a decimal query parameter; it refuses signs, leading
// zeros (but "0") and values above 2^63−1.
func queryUint(q string) (uint64, bool) {
	if q == "" || (len(q) > 1 && q[0] == '0') {
		return 0, false
	}
	for _, c := range []byte(q) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(q, 10, 64)
	return uint64(n), err == nil
}

func b64s(hs [][]byte) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = base64.RawURLEncoding.EncodeToString(h)
	}
	return out
}

func (o *Operator) handleProof(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ah := q.Get("hash")
	if !tlogfmt.ValidArtifactHash(ah) || len(q["hash"]) != 1 {
		writeError(w, http.StatusBadRequest, tlogfmt.CodeInvalidRequest, "hash must be sha256:<64 lower-case hex>, once")
		return
	}
	var h [32]byte
	hex.Decode(h[:], []byte(ah[len("sha256:"):])) //nolint:errcheck // validated above
	leaf, index, found, err := o.lookup(r.Context(), h)
	if err != nil {
		o.internal(w, "proof: index", err)
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, tlogfmt.CodeNotFound, "the hash is not in the log (yet)")
		return
	}
	var a archived
	if ts := q.Get("tree_size"); ts != "" || q.Has("tree_size") {
		size, ok := queryUint(ts)
		if !ok || len(q["tree_size"]) != 1 {
			writeError(w, http.StatusBadRequest, tlogfmt.CodeInvalidRequest, "tree_size must be a non-negative decimal integer, once")
			return
		}
		if size <= index {
			writeError(w, http.StatusBadRequest, tlogfmt.CodeInvalidRequest, "tree_size must be above the leaf's index "+strconv.FormatUint(index, 10))
			return
		}
		a, found, err = o.st.get(r.Context(), size)
		if err == nil && found && !a.published {
			found = false
		}
	} else {
		a, found, err = o.st.newestPublished(r.Context(), index)
	}
	if err != nil {
		o.internal(w, "proof: archive", err)
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, tlogfmt.CodeNotFound, "no published tree of that size holds the leaf (yet)")
		return
	}
	pb, err := o.proofBuilder(r.Context(), a.treeSize)
	if err != nil {
		o.internal(w, "proof: tiles", err)
		return
	}
	path, err := pb.InclusionProof(r.Context(), index)
	if err != nil {
		o.internal(w, "proof: inclusion", err)
		return
	}
	writeJSON(w, http.StatusOK, tlogfmt.ProofResponse{
		LogID: o.key.Origin, Leaf: leaf, LeafIndex: index, TreeSize: a.treeSize,
		InclusionProof: b64s(path), STH: a.sth, Checkpoint: a.checkpoint,
	}, "public, max-age=60")
}

func (o *Operator) handleConsistency(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	first, ok1 := queryUint(q.Get("first"))
	second, ok2 := queryUint(q.Get("second"))
	if !ok1 || !ok2 || len(q["first"]) != 1 || len(q["second"]) != 1 {
		writeError(w, http.StatusBadRequest, tlogfmt.CodeInvalidRequest, "first and second must be decimal tree sizes, once each")
		return
	}
	latest, ok := o.latest()
	if first == 0 || first > second || !ok || second > latest.treeSize {
		writeError(w, http.StatusBadRequest, tlogfmt.CodeInvalidRequest, "need 0 < first <= second <= the newest published tree size")
		return
	}
	proof := [][]byte{}
	if first < second {
		pb, err := o.proofBuilder(r.Context(), second)
		if err != nil {
			o.internal(w, "consistency: tiles", err)
			return
		}
		if proof, err = pb.ConsistencyProof(r.Context(), first, second); err != nil {
			o.internal(w, "consistency", err)
			return
		}
	}
	writeJSON(w, http.StatusOK, tlogfmt.ConsistencyResponse{LogID: o.key.Origin, First: first, Second: second, ConsistencyProof: b64s(proof)}, "public, max-age=3600")
}

func (o *Operator) handleArchive(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after := int64(-1)
	if q.Has("after") {
		a, ok := queryUint(q.Get("after"))
		if !ok || len(q["after"]) != 1 {
			writeError(w, http.StatusBadRequest, tlogfmt.CodeInvalidRequest, "after must be a decimal tree size, once")
			return
		}
		after = int64(a)
	}
	limit := DefaultArchiveLimit
	if q.Has("limit") {
		l, ok := queryUint(q.Get("limit"))
		if !ok || l == 0 || l > MaxArchiveLimit || len(q["limit"]) != 1 {
			writeError(w, http.StatusBadRequest, tlogfmt.CodeInvalidRequest, "limit must be 1 to "+strconv.Itoa(MaxArchiveLimit))
			return
		}
		limit = int(l)
	}
	rows, more, err := o.st.list(r.Context(), after, limit)
	if err != nil {
		o.internal(w, "archive", err)
		return
	}
	resp := tlogfmt.ArchiveResponse{STHs: make([]tlogfmt.ArchivedSTH, len(rows))}
	for i, a := range rows {
		resp.STHs[i] = tlogfmt.ArchivedSTH{TreeSize: a.treeSize, STH: a.sth, Checkpoint: a.checkpoint}
	}
	if more {
		n := rows[len(rows)-1].treeSize
		resp.Next = &n
	}
	writeJSON(w, http.StatusOK, resp, "no-cache")
}

func (o *Operator) handleJWKS(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, tlogfmt.JWKS{Keys: []tlogfmt.JWK{o.key.JWK()}}, "public, max-age=300")
}

func (o *Operator) handleVKey(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=300")
	io.WriteString(w, o.VKey()+"\n") //nolint:errcheck // the client went away
}

// serveCheckpoint serves the C2SP checkpoint the operator has recorded
// (watchOnce: its STH archived, published once the witness policy holds),
// after recording the one Tessera wrote last. Every tree a client learns
// of here is one the proof, consistency and sth endpoints know: serving
// Tessera's file directly let a client read a checkpoint up to 100 ms
// (the watcher's tick) before proof?hash= knew its tree, and get 404 for
// a promised leaf (TestTlogServeKill9 after a kill -9). A checkpoint the
// operator cannot record (it does not verify, or has no archived STH) is
// never served; the last recorded one is.
func (o *Operator) serveCheckpoint(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, tlogfmt.CodeMethodNotAllowed, "use GET")
		return
	}
	if err := o.catchUpPublished(r.Context()); err != nil && r.Context().Err() == nil {
		o.log.Error("tlog: checkpoint watcher", "err", err)
	}
	cp, ok := o.latest()
	if !ok {
		writeError(w, http.StatusNotFound, tlogfmt.CodeNotFound, "no such resource")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", time.Time{}, strings.NewReader(cp.checkpoint))
}

// serveStatic serves Tessera's C2SP tlog-tiles resources from the POSIX
// directory: /tile/<L>/<N>[.p/<W>] and /tile/entries/<N>[.p/<W>]. Only those names are reachable (never
// .state/); full tiles and bundles are immutable, partial ones and the
// checkpoint change.
func (o *Operator) serveStatic(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, tlogfmt.CodeMethodNotAllowed, "use GET")
		return
	}
	p := path.Clean(r.URL.Path)
	if p != r.URL.Path || !tilePathOK(p) {
		writeError(w, http.StatusNotFound, tlogfmt.CodeNotFound, "no such resource")
		return
	}
	f, err := os.Open(filepath.Join(o.logDir, filepath.FromSlash(p[1:])))
	if err != nil {
		writeError(w, http.StatusNotFound, tlogfmt.CodeNotFound, "no such resource")
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.IsDir() {
		writeError(w, http.StatusNotFound, tlogfmt.CodeNotFound, "no such resource")
		return
	}
	h := w.Header()
	switch {
	case strings.Contains(p, ".p/"):
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Cache-Control", "public, max-age=60")
	default:
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	}
	http.ServeContent(w, r, "", time.Time{}, f)
}

// tilePathOK reports whether p names a C2SP tlog-tiles resource:
// tile/... made of the segments the layout uses (decimal
// levels, x-prefixed three-digit index segments, "entries", ".p/<width>").
func tilePathOK(p string) bool {
	rest, ok := strings.CutPrefix(p, "/tile/")
	if !ok {
		return false
	}
	for _, seg := range strings.Split(rest, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for _, c := range []byte(seg) {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || c == '.') {
				return false
			}
		}
	}
	return true
}
