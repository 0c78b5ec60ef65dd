package api_test

// Tests of api/openapi.yaml: the document validates as OpenAPI 3.1; its
// operations are exactly the routes the server registers, on the same
// surfaces; its error-code enum is exactly the Code* constants; and the
// real API, driven through the harness, sends requests and answers that
// kin-openapi's request and response validators accept (and the document
// refuses what the server refuses wherever a schema can say so).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends"
)

// oaLoad loads and validates api.OpenAPI.
func oaLoad(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("loading openapi.yaml: %v", err)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation(), openapi3.EnableSchemaPatternValidation(),
		openapi3.EnableSchemaDefaultsValidation()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// oaOp is one operation of the document.
type oaOp struct {
	Method, Path string // path as in the document, e.g. /v1/keys/{name}/sign
	Op           *openapi3.Operation
}

func (o oaOp) String() string { return o.Method + " " + o.Path }

func oaOperations(doc *openapi3.T) []oaOp {
	var ops []oaOp
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops = append(ops, oaOp{Method: method, Path: path, Op: op})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].String() < ops[j].String() })
	return ops
}

// oaStrings reads an x- extension that holds a list of strings.
func oaStrings(t *testing.T, op oaOp, name string) []string {
	t.Helper()
	raw, ok := op.Op.Extensions[name]
	if !ok {
		t.Errorf("%s: no %s", op, name)
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		t.Errorf("%s: %s is %T, want a list", op, name, raw)
		return nil
	}
	out := []string{}
	for _, v := range list {
		s, ok := v.(string)
		if !ok {
			t.Errorf("%s: %s holds %T, want strings", op, name, v)
			continue
		}
		out = append(out, s)
	}
	return out
}

func oaSet(list []string) []string {
	out := slices.Clone(list)
	slices.Sort(out)
	return slices.Compact(out)
}

// oaSurfaces maps the document's surface tags to the server's surfaces.
var oaSurfaces = map[string]api.Surface{"public": api.SurfacePublic, "signing": api.SurfaceSign, "admin": api.SurfaceAdmin}

func oaSurfaceOf(tags []string) api.Surface {
	var s api.Surface
	for _, tag := range tags {
		s |= oaSurfaces[tag]
	}
	return s
}

// TestOpenAPIDocument validates the document and its own conventions:
// surfaces, scopes, closed request bodies, the error responses each kind of
// operation must list, X-Request-Id everywhere, and the error-code enum.
func TestOpenAPIDocument(t *testing.T) {
	doc := oaLoad(t)
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	ids := map[string]string{}
	for _, op := range oaOperations(doc) {
		if op.Op.OperationID == "" {
			t.Errorf("%s: no operationId", op)
		} else if prev, dup := ids[op.Op.OperationID]; dup {
			t.Errorf("%s: operationId %s also used by %s", op, op.Op.OperationID, prev)
		}
		ids[op.Op.OperationID] = op.String()

		tags := oaSet(op.Op.Tags)
		if len(tags) == 0 {
			t.Errorf("%s: no surface tag", op)
		}
		for _, tag := range tags {
			if _, ok := oaSurfaces[tag]; !ok {
				t.Errorf("%s: tag %q is not a surface", op, tag)
			}
		}
		if got := oaSet(oaStrings(t, op, "x-surfaces")); !slices.Equal(got, tags) {
			t.Errorf("%s: x-surfaces %v, tags %v", op, got, tags)
		}

		scopes := oaSet(oaStrings(t, op, "x-scopes"))
		reqs := doc.Security
		if op.Op.Security != nil {
			reqs = *op.Op.Security
		}
		var reqScopes []string
		for _, r := range reqs {
			for scheme, s := range r {
				if scheme != "bearerAuth" {
					t.Errorf("%s: security scheme %q", op, scheme)
				}
				if len(s) > 1 {
					t.Errorf("%s: a security requirement with several scopes %v (all would be needed)", op, s)
				}
				reqScopes = append(reqScopes, s...)
			}
		}
		if got := oaSet(reqScopes); !slices.Equal(got, scopes) {
			t.Errorf("%s: security requirement scopes %v, x-scopes %v", op, got, scopes)
		}

		var need []string
		if op.Method != http.MethodHead { // HEAD answers carry no error body
			need = append(need, "500")
		}
		if len(reqs) > 0 {
			need = append(need, "401", "429")
		}
		if len(scopes) > 0 {
			need = append(need, "403")
		}
		if rb := op.Op.RequestBody; rb != nil {
			need = append(need, "400", "413", "415")
			if len(rb.Value.Content) != 1 || rb.Value.Content["application/json"] == nil {
				t.Errorf("%s: request body media types %v, want only application/json", op, oaKeys(rb.Value.Content))
			} else if s := rb.Value.Content["application/json"].Schema.Value; s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
				t.Errorf("%s: request body schema is not closed (additionalProperties: false); the server rejects unknown fields", op)
			}
		}
		if op.Path != "/healthz" && op.Path != "/readyz" {
			need = append(need, "404") // a listener without the route's surface
		}
		for _, code := range need {
			if op.Op.Responses.Value(code) == nil {
				t.Errorf("%s: no %s response", op, code)
			}
		}
		for code, r := range op.Op.Responses.Map() {
			if r.Value.Headers["X-Request-Id"] == nil {
				t.Errorf("%s %s: no X-Request-Id header", op, code)
			}
			if n, _ := strconv.Atoi(code); n >= 400 {
				if mt := r.Value.Content["application/json"]; mt != nil && mt.Schema.Ref != "#/components/schemas/Error" && op.Path != "/readyz" {
					t.Errorf("%s %s: error schema %q, want #/components/schemas/Error", op, code, mt.Schema.Ref)
				}
			}
		}
	}

	// The error-code enum is exactly the Code* constants of package api and
	// internal/strictjson.
	var codes []string
	for _, e := range doc.Components.Schemas["ErrorCode"].Value.Enum {
		codes = append(codes, e.(string))
	}
	if want := oaSourceCodes(t); !slices.Equal(oaSet(codes), want) {
		t.Errorf("ErrorCode enum %v\nCode* constants  %v", oaSet(codes), want)
	}
}

func oaKeys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// oaSourceCodes parses the string constants named Code* in package api and
// internal/strictjson.
func oaSourceCodes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "internal", "strictjson", "strictjson.go"))
	var codes []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes = append(codes, v)
				}
			}
			return true
		})
	}
	if len(codes) < 20 {
		t.Fatalf("found only %d Code* constants: %v", len(codes), codes)
	}
	return oaSet(codes)
}

// oaParamRE matches an echo path parameter (":name"; `\:` is a literal colon).
var oaParamRE = regexp.MustCompile(`(^|[^\\]):([A-Za-z_]+)`)

// oaPath writes an echo route path as an OpenAPI path.
func oaPath(echoPath string) string {
	return strings.ReplaceAll(oaParamRE.ReplaceAllString(echoPath, "${1}{${2}}"), `\:`, ":")
}

// oaServerRoutes returns the routes the server registers ("METHOD /path",
// echo's :param written {param}) with their surfaces. The Server keeps
// them unexported; the test reads them by reflection rather than keeping
// a copy of server.go's route list that could drift.
func oaServerRoutes(t *testing.T, srv *api.Server) map[string]api.Surface {
	t.Helper()
	v := reflect.ValueOf(srv).Elem()
	surfaces := v.FieldByName("surfaces")
	if !surfaces.IsValid() || surfaces.Kind() != reflect.Map {
		t.Fatal("api.Server has no surfaces map any more; update oaServerRoutes")
	}
	out := map[string]api.Surface{}
	iter := surfaces.MapRange()
	for iter.Next() {
		method, path := iter.Key().FieldByName("method").String(), iter.Key().FieldByName("path").String()
		out[method+" "+oaPath(path)] = api.Surface(iter.Value().Int())
	}
	// Every echo route, so that one added without Server.route shows too.
	f := v.FieldByName("echo")
	if !f.IsValid() {
		t.Fatal("api.Server has no echo field any more; update oaServerRoutes")
	}
	e, ok := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(*echo.Echo)
	if !ok || e == nil {
		t.Fatalf("api.Server.echo is %s, want *echo.Echo", f.Type())
	}
	for _, r := range e.Routes() {
		k := r.Method + " " + oaPath(r.Path)
		if _, ok := out[k]; !ok {
			out[k] = 0 // registered without a surface
		}
	}
	return out
}

// TestOpenAPIRoutes: the document's operations are exactly the server's
// routes, each tagged with the surfaces the server serves it on.
func TestOpenAPIRoutes(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	srv := api.New(api.Config{Manager: h.mgr, Auth: h.auth, Store: h.store})
	server := oaServerRoutes(t, srv)
	if len(server) < 20 {
		t.Fatalf("only %d server routes found: %v", len(server), server)
	}
	doc := oaLoad(t)
	documented := map[string]bool{}
	for _, op := range oaOperations(doc) {
		documented[op.String()] = true
		sf, ok := server[op.String()]
		if !ok {
			t.Errorf("%s is documented but not a server route", op)
			continue
		}
		if got := oaSurfaceOf(op.Op.Tags); got != sf {
			t.Errorf("%s: document surfaces %v (%b), server surface %b", op, op.Op.Tags, got, sf)
		}
	}
	for route := range server {
		if !documented[route] {
			t.Errorf("server route %s is not in openapi.yaml", route)
		}
	}
}

// oaExchange is one request to the API and its answer, validated against
// the document.
type oaExchange struct {
	route    *routers.Route
	routeErr error // no documented operation matches
	reqErr   error // openapi3filter.ValidateRequest
	respErr  error // openapi3filter.ValidateResponse
	status   int
	header   http.Header
	body     []byte
}

// oaProxy sits between the network and the API handler: it validates every
// request as received and every answer as sent.
type oaProxy struct {
	router routers.Router
	opts   *openapi3filter.Options
	next   http.Handler

	mu     sync.Mutex
	tokens map[string][]string // secret -> scopes, of the tokens the test made
	log    []oaExchange
}

func (p *oaProxy) addToken(secret string, scopes []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokens[secret] = scopes
}

// authenticate is the AuthenticationFunc: a bearer token is required, and a
// token the test made must hold the requirement's scopes ({name} is the
// path's key name). The validity of other tokens is the server's business.
func (p *oaProxy) authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecurityScheme == nil || in.SecurityScheme.Type != "http" || in.SecurityScheme.Scheme != "bearer" {
		return fmt.Errorf("unexpected security scheme %s", in.SecuritySchemeName)
	}
	scheme, tok, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return errors.New("no bearer token")
	}
	p.mu.Lock()
	have, known := p.tokens[tok]
	p.mu.Unlock()
	if !known {
		return nil
	}
	for _, want := range in.Scopes {
		want = strings.ReplaceAll(want, "{name}", in.RequestValidationInput.PathParams["name"])
		if !slices.Contains(have, want) {
			return fmt.Errorf("token lacks scope %s", want)
		}
	}
	return nil
}

func (p *oaProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	ex := oaExchange{}
	ctx := context.Background()

	vr := r.Clone(ctx)
	vr.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := p.router.FindRoute(vr)
	var in *openapi3filter.RequestValidationInput
	if err != nil {
		ex.routeErr = err
	} else {
		ex.route = route
		in = &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: p.opts}
		ex.reqErr = openapi3filter.ValidateRequest(ctx, in)
	}

	rec := httptest.NewRecorder()
	p.next.ServeHTTP(rec, r)
	res := rec.Result()
	ex.status, ex.header, ex.body = res.StatusCode, res.Header, rec.Body.Bytes()
	if in != nil {
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: ex.status, Header: ex.header, Options: p.opts}
		out.SetBodyBytes(ex.body)
		ex.respErr = openapi3filter.ValidateResponse(ctx, out)
		if ex.respErr == nil && (r.Method == http.MethodHead || ex.status == http.StatusNotModified) {
			// ValidateResponse skips these; hold them to the documented
			// status and required headers at least.
			ex.respErr = oaCheckBodyless(route, ex.status, ex.header, ex.body)
		}
	}

	p.mu.Lock()
	p.log = append(p.log, ex)
	p.mu.Unlock()
	for k, v := range ex.header {
		w.Header()[k] = v
	}
	w.WriteHeader(ex.status)
	_, _ = w.Write(ex.body)
}

// oaCheckBodyless checks an answer without a body (HEAD, 304): its status
// is documented, without content, and it has every required header.
func oaCheckBodyless(route *routers.Route, status int, header http.Header, body []byte) error {
	ref := route.Operation.Responses.Status(status)
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("status %d is not documented", status)
	}
	if len(body) != 0 {
		return fmt.Errorf("%d bytes of body", len(body))
	}
	if route.Method == http.MethodHead && len(ref.Value.Content) != 0 {
		return fmt.Errorf("the %d answer to HEAD is documented with content", status)
	}
	for name, h := range ref.Value.Headers {
		if h.Value.Required && header.Get(name) == "" {
			return fmt.Errorf("required header %s missing", name)
		}
	}
	return nil
}

func (p *oaProxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.log)
}

func (p *oaProxy) since(n int) []oaExchange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log[n:])
}

// oaLive is the harness with every request and answer going through an
// oaProxy.
type oaLive struct {
	t   *testing.T
	h   *harness
	p   *oaProxy
	doc *openapi3.T
	ok  map[string]bool // operations answered 2xx
	got map[string]bool // "status code" of every error answer, "202" etc.
}

// oaClose closes every object schema that lists properties and does not say
// otherwise: the document leaves response objects open for clients (new
// members may come), but the test holds the server to the members the
// document lists.
func oaClose(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			no := false
			s.AdditionalProperties.Has = &no
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		for _, list := range []openapi3.SchemaRefs{s.OneOf, s.AnyOf, s.AllOf} {
			for _, x := range list {
				walk(x)
			}
		}
	}
	for _, s := range doc.Components.Schemas {
		walk(s)
	}
	for _, op := range oaOperations(doc) {
		for _, r := range op.Op.Responses.Map() {
			for _, mt := range r.Value.Content {
				walk(mt.Schema)
			}
		}
	}
}

func newOALive(t *testing.T, o harnessOpts) *oaLive {
	t.Helper()
	h := newHarness(t, o)
	doc := oaLoad(t)
	oaClose(doc)
	p := &oaProxy{next: h.handler, tokens: map[string][]string{}}
	ts := httptest.NewUnstartedServer(p)
	doc.Servers = openapi3.Servers{{URL: "http://" + ts.Listener.Addr().String()}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("router: %v", err)
	}
	p.router = router
	p.opts = &openapi3filter.Options{IncludeResponseStatus: true, AuthenticationFunc: p.authenticate}
	ts.Start()
	t.Cleanup(ts.Close)
	h.srv = ts
	return &oaLive{t: t, h: h, p: p, doc: doc, ok: map[string]bool{}, got: map[string]bool{}}
}

func (l *oaLive) token(name string, scopes ...string) string {
	l.t.Helper()
	s := l.h.token(name, tokenOK, scopes...)
	l.p.addToken(s, scopes)
	return s
}

// oaCall is one live call and what it must produce.
type oaCall struct {
	what       string
	req        request
	status     int
	code       string // the error code wanted; "" for a success
	docRejects bool   // the document itself refuses the request
}

func jsonReq(method, path, tok, body string) request {
	r := request{method: method, path: path, ctype: "application/json", body: []byte(body)}
	if tok != "" {
		r.auth = bearer(tok)
	}
	return r
}

func plainReq(method, path, tok string) request {
	r := request{method: method, path: path}
	if tok != "" {
		r.auth = bearer(tok)
	}
	return r
}

// send makes the call and checks it against the document.
func (l *oaLive) send(c oaCall) []byte {
	t := l.t
	t.Helper()
	n := l.p.count()
	resp, body := l.h.do(c.req)
	exs := l.p.since(n)
	if len(exs) != 1 {
		t.Fatalf("%s: %d exchanges recorded, want 1", c.what, len(exs))
	}
	ex := exs[0]
	if resp.StatusCode != c.status {
		t.Errorf("%s: %s %s: status %d, want %d (body %s)", c.what, c.req.method, c.req.path, resp.StatusCode, c.status, body)
	}
	if ex.routeErr != nil {
		t.Errorf("%s: %s %s matches no documented operation: %v", c.what, c.req.method, c.req.path, ex.routeErr)
		return body
	}
	switch {
	case c.docRejects && ex.reqErr == nil:
		t.Errorf("%s: the server refuses %s %s (%d %s) but the document accepts it", c.what, c.req.method, c.req.path, resp.StatusCode, body)
	case !c.docRejects && ex.reqErr != nil:
		t.Errorf("%s: request %s %s does not match the document: %v", c.what, c.req.method, c.req.path, ex.reqErr)
	}
	if ex.respErr != nil {
		t.Errorf("%s: answer %d to %s %s does not match the document: %v\nbody %s", c.what, ex.status, c.req.method, c.req.path, ex.respErr, body)
	}
	if c.code != "" {
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != c.code {
			t.Errorf("%s: error code %q, want %q (body %s)", c.what, e.Error.Code, c.code, body)
		}
		l.got[fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Code)] = true
	}
	if resp.StatusCode/100 == 2 {
		l.ok[ex.route.Method+" "+ex.route.Path] = true
		l.got[strconv.Itoa(resp.StatusCode)] = true
	}
	return body
}

// sendUndocumented makes a call that matches no documented operation (an
// unknown path or method) and checks the error against the Error schema.
func (l *oaLive) sendUndocumented(what string, r request, status int, code string) {
	t := l.t
	t.Helper()
	n := l.p.count()
	resp, body := l.h.do(r)
	if ex := l.p.since(n); len(ex) != 1 || ex[0].routeErr == nil {
		t.Errorf("%s: %s %s matched a documented operation", what, r.method, r.path)
	}
	wantError(t, what, resp, body, status, code)
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := l.doc.Components.Schemas["Error"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("%s: error body %s does not match the Error schema: %v", what, body, err)
	}
}

func (l *oaLive) versions(name, tok string) []api.VersionInfo {
	l.t.Helper()
	var out struct{ Versions []api.VersionInfo }
	decode(l.t, l.send(oaCall{"list " + name + " versions", plainReq("GET", "/v1/keys/"+name+"/versions", tok), 200, "", false}), &out)
	return out.Versions
}

func oaKID(t *testing.T, vs []api.VersionInfo, status string) string {
	t.Helper()
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].Status == status {
			return vs[i].KID
		}
	}
	t.Fatalf("no %s version in %+v", status, vs)
	return ""
}

// TestOpenAPILive drives every route through its happy path and the main
// error answers, validating each request and answer against the document.
func TestOpenAPILive(t *testing.T) {
	tl := newFakeTlog()
	l := newOALive(t, harnessOpts{Tlog: tl})
	admin := l.token("admin", api.ScopeAdminKeys)
	off1 := l.token("officer-1", api.ScopeAdminRevoke)
	off2 := l.token("officer-2", api.ScopeAdminRevoke)
	auditor := l.token("auditor", api.ScopeAuditRead)
	node := l.token("node", "sign:villa")
	nodeAll := l.token("node-all", api.ScopeSignAll)
	other := l.token("other", "sign:other")
	past := time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)
	future := time.Now().UTC().Add(time.Hour).Format(time.RFC3339)
	G, H, P := http.MethodGet, http.MethodHead, http.MethodPost

	// No key yet.
	for _, p := range []string{"/.well-known/jwks.json", "/.well-known/vrp-key-history.json", "/.well-known/did.json"} {
		l.send(oaCall{"no default key " + p, plainReq(G, p, ""), 404, api.CodeKeyNotFound, false})
	}
	l.send(oaCall{"healthz", plainReq(G, "/healthz", ""), 200, "", false})
	l.send(oaCall{"readyz", plainReq(G, "/readyz", ""), 200, "", false})
	l.send(oaCall{"caller request id", request{method: G, path: "/healthz", header: map[string]string{"X-Request-Id": "node-1:abc"}}, 200, "", false})

	// Keys.
	for _, c := range []oaCall{
		{"create villa", jsonReq(P, "/v1/keys", admin, `{"name":"villa","issuer":"`+villa+`","backend":"software-fixed","reason":"first key"}`), 201, "", false},
		{"create alpha (ES256, policy)", jsonReq(P, "/v1/keys", admin, `{"name":"alpha","issuer":"alpha.example","algorithm":"ES256","jwks_url":"https://keys.alpha.example/jwks.json","policy":{"rotation_period":"2160h","prepublish":"15m","retention":"8760h"},"reason":"EC key"}`), 201, "", false},
		{"create tpr (two-person rule)", jsonReq(P, "/v1/keys", admin, `{"name":"tpr","issuer":"tpr.example","backend":"software-fixed","policy":{"two_person_rule":true}}`), 201, "", false},
		{"create flaky", jsonReq(P, "/v1/keys", admin, `{"name":"flaky","issuer":"flaky.example","backend":"broken"}`), 201, "", false},
		{"create existing", jsonReq(P, "/v1/keys", admin, `{"name":"villa","issuer":"`+villa+`"}`), 409, api.CodeKeyExists, false},
		{"create, bad issuer", jsonReq(P, "/v1/keys", admin, `{"name":"x","issuer":"Not A Host"}`), 400, api.CodeInvalidRequest, true},
		{"create, unknown backend", jsonReq(P, "/v1/keys", admin, `{"name":"y","issuer":"y.example","backend":"nope"}`), 400, api.CodeInvalidRequest, false},
		{"create, unknown field", jsonReq(P, "/v1/keys", admin, `{"name":"z","issuer":"z.example","colour":"red"}`), 400, "unknown_field", true},
		{"create, duplicate member", jsonReq(P, "/v1/keys", admin, `{"name":"z","name":"z2","issuer":"z.example"}`), 400, "duplicate_key", false},
		{"create, not JSON", jsonReq(P, "/v1/keys", admin, `{"name":`), 400, "invalid_json", true},
		{"create, text/plain", request{method: P, path: "/v1/keys", auth: bearer(admin), ctype: "text/plain", body: []byte(`{"name":"z","issuer":"z.example"}`)}, 415, api.CodeUnsupportedMediaType, true},
		{"create, without admin:keys", jsonReq(P, "/v1/keys", auditor, `{"name":"z","issuer":"z.example"}`), 403, api.CodeForbidden, true},
		{"list keys", plainReq(G, "/v1/keys", admin), 200, "", false},
		{"list keys, no token", plainReq(G, "/v1/keys", ""), 401, api.CodeUnauthorized, true},
		{"list keys, unknown token", plainReq(G, "/v1/keys", "ksv_not-a-token"), 401, api.CodeUnauthorized, false},
		{"versions of unknown key", plainReq(G, "/v1/keys/nope/versions", admin), 404, api.CodeKeyNotFound, false},
	} {
		l.send(c)
	}
	l.versions("alpha", admin)

	// Public documents.
	for _, p := range []string{"/.well-known/jwks.json", "/v1/keys/villa/jwks.json", "/v1/keys/alpha/jwks.json",
		"/v1/keys/villa/history.json", "/v1/keys/alpha/history.json", "/.well-known/vrp-key-history.json", "/.well-known/did.json"} {
		resp, _ := l.h.do(plainReq(G, p, ""))
		l.send(oaCall{"GET " + p, plainReq(G, p, ""), 200, "", false})
		l.send(oaCall{"HEAD " + p, plainReq(H, p, ""), 200, "", false})
		l.send(oaCall{"revalidate " + p, request{method: G, path: p, header: map[string]string{"If-None-Match": resp.Header.Get("ETag")}}, 304, "", false})
	}
	l.send(oaCall{"JWKS of unknown key", plainReq(G, "/v1/keys/nope/jwks.json", ""), 404, api.CodeKeyNotFound, false})
	l.send(oaCall{"history of unknown key", plainReq(G, "/v1/keys/nope/history.json", ""), 404, api.CodeKeyNotFound, false})

	// Signing.
	l.h.broken.setErr(fmt.Errorf("%w: token removed", backends.ErrUnavailable))
	for _, c := range []oaCall{
		{"sign", jsonReq(P, "/v1/keys/villa/sign", node, `{"payload":{"offer":"x","n":1},"typ":"JWT"}`), 200, "", false},
		{"sign ES256 with sign:*", jsonReq(P, "/v1/keys/alpha/sign", nodeAll, `{"payload":{}}`), 200, "", false},
		{"transport, every member", jsonReq(P, "/v1/keys/villa/mcp-transport", node, `{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2},"served_at":"`+time.Now().UTC().Format(time.RFC3339)+`","offer_ref":"offer:villaakerlyckan.se:2026-09-02/05","session_id":"s-1","ref":"receipt-ref","valid_for":"2h"}`), 200, "", false},
		{"transport, minimal", jsonReq(P, "/v1/keys/villa/mcp-transport", node, `{"tool":"t","arguments":{}}`), 200, "", false},
		{"sign batch", jsonReq(P, "/v1/keys/villa/sign:batch", node, `{"items":[{"payload":{"b":2,"a":1},"typ":"JWT"},{"payload":{"x":true}}]}`), 200, "", false},
		{"sign batch, bad items fail alone", jsonReq(P, "/v1/keys/villa/sign:batch", node, `{"items":[{"payload":{"a":1}},{"payload":{"a":1,"a":2}},{"payload":[1]},{"payload":{},"extra":1}]}`), 200, "", true},
		{"transport batch", jsonReq(P, "/v1/keys/villa/mcp-transport:batch", node, `{"items":[{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02"},"offer_ref":"o"},{"tool":"t","arguments":{"checkIn":1,"check_in":2}}]}`), 200, "", false},
		{"sign batch, 101 items", jsonReq(P, "/v1/keys/villa/sign:batch", node, `{"items":[`+strings.Repeat(`{"payload":{}},`, 100)+`{"payload":{}}]}`), 400, api.CodeBatchTooLarge, true},
		{"sign batch, no items", jsonReq(P, "/v1/keys/villa/sign:batch", node, `{"items":[]}`), 400, api.CodeInvalidRequest, true},
		{"sign batch, unknown envelope member", jsonReq(P, "/v1/keys/villa/sign:batch", node, `{"items":[{"payload":{}}],"more":1}`), 400, "unknown_field", true},
		{"transport batch, other key's token", jsonReq(P, "/v1/keys/alpha/mcp-transport:batch", node, `{"items":[{"tool":"t","arguments":{}}]}`), 403, api.CodeForbidden, true},
		{"sign detached", jsonReq(P, "/v1/keys/alpha/sign:detached", nodeAll, `{"payload":{"version":1,"alg":"ES256"}}`), 200, "", false},
		{"sign detached, not an object", jsonReq(P, "/v1/keys/alpha/sign:detached", nodeAll, `{"payload":"e30"}`), 400, api.CodeInvalidRequest, true},
		{"digest SEP-2828 v1", jsonReq(P, "/v1/digests/sep2828", other, `{"projection":"tools_call_params_plus_meta_authorization_binding_v1","params":{"name":"t","arguments":{},"_meta":{"authorization_binding":{"nonce":"n"}}}}`), 200, "", false},
		{"digest SEP-2828 v1, no binding", jsonReq(P, "/v1/digests/sep2828", other, `{"projection":"tools_call_params_plus_meta_authorization_binding_v1","params":{"name":"t","arguments":{}}}`), 400, api.CodeAuthorizationBindingMissing, false},
		{"digest arguments", jsonReq(P, "/v1/digests/mcp-arguments", other, `{"arguments":{"checkIn":"2026-09-02","guests":2}}`), 200, "", false},
		{"digest SEP-2828", jsonReq(P, "/v1/digests/sep2828", other, `{"params":{"name":"get_verified_stay_offer","arguments":{"guests":2},"_meta":{"progressToken":1,"authorization_binding":{"sub":"x"}}}}`), 200, "", false},
		{"sign, duplicate member", jsonReq(P, "/v1/keys/villa/sign", node, `{"payload":{"a":1},"payload":{"a":2}}`), 400, "duplicate_key", false},
		{"sign, unknown field", jsonReq(P, "/v1/keys/villa/sign", node, `{"payload":{},"extra":1}`), 400, "unknown_field", true},
		{"sign, payload not an object", jsonReq(P, "/v1/keys/villa/sign", node, `{"payload":[1]}`), 400, api.CodeInvalidRequest, true},
		{"sign, trailing data", jsonReq(P, "/v1/keys/villa/sign", node, `{"payload":{}} {}`), 400, "trailing_data", false},
		{"sign, text/plain", request{method: P, path: "/v1/keys/villa/sign", auth: bearer(node), ctype: "text/plain", body: []byte(`{"payload":{}}`)}, 415, api.CodeUnsupportedMediaType, true},
		{"sign, no token", jsonReq(P, "/v1/keys/villa/sign", "", `{"payload":{}}`), 401, api.CodeUnauthorized, true},
		{"sign, other key's token", jsonReq(P, "/v1/keys/alpha/sign", node, `{"payload":{}}`), 403, api.CodeForbidden, true},
		{"sign, unknown key", jsonReq(P, "/v1/keys/nope/sign", nodeAll, `{"payload":{}}`), 404, api.CodeKeyNotFound, false},
		{"sign, backend down", jsonReq(P, "/v1/keys/flaky/sign", nodeAll, `{"payload":{}}`), 503, api.CodeBackendUnavailable, false},
		{"transport, key collision", jsonReq(P, "/v1/keys/villa/mcp-transport", node, `{"tool":"t","arguments":{"checkIn":1,"check_in":2}}`), 400, api.CodeArgumentKeyCollision, false},
		{"transport, served_at too old", jsonReq(P, "/v1/keys/villa/mcp-transport", node, `{"tool":"t","arguments":{},"served_at":"2020-01-01T00:00:00Z"}`), 400, api.CodeInvalidRequest, false},
		{"transport, bad valid_for", jsonReq(P, "/v1/keys/villa/mcp-transport", node, `{"tool":"t","arguments":{},"valid_for":"soon"}`), 400, api.CodeInvalidRequest, true},
		{"transport, no tool", jsonReq(P, "/v1/keys/villa/mcp-transport", node, `{"arguments":{}}`), 400, api.CodeInvalidRequest, true},
		{"transport, integer out of range", jsonReq(P, "/v1/keys/villa/mcp-transport", node, `{"tool":"t","arguments":{"n":9007199254740993}}`), 400, "number_out_of_range", false},
		{"digest, empty body", jsonReq(P, "/v1/digests/mcp-arguments", other, ``), 400, "empty_body", true},
		{"digest, no token", jsonReq(P, "/v1/digests/sep2828", "", `{"params":{"name":"t","arguments":{}}}`), 401, api.CodeUnauthorized, true},
	} {
		l.send(c)
	}

	// Lifecycle of villa.
	for _, c := range []oaCall{
		{"set policy", jsonReq(http.MethodPut, "/v1/keys/villa/policy", admin, `{"rotation_period":"720h","prepublish":"10m","retention":"8760h","reason":"quarterly"}`), 200, "", false},
		{"policy, bad duration", jsonReq(http.MethodPut, "/v1/keys/villa/policy", admin, `{"rotation_period":"soon"}`), 400, api.CodeInvalidRequest, true},
		{"policy, prepublish below max-age", jsonReq(http.MethodPut, "/v1/keys/villa/policy", admin, `{"prepublish":"1m"}`), 400, api.CodeInvalidRequest, false},
		{"policy, unknown key", jsonReq(http.MethodPut, "/v1/keys/nope/policy", admin, `{}`), 404, api.CodeKeyNotFound, false},
		{"rotate scheduled", jsonReq(P, "/v1/keys/villa/rotate", admin, `{"mode":"scheduled","reason":"routine"}`), 200, "", false},
		{"list keys with a pending version", plainReq(G, "/v1/keys", admin), 200, "", false},
		{"rotate scheduled twice", jsonReq(P, "/v1/keys/villa/rotate", admin, `{"mode":"scheduled"}`), 409, api.CodePendingExists, false},
		{"rotate, unknown mode", jsonReq(P, "/v1/keys/villa/rotate", admin, `{"mode":"sometime"}`), 400, api.CodeInvalidRequest, true},
		{"JWKS with a pending version", plainReq(G, "/v1/keys/villa/jwks.json", ""), 200, "", false},
	} {
		l.send(c)
	}
	pending := oaKID(t, l.versions("villa", admin), "pending")
	for _, c := range []oaCall{
		{"activate too early", plainReq(P, "/v1/versions/"+pending+"/activate", admin), 409, api.CodeActivationTooEarly, false},
		{"activate, emergency without a reason", jsonReq(P, "/v1/versions/"+pending+"/activate", admin, `{"emergency":true}`), 400, api.CodeInvalidRequest, false},
		{"activate (emergency)", jsonReq(P, "/v1/versions/"+pending+"/activate", admin, `{"reason":"INC-3","emergency":true}`), 200, "", false},
		{"activate twice", jsonReq(P, "/v1/versions/"+pending+"/activate", admin, `{"reason":"again"}`), 409, api.CodeInvalidTransition, false},
		{"activate unknown version", plainReq(P, "/v1/versions/"+villa+"-2000-01-01-01/activate", admin), 404, api.CodeVersionNotFound, false},
		{"rotate, no body", plainReq(P, "/v1/keys/villa/rotate", admin), 400, api.CodeInvalidRequest, true},
		{"rotate, no mode", jsonReq(P, "/v1/keys/villa/rotate", admin, `{"reason":"x"}`), 400, api.CodeInvalidRequest, true},
		{"rotate now", jsonReq(P, "/v1/keys/villa/rotate", admin, `{"mode":"now","reason":"emergency"}`), 200, "", false},
	} {
		l.send(c)
	}
	for _, c := range []oaCall{
		{"move to another backend", jsonReq(http.MethodPut, "/v1/keys/villa/backend", admin, `{"backend":"software","reason":"leave the fixed backend"}`), 200, "", false},
		{"backend, unknown", jsonReq(http.MethodPut, "/v1/keys/villa/backend", admin, `{"backend":"nope"}`), 400, api.CodeInvalidRequest, false},
		{"backend, missing", jsonReq(http.MethodPut, "/v1/keys/villa/backend", admin, `{"reason":"x"}`), 400, api.CodeInvalidRequest, true},
		{"backend, unknown key", jsonReq(http.MethodPut, "/v1/keys/nope/backend", admin, `{"backend":"software"}`), 404, api.CodeKeyNotFound, false},
		{"rotate into the new backend", jsonReq(P, "/v1/keys/villa/rotate", admin, `{"mode":"now"}`), 200, "", false},
	} {
		l.send(c)
	}
	vs := l.versions("villa", admin)
	retired, active := vs[0].KID, oaKID(t, vs, "active")
	for _, c := range []oaCall{
		{"revoke retired", jsonReq(P, "/v1/versions/"+retired+"/revoke", off1, `{"compromised_at":"`+past+`","reason":"backup leaked"}`), 200, "", false},
		{"revoke active", jsonReq(P, "/v1/versions/"+active+"/revoke", off1, `{"compromised_at":"`+past+`","reason":"HSM lost"}`), 200, "", false},
		{"revoke twice", jsonReq(P, "/v1/versions/"+retired+"/revoke", off1, `{"compromised_at":"`+past+`","reason":"again"}`), 409, api.CodeInvalidTransition, false},
		{"revoke unknown version", jsonReq(P, "/v1/versions/"+villa+"-2000-01-01-01/revoke", off1, `{"compromised_at":"`+past+`","reason":"x"}`), 404, api.CodeVersionNotFound, false},
		{"revoke, compromised in the future", jsonReq(P, "/v1/versions/"+vs[1].KID+"/revoke", off1, `{"compromised_at":"`+future+`","reason":"x"}`), 400, api.CodeInvalidRequest, false},
		{"revoke, no reason", jsonReq(P, "/v1/versions/"+vs[1].KID+"/revoke", off1, `{"compromised_at":"`+past+`"}`), 400, api.CodeInvalidRequest, true},
		{"revoke, without admin:revoke", jsonReq(P, "/v1/versions/"+vs[1].KID+"/revoke", admin, `{"compromised_at":"`+past+`","reason":"x"}`), 403, api.CodeForbidden, true},
		{"destroy a revoked version's material", jsonReq(P, "/v1/versions/"+retired+"/destroy", off1, `{"reason":"retired and revoked","pending_days":7}`), 200, "", false},
		{"destroy twice", jsonReq(P, "/v1/versions/"+retired+"/destroy", off1, `{"reason":"again"}`), 409, api.CodeInvalidTransition, false},
		{"destroy, pending_days below 7", jsonReq(P, "/v1/versions/"+active+"/destroy", off1, `{"reason":"x","pending_days":6}`), 400, api.CodeInvalidRequest, true},
		{"destroy, pending_days not a number", jsonReq(P, "/v1/versions/"+active+"/destroy", off1, `{"reason":"x","pending_days":"7"}`), 400, "invalid_field", true},
		{"destroy, no reason", jsonReq(P, "/v1/versions/"+active+"/destroy", off1, `{}`), 400, api.CodeInvalidRequest, true},
		{"destroy, unknown field", jsonReq(P, "/v1/versions/"+active+"/destroy", off1, `{"reason":"x","force":true}`), 400, "unknown_field", true},
		{"destroy unknown version", jsonReq(P, "/v1/versions/"+villa+"-2000-01-01-01/destroy", off1, `{"reason":"x"}`), 404, api.CodeVersionNotFound, false},
		{"destroy, without admin:revoke", jsonReq(P, "/v1/versions/"+active+"/destroy", admin, `{"reason":"x"}`), 403, api.CodeForbidden, true},
		{"history with revoked versions", plainReq(G, "/v1/keys/villa/history.json", ""), 200, "", false},
		{"JWKS without revoked versions", plainReq(G, "/v1/keys/villa/jwks.json", ""), 200, "", false},
		{"DID with retired versions", plainReq(G, "/.well-known/did.json", ""), 200, "", false},
	} {
		l.send(c)
	}

	// Two-person rule on tpr.
	tprKID := oaKID(t, l.versions("tpr", admin), "active")
	var accepted struct{ Approval api.ApprovalInfo }
	decode(t, l.send(oaCall{"revoke under the two-person rule", jsonReq(P, "/v1/versions/"+tprKID+"/revoke", off1, `{"compromised_at":"`+past+`","reason":"leak"}`), 202, "", false}), &accepted)
	id := accepted.Approval.ID
	for _, c := range []oaCall{
		{"list pending approvals", plainReq(G, "/v1/approvals?status=pending", off1), 200, "", false},
		{"list approvals", plainReq(G, "/v1/approvals", off2), 200, "", false},
		{"approvals, bad status", plainReq(G, "/v1/approvals?status=bogus", off1), 400, api.CodeInvalidRequest, true},
		{"approvals, without admin:revoke", plainReq(G, "/v1/approvals", admin), 403, api.CodeForbidden, true},
		{"self-approval", plainReq(P, "/v1/approvals/"+id+"/approve", off1), 403, api.CodeSamePrincipal, false},
		{"approve unknown", plainReq(P, "/v1/approvals/0123456789abcdef/approve", off2), 404, api.CodeApprovalNotFound, false},
		{"approve", plainReq(P, "/v1/approvals/"+id+"/approve", off2), 200, "", false},
		{"approve twice", plainReq(P, "/v1/approvals/"+id+"/approve", off2), 409, api.CodeInvalidTransition, false},
		{"list approved approvals", plainReq(G, "/v1/approvals?status=approved", off2), 200, "", false},
	} {
		l.send(c)
	}
	// Destroying the now revoked tpr version needs a second officer too.
	var destroyAccepted struct{ Approval api.ApprovalInfo }
	decode(t, l.send(oaCall{"destroy under the two-person rule", jsonReq(P, "/v1/versions/"+tprKID+"/destroy", off1, `{"reason":"revoked key, material no longer needed"}`), 202, "", false}), &destroyAccepted)
	tprActive := oaKID(t, l.versions("tpr", admin), "active")
	for _, c := range []oaCall{
		{"destroy the active version under the two-person rule", jsonReq(P, "/v1/versions/"+tprActive+"/destroy", off1, `{"reason":"x"}`), 409, api.CodeInvalidTransition, false},
		{"self-approval of a destruction", plainReq(P, "/v1/approvals/"+destroyAccepted.Approval.ID+"/approve", off1), 403, api.CodeSamePrincipal, false},
		{"approve a destruction", plainReq(P, "/v1/approvals/"+destroyAccepted.Approval.ID+"/approve", off2), 200, "", false},
		{"list approvals with a destruction", plainReq(G, "/v1/approvals?status=approved", off1), 200, "", false},
		{"versions with destroyed material", plainReq(G, "/v1/keys/tpr/versions", admin), 200, "", false},
	} {
		l.send(c)
	}

	// Audit, metrics, readiness after all that.
	for _, c := range []oaCall{
		{"audit", plainReq(G, "/v1/audit", auditor), 200, "", false},
		{"audit page", plainReq(G, "/v1/audit?after=2&limit=3", auditor), 200, "", false},
		{"audit, limit 0", plainReq(G, "/v1/audit?limit=0", auditor), 400, api.CodeInvalidRequest, true},
		{"audit, negative after", plainReq(G, "/v1/audit?after=-1", auditor), 400, api.CodeInvalidRequest, true},
		{"audit, without audit:read", plainReq(G, "/v1/audit", admin), 403, api.CodeForbidden, true},
		{"metrics", plainReq(G, "/metrics", ""), 200, "", false},
		{"readyz with keys", plainReq(G, "/readyz", ""), 200, "", false},
		{"tlog proof", plainReq(G, "/v1/tlog/proof?jws="+tl.first(), node), 200, "", false},
		{"tlog proof, not logged", plainReq(G, "/v1/tlog/proof?jws="+tl.first()+"x", node), 404, api.CodeTlogNotFound, false},
		{"tlog proof, other key's token", plainReq(G, "/v1/tlog/proof?jws="+tl.first(), other), 403, api.CodeForbidden, false},
		{"tlog proof, no jws", plainReq(G, "/v1/tlog/proof", node), 400, api.CodeInvalidRequest, true},
	} {
		l.send(c)
	}

	// Off the document.
	l.sendUndocumented("unknown path", plainReq(G, "/v1/nope", admin), 404, api.CodeNotFound)
	l.sendUndocumented("unknown method", plainReq(http.MethodDelete, "/v1/keys", admin), 405, api.CodeMethodNotAllowed)

	// Every documented operation answered 2xx at least once, and the main
	// error answers were all seen.
	for _, op := range oaOperations(l.doc) {
		if !l.ok[op.String()] {
			t.Errorf("%s: no successful live call", op)
		}
	}
	for _, want := range []string{"202", "400 duplicate_key", "400 unknown_field", "400 invalid_request", "400 invalid_json",
		"401 unauthorized", "403 forbidden", "403 same_principal", "404 key_not_found", "404 version_not_found",
		"404 approval_not_found", "409 key_exists", "409 invalid_transition", "409 pending_exists", "400 batch_too_large", "503 backend_unavailable",
		"415 unsupported_media_type"} {
		if !l.got[want] {
			t.Errorf("no live %s answer", want)
		}
	}
}

// TestOpenAPILiveLimits: 413 body_too_large and 429 rate_limited (with
// Retry-After) as documented.
func TestOpenAPILiveLimits(t *testing.T) {
	l := newOALive(t, harnessOpts{MaxBodyBytes: 256, RateLimit: api.RateLimit{PerSecond: 0.01, Burst: 2}})
	l.h.createKey("villa", villa, fixedKind)
	big := l.token("big", "sign:villa")
	l.send(oaCall{"body over the limit", jsonReq(http.MethodPost, "/v1/keys/villa/sign", big,
		`{"payload":{"pad":"`+strings.Repeat("x", 300)+`"}}`), 413, api.CodeBodyTooLarge, false})
	chunked := jsonReq(http.MethodPost, "/v1/keys/villa/sign", big, `{"payload":{"pad":"`+strings.Repeat("x", 300)+`"}}`)
	chunked.chunked = true
	l.send(oaCall{"chunked body over the limit", chunked, 413, api.CodeBodyTooLarge, false})

	tok := l.token("busy", api.ScopeAuditRead)
	l.send(oaCall{"first", plainReq(http.MethodGet, "/v1/audit", tok), 200, "", false})
	l.send(oaCall{"second", plainReq(http.MethodGet, "/v1/audit", tok), 200, "", false})
	n := l.p.count()
	l.send(oaCall{"over the rate limit", plainReq(http.MethodGet, "/v1/audit", tok), 429, api.CodeRateLimited, false})
	if ex := l.p.since(n); len(ex) == 1 {
		if ra, err := strconv.Atoi(ex[0].header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("429 Retry-After %q", ex[0].header.Get("Retry-After"))
		}
	}
	// big has used its burst on the two oversized bodies.
	l.send(oaCall{"sign over the rate limit", jsonReq(http.MethodPost, "/v1/keys/villa/sign", big, `{"payload":{}}`), 429, api.CodeRateLimited, false})
}

// oaSampleBodies are document-valid bodies per operation, for calls that
// must get past body validation.
var oaSampleBodies = map[string]string{
	"sign":                  `{"payload":{}}`,
	"signMCPTransport":      `{"tool":"t","arguments":{}}`,
	"signBatch":             `{"items":[{"payload":{}}]}`,
	"signMCPTransportBatch": `{"items":[{"tool":"t","arguments":{}}]}`,
	"signDetached":          `{"payload":{}}`,
	"digestMCPArguments":    `{"arguments":{}}`,
	"digestSEP2828":         `{"params":{"name":"t","arguments":{}}}`,
	"createKey":             `{"name":"fresh","issuer":"fresh.example"}`,
	"rotateKey":             `{"mode":"now"}`,
	"setPolicy":             `{}`,
	"setBackend":            `{"backend":"software"}`,
	"activateVersion":       `{}`,
	"revokeVersion":         `{"compromised_at":"2026-01-01T00:00:00Z","reason":"r"}`,
	"destroyVersion":        `{"reason":"r"}`,
}

// oaSampleQueries are document-valid query strings per operation.
var oaSampleQueries = map[string]string{
	"tlogProof": "jws=eyJraWQiOiJ4In0.e30.c2ln",
}

// TestOpenAPIAuthMatrix: every operation with a security requirement
// answers 401 without a token or with an unknown one and 403 to a token
// without its x-scopes; every operation without one answers a token-less
// call.
func TestOpenAPIAuthMatrix(t *testing.T) {
	l := newOALive(t, harnessOpts{})
	l.h.createKey("villa", villa, fixedKind)
	kid := l.h.mgr.Keyring().Keys["villa"].Active.KID()
	unrelated := l.token("unrelated", "sign:other")
	for _, op := range oaOperations(l.doc) {
		path := strings.NewReplacer("{name}", "villa", "{kid}", kid, "{id}", "0123456789abcdef").Replace(op.Path)
		mk := func(tok string) request {
			if body, ok := oaSampleBodies[op.Op.OperationID]; ok {
				return jsonReq(op.Method, path, tok, body)
			}
			if q, ok := oaSampleQueries[op.Op.OperationID]; ok {
				return plainReq(op.Method, path+"?"+q, tok)
			}
			return plainReq(op.Method, path, tok)
		}
		reqs := l.doc.Security
		if op.Op.Security != nil {
			reqs = *op.Op.Security
		}
		if len(reqs) == 0 {
			l.send(oaCall{op.String() + " without a token", mk(""), 200, "", false})
			continue
		}
		l.send(oaCall{op.String() + " without a token", mk(""), 401, api.CodeUnauthorized, true})
		l.send(oaCall{op.String() + " with an unknown token", mk("ksv_unknown"), 401, api.CodeUnauthorized, false})
		if scopes := oaStrings(t, op, "x-scopes"); len(scopes) > 0 {
			l.send(oaCall{op.String() + " without " + strings.Join(scopes, " or "), mk(unrelated), 403, api.CodeForbidden, true})
		}
	}
}
