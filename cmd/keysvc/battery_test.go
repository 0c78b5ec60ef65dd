package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/client"
)

// TestMalformedBattery sends the real server a battery of malformed
// requests — bad JSON of every kind, wrong methods and content types, huge
// headers and bodies, path traversal in key names, smuggling attempts — and
// checks each status and error code, while a correct signature is requested
// and verified after every one of them.
func TestMalformedBattery(t *testing.T) {
	e := newLifecycleEnv(t, "")
	srv := startServer(t, nil, "--data-dir", e.dir, "--kek-file", e.kek)
	ctx := context.Background()
	c := client.New(srv.URL, e.token)
	if _, _, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatal(err)
	}
	jwks, err := c.JWKS(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	keys := jwksByKID(t, jwks)
	good := func(i int) {
		t.Helper()
		res, err := c.Sign(ctx, "villa", map[string]any{"i": i}, "")
		if err != nil || !verifyJWS(t, keys[res.KID]["x"], res.JWS) {
			t.Fatalf("after malformed request %d the service did not sign correctly: %v", i, err)
		}
	}
	auth := "Bearer " + e.token
	sign := "/v1/keys/villa/sign"
	type req struct {
		method, path, ctype, body string
		header                    map[string]string
		status                    int
		code                      string // "" when the body is not a keysvc error (e.g. net/http's 431)
	}
	json := "application/json"
	cases := []req{
		{"POST", sign, json, `{"payload":{"a":1,"a":2}}`, nil, 400, "duplicate_key"},
		{"POST", sign, json, `{"payload":{"a":1},"payload":{"a":2}}`, nil, 400, "duplicate_key"},
		{"POST", sign, json, `{"payload":{"\u0061":1,"a":2}}`, nil, 400, "duplicate_key"},
		{"POST", sign, json, `{"payload":{"a":1}} {}`, nil, 400, "trailing_data"},
		{"POST", sign, json, `{"payload":{"a":1}}]`, nil, 400, "trailing_data"},
		{"POST", sign, json, `{"payload":{"a":1},"typo":1}`, nil, 400, "unknown_field"},
		{"POST", sign, json, `{"payload":{"a":"` + "\xff\xfe" + `"}}`, nil, 400, "invalid_utf8"},
		{"POST", sign, json, `{"payload":{"a":"\ud800"}}`, nil, 400, "invalid_utf8"},
		{"POST", sign, json, `{"payload":{"a":"\udfff\ud800"}}`, nil, 400, "invalid_utf8"},
		{"POST", sign, json, `{"payload":` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40) + `}`, nil, 400, "nesting_too_deep"},
		{"POST", sign, json, `{"payload":{"a":1}`, nil, 400, "invalid_json"},
		{"POST", sign, json, `{payload:1}`, nil, 400, "invalid_json"},
		{"POST", sign, json, `{"payload":{"a":NaN}}`, nil, 400, "invalid_json"},
		{"POST", sign, json, ``, nil, 400, "empty_body"},
		{"POST", sign, json, `{"payload":"string"}`, nil, 400, "invalid_request"},
		{"POST", sign, json, `{"payload":[1,2]}`, nil, 400, "invalid_request"},
		{"POST", sign, json, `{"payload":{"a":1},"typ":7}`, nil, 400, "invalid_field"},
		{"POST", sign, json, `{"payload":{"a":1},"typ":null}`, nil, 400, "invalid_field"},
		{"POST", sign, json, `{"payload":{"a":1},"typ":"` + strings.Repeat("x", 65) + `"}`, nil, 400, "invalid_request"},
		{"POST", sign, json, `{"payload":{"a":1}}` + strings.Repeat(" ", 70<<10), nil, 413, "body_too_large"},
		{"POST", sign, "text/plain", `{"payload":{"a":1}}`, nil, 415, "unsupported_media_type"},
		{"POST", sign, "", `{"payload":{"a":1}}`, nil, 415, "unsupported_media_type"},
		{"POST", sign, "application/json; charset=latin1", `{"payload":{"a":1}}`, nil, 415, "unsupported_media_type"},
		{"POST", sign, "application/x-www-form-urlencoded", `payload=1`, nil, 415, "unsupported_media_type"},
		{"POST", sign, "multipart/form-data; boundary=x", `--x--`, nil, 415, "unsupported_media_type"},
		{"GET", sign, "", "", nil, 405, "method_not_allowed"},
		{"PUT", sign, json, `{"payload":{"a":1}}`, nil, 405, "method_not_allowed"},
		{"DELETE", "/v1/keys/villa/jwks.json", "", "", nil, 405, "method_not_allowed"},
		{"POST", "/.well-known/jwks.json", json, `{}`, nil, 405, "method_not_allowed"},
		{"POST", "/v1/keys/../keys/villa/sign", json, `{"payload":{"a":1}}`, nil, 404, "not_found"},
		{"POST", "/v1/keys/..%2f..%2fetc%2fpasswd/sign", json, `{"payload":{"a":1}}`, nil, 404, "key_not_found"},
		{"POST", "/v1/keys/%2e%2e/sign", json, `{"payload":{"a":1}}`, nil, 404, "key_not_found"},
		{"POST", "/v1/keys/villa%00/sign", json, `{"payload":{"a":1}}`, nil, 404, "key_not_found"},
		{"POST", "/v1/keys/VILLA/sign", json, `{"payload":{"a":1}}`, nil, 404, "key_not_found"},
		{"GET", "/v1/keys/..%2fkeys/jwks.json", "", "", nil, 404, "key_not_found"},
		{"POST", "/v1/keys/villa/sign/extra", json, `{}`, nil, 404, "not_found"},
		{"GET", "/etc/passwd", "", "", nil, 404, "not_found"},
		{"POST", "/v1/keys/villa/mcp-transport", json, `{"tool":"t","arguments":{"checkIn":1,"check_in":2}}`, nil, 400, "argument_key_collision"},
		{"POST", "/v1/keys/villa/mcp-transport", json, `{"tool":"t","arguments":{"n":9007199254740993}}`, nil, 400, "number_out_of_range"},
		{"POST", "/v1/keys/villa/mcp-transport", json, `{"tool":"t","arguments":[]}`, nil, 400, "invalid_request"},
		{"POST", "/v1/keys/villa/mcp-transport", json, `{"tool":"t","arguments":{},"served_at":"yesterday"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/keys/villa/mcp-transport", json, `{"tool":"t","arguments":{},"valid_for":"1000h"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/keys/villa/mcp-transport", json, `{"arguments":{}}`, nil, 400, "invalid_request"},
		{"POST", "/v1/keys", json, `{"name":"../x","issuer":"a.example"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/keys", json, `{"name":"x","issuer":"a.example","jwks_url":"javascript:alert(1)"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/versions/..%2f/revoke", json, `{"compromised_at":"2026-01-01T00:00:00Z","reason":"x"}`, nil, 404, "version_not_found"},
		{"GET", "/v1/audit?limit=-1", "", "", nil, 400, "invalid_request"},
		{"GET", "/v1/audit?after=abc", "", "", nil, 400, "invalid_request"},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"X-Big": strings.Repeat("h", 64<<10)}, 431, ""},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"Authorization": "Bearer ksv_" + strings.Repeat("A", 43)}, 401, "unauthorized"},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"Authorization": "Basic dXNlcjpwYXNz"}, 401, "unauthorized"},
	}
	if len(cases) < 40 {
		t.Fatalf("battery has %d requests, want at least 40", len(cases))
	}
	for i, tc := range cases {
		r, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		r.URL.Opaque = tc.path // send the path exactly as written (no cleaning)
		r.Header.Set("Authorization", auth)
		if tc.ctype != "" {
			r.Header.Set("Content-Type", tc.ctype)
		}
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatalf("request %d (%s %s): %v", i, tc.method, tc.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.code != "" && !strings.Contains(string(b), `"code":"`+tc.code+`"`)) {
			t.Errorf("request %d %s %s %.60q: %d %s, want %d %s", i, tc.method, tc.path, tc.body, resp.StatusCode, b, tc.status, tc.code)
		}
		good(i)
	}

	// Request smuggling: conflicting Content-Length and Transfer-Encoding
	// are refused by net/http, and the connection does not carry a second
	// request into the service.
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(srv.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /v1/keys HTTP/1.1\r\nHost: x\r\n\r\n", sign, auth)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("CL+TE request: %d, want 400", resp.StatusCode)
	}
	good(len(cases))
}
