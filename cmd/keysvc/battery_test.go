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

// TestMalformedBattery sends the real server a battery of at least 120
// malformed requests — bad JSON of every kind, wrong methods and content
// types, huge headers and bodies, path traversal in key names, smuggling
// attempts, and issue 13's: another layer's payload or typ on /sign, tokens
// of the wrong layer, rotation without a mode, activation before the JWKS
// max-age, a retention shorter than attestations, an issuer taken, batch
// items over the body limit — and checks each status and error code, while
// a correct signature is requested and verified after every one of them.
func TestMalformedBattery(t *testing.T) {
	e := newLifecycleEnv(t, "")
	scoped := func(name, scope string) string {
		t.Helper()
		out, errOut, code := runCLI(t, nil, "tokens", "create", "--name", name, "--scope", scope, "--data-dir", e.dir)
		if code != 0 {
			t.Fatalf("tokens create: %s", errOut)
		}
		return "Bearer " + strings.TrimSpace(out)
	}
	jwsOnly, transportOnly, auditor := scoped("node-jws", "sign:villa:jws"), scoped("node-transport", "sign:villa:transport"), scoped("auditor", "audit:read")
	srv := startServer(t, nil, "--data-dir", e.dir, "--kek-file", e.kek)
	ctx := context.Background()
	c := client.New(srv.URL, e.token)
	if _, _, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: "villa", Issuer: "villaakerlyckan.se"}); err != nil {
		t.Fatal(err)
	}
	// A pending version published just now (JWKS max-age 5 min): activating
	// it, rotating without a mode, cutting retention are all refused below.
	pending, err := c.ScheduleRotation(ctx, "villa", "battery")
	if err != nil {
		t.Fatal(err)
	}
	active, err := c.Versions(ctx, "villa")
	if err != nil {
		t.Fatal(err)
	}
	activeKID := active[0].KID
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
	batch := "/v1/keys/villa/sign:batch"
	transport := "/v1/keys/villa/mcp-transport"
	rotate := "/v1/keys/villa/rotate"
	policy := "/v1/keys/villa/policy"
	type req struct {
		method, path, ctype, body string
		header                    map[string]string
		status                    int
		// code is the keysvc error code the body must carry, or
		// "net/http:<text>" for a response net/http itself writes.
		code string
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
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"X-Big": strings.Repeat("h", 64<<10)}, 431, "net/http:431 Request Header Fields Too Large"},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"Authorization": "Bearer ksv_" + strings.Repeat("A", 43)}, 401, "unauthorized"},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"Authorization": "Basic dXNlcjpwYXNz"}, 401, "unauthorized"},

		// Layers stay apart (issue 13, ADR 0013).
		{"POST", sign, json, `{"payload":{"type":"vrp.mcp.transport.1","tool":"t","served_at":"2020-01-01T00:00:00Z"},"typ":"JWT"}`, nil, 400, "layer_mismatch"},
		{"POST", sign, json, `{"payload":{"vrp_mcp_profile_version":"1.0"}}`, nil, 400, "layer_mismatch"},
		{"POST", sign, json, `{"payload":{"\u0074ype":"VRP.MCP.transport.9"}}`, nil, 400, "layer_mismatch"},
		{"POST", sign, json, `{"payload":{"a":1},"typ":"vrp-mcp-transport+jws"}`, nil, 400, "layer_mismatch"},
		{"POST", sign, json, `{"payload":{"a":1},"typ":"Application/VRP-MCP-Transport+JWS"}`, nil, 400, "layer_mismatch"},
		{"POST", batch, json, `{"items":[{"payload":{"type":"vrp.mcp.transport.1"}}]}`, nil, 200, "layer_mismatch"},
		{"POST", sign, json, `{"payload":{"type":"vrp.mcp.transport.1"}}`, map[string]string{"Authorization": jwsOnly}, 400, "layer_mismatch"},
		{"POST", transport, json, `{"tool":"t","arguments":{}}`, map[string]string{"Authorization": jwsOnly}, 403, "forbidden"},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"Authorization": transportOnly}, 403, "forbidden"},
		{"POST", batch, json, `{"items":[{"payload":{"a":1}}]}`, map[string]string{"Authorization": transportOnly}, 403, "forbidden"},
		{"POST", "/v1/keys/villa/mcp-transport:batch", json, `{"items":[{"tool":"t","arguments":{}}]}`, map[string]string{"Authorization": jwsOnly}, 403, "forbidden"},
		{"GET", "/v1/keys", "", "", map[string]string{"Authorization": jwsOnly}, 403, "forbidden"},
		{"GET", "/v1/audit", "", "", map[string]string{"Authorization": transportOnly}, 403, "forbidden"},
		{"POST", "/v1/keys", json, `{"name":"x","issuer":"x.example"}`, map[string]string{"Authorization": auditor}, 403, "forbidden"},

		// No officer can open a verification gap (issue 13, ADR 0019).
		{"POST", rotate, json, `  `, nil, 400, "empty_body"},
		{"POST", rotate, json, ``, nil, 400, "invalid_request"},
		{"POST", rotate, "", ``, nil, 400, "invalid_request"},
		{"POST", rotate, json, `{}`, nil, 400, "invalid_request"},
		{"POST", rotate, json, `{"reason":"no mode"}`, nil, 400, "invalid_request"},
		{"POST", rotate, json, `{"mode":"soon"}`, nil, 400, "invalid_request"},
		{"POST", rotate, json, `{"mode":"scheduled"}`, nil, 409, "pending_exists"},
		{"POST", rotate, json, `{"mode":true}`, nil, 400, "invalid_field"},
		{"POST", "/v1/versions/" + pending.KID + "/activate", json, `{"reason":"early"}`, nil, 409, "activation_too_early"},
		{"POST", "/v1/versions/" + pending.KID + "/activate", "", ``, nil, 409, "activation_too_early"},
		{"POST", "/v1/versions/" + pending.KID + "/activate", json, `{"emergency":true}`, nil, 400, "invalid_request"},
		{"POST", "/v1/versions/" + pending.KID + "/activate", json, `{"emergency":"yes","reason":"x"}`, nil, 400, "invalid_field"},
		{"POST", "/v1/versions/" + pending.KID + "/activate", json, `{"emergency":true,"reason":"x","force":true}`, nil, 400, "unknown_field"},
		{"POST", "/v1/versions/" + activeKID + "/activate", json, `{"reason":"x"}`, nil, 409, "invalid_transition"},
		{"PUT", policy, json, `{"rotation_period":"","retention":"1s"}`, nil, 400, "invalid_request"},
		{"PUT", policy, json, `{"rotation_period":"","retention":"24h"}`, nil, 400, "invalid_request"},
		{"PUT", policy, json, `{"rotation_period":"","prepublish":"1m"}`, nil, 400, "invalid_request"},
		{"PUT", policy, json, `{"rotation_period":"10m"}`, nil, 400, "invalid_request"},
		{"PUT", policy, json, `{"rotation_period":"-1h"}`, nil, 400, "invalid_request"},
		{"PUT", policy, json, `{"rotation_period":"forever"}`, nil, 400, "invalid_request"},
		{"PUT", policy, json, `{"rotation_period":3600}`, nil, 400, "invalid_field"},
		{"PUT", policy, json, `{"rotation_period":"","two_person_rule":"on"}`, nil, 400, "invalid_field"},
		{"PUT", policy, json, `{"rotation_period":"","retention":"48h","retention":"1s"}`, nil, 400, "duplicate_key"},
		{"POST", "/v1/keys", json, `{"name":"intruder","issuer":"villaakerlyckan.se"}`, nil, 409, "issuer_in_use"},
		{"POST", "/v1/keys", json, `{"name":"intruder","issuer":"villaakerlyckan.se","share_issuer":"yes"}`, nil, 400, "invalid_field"},
		{"POST", "/v1/keys", json, `{"name":"short","issuer":"short.example","policy":{"rotation_period":"","retention":"1s"}}`, nil, 400, "invalid_request"},
		{"POST", "/v1/keys", json, `{"name":"villa","issuer":"villa2.example"}`, nil, 409, "key_exists"},

		// Revocation, destruction, approvals.
		{"POST", "/v1/versions/" + activeKID + "/revoke", json, `{"compromised_at":"not a time","reason":"x"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/versions/" + activeKID + "/revoke", json, `{"compromised_at":"2026-01-01T00:00:00Z","reason":" "}`, nil, 400, "invalid_request"},
		{"POST", "/v1/versions/" + activeKID + "/revoke", json, `{"compromised_at":"2999-01-01T00:00:00Z","reason":"future"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/versions/" + activeKID + "/revoke", json, `{"reason":"no time"}`, nil, 400, "invalid_request"},
		{"POST", "/v1/versions/" + activeKID + "/revoke", json, `{"compromised_at":"2026-01-01T00:00:00Z","reason":"x","extra":1}`, nil, 400, "unknown_field"},
		{"POST", "/v1/versions/" + activeKID + "/destroy", json, `{"reason":"still signing"}`, nil, 409, "invalid_transition"},
		{"POST", "/v1/versions/" + activeKID + "/destroy", json, `{"reason":"x","pending_days":6}`, nil, 400, "invalid_request"},
		{"POST", "/v1/versions/" + activeKID + "/destroy", json, `{"reason":"x","pending_days":"30"}`, nil, 400, "invalid_field"},
		{"POST", "/v1/versions/villaakerlyckan.se-2000-01-01-01/destroy", json, `{"reason":"x"}`, nil, 404, "version_not_found"},
		{"POST", "/v1/approvals/nosuchapproval/approve", "", ``, nil, 404, "approval_not_found"},
		{"GET", "/v1/approvals?status=bogus", "", "", nil, 400, "invalid_request"},
		{"PUT", "/v1/keys/villa/backend", json, `{"backend":"hsm-of-dreams"}`, nil, 400, "invalid_request"},
		{"PUT", "/v1/keys/villa/backend", json, `{}`, nil, 400, "invalid_request"},

		// Batches.
		{"POST", batch, json, `{"items":{}}`, nil, 400, "invalid_field"},
		{"POST", batch, json, `{"items":[]}`, nil, 400, "invalid_request"},
		{"POST", batch, json, `{}`, nil, 400, "invalid_request"},
		{"POST", batch, json, `{"items":[{"payload":{"a":1}}],"extra":1}`, nil, 400, "unknown_field"},
		{"POST", batch, json, `{"items":[],"items":[]}`, nil, 400, "duplicate_key"},
		{"POST", batch, json, `{"items":[{"payload":{"a":1}}]} x`, nil, 400, "trailing_data"},
		{"POST", batch, json, `[{"payload":{"a":1}}]`, nil, 400, "invalid_json"},
		{"POST", batch, json, `{"items":[` + strings.TrimSuffix(strings.Repeat(`{"payload":{"a":1}},`, 101), ",") + `]}`, nil, 400, "batch_too_large"},
		{"POST", batch, json, `{"items":[{"payload":{"pad":"` + strings.Repeat("x", 70<<10) + `"}}]}`, nil, 200, "body_too_large"},
		{"POST", batch, json, `{"items":[{"payload":{"a":1,"a":2}}]}`, nil, 200, "duplicate_key"},
		{"POST", batch, "text/plain", `{"items":[{"payload":{"a":1}}]}`, nil, 415, "unsupported_media_type"},
		{"POST", "/v1/keys/villa/mcp-transport:batch", json, `{"items":[{"tool":"","arguments":{}}]}`, nil, 200, "invalid_request"},
		{"POST", "/v1/keys/nokey/sign:batch", json, `{"items":[{"payload":{"a":1}}]}`, nil, 404, "key_not_found"},

		// Transport assertions and digests.
		{"POST", transport, json, `{"tool":"","arguments":{}}`, nil, 400, "invalid_request"},
		{"POST", transport, json, `{"tool":"t"}`, nil, 400, "invalid_request"},
		{"POST", transport, json, `{"tool":"t","arguments":{},"served_at":"2020-01-01T00:00:00Z"}`, nil, 400, "invalid_request"},
		{"POST", transport, json, `{"tool":"t","arguments":{},"served_at":"2999-01-01T00:00:00Z"}`, nil, 400, "invalid_request"},
		{"POST", transport, json, `{"tool":"t","arguments":{},"valid_for":"0s"}`, nil, 400, "invalid_request"},
		{"POST", transport, json, `{"tool":"t","arguments":{},"valid_for":"soon"}`, nil, 400, "invalid_request"},
		{"POST", transport, json, `{"tool":"t","arguments":{"a":"\ud800"}}`, nil, 400, "invalid_utf8"},
		{"POST", transport, json, `{"tool":"t","arguments":{"a":1,"a":2}}`, nil, 400, "duplicate_key"},
		{"POST", transport, json, `{"tool":"t","arguments":` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40) + `}`, nil, 400, "nesting_too_deep"},
		{"POST", transport, json, `{"tool":7,"arguments":{}}`, nil, 400, "invalid_field"},
		{"POST", transport, json, `{"tool":"t","arguments":{},"session_id":null}`, nil, 400, "invalid_field"},
		{"POST", "/v1/digests/mcp-arguments", json, `{"arguments":[1]}`, nil, 400, "invalid_request"},
		{"POST", "/v1/digests/mcp-arguments", json, `{"arguments":{"userId":1,"user_id":2}}`, nil, 400, "argument_key_collision"},
		{"POST", "/v1/digests/mcp-arguments", json, `{"arguments":{"n":-9007199254740993}}`, nil, 400, "number_out_of_range"},
		{"POST", "/v1/digests/sep2828", json, `{"params":[]}`, nil, 400, "invalid_request"},
		{"POST", "/v1/digests/sep2828", json, `{"params":{"name":"t","arguments":{}},"x":1}`, nil, 400, "unknown_field"},

		// Bodies, types and encodings of /sign.
		{"POST", sign, json, "\xef\xbb\xbf" + `{"payload":{"a":1}}`, nil, 400, "invalid_json"},
		{"POST", sign, json, `{"payload":{"a":1e400}}`, nil, 400, "number_out_of_range"},
		{"POST", sign, json, `{"payload":null}`, nil, 400, "invalid_request"},
		{"POST", sign, json, `{"payload":{}, "typ":"a\u0000b"}`, nil, 400, "invalid_request"},
		{"POST", sign, json, `"just a string"`, nil, 400, "invalid_field"},
		{"POST", sign, json, `null`, nil, 400, "invalid_field"},
		{"POST", sign, json, `{"Payload":{"a":1}}`, nil, 400, "unknown_field"},
		{"POST", sign, "application/json; charset=utf-16", `{"payload":{"a":1}}`, nil, 415, "unsupported_media_type"},
		{"POST", sign, "application/jsonx", `{"payload":{"a":1}}`, nil, 415, "unsupported_media_type"},
		{"POST", sign, "application/json; charset", `{"payload":{"a":1}}`, nil, 415, "unsupported_media_type"},

		// Methods, routes, credentials.
		{"PUT", transport, json, `{"tool":"t","arguments":{}}`, nil, 405, "method_not_allowed"},
		{"PATCH", "/v1/keys", json, `{}`, nil, 405, "method_not_allowed"},
		{"DELETE", "/v1/keys/villa", "", "", nil, 404, "not_found"},
		{"POST", "/v1/keys/villa/history.json", json, `{}`, nil, 405, "method_not_allowed"},
		{"GET", "/v1/versions/" + activeKID + "/revoke", "", "", nil, 405, "method_not_allowed"},
		{"GET", "/v1/keys/" + strings.Repeat("a", 300) + "/jwks.json", "", "", nil, 404, "key_not_found"},
		{"GET", "/v1/audit?limit=0", "", "", nil, 400, "invalid_request"},
		{"GET", "/v1/audit?limit=10001", "", "", nil, 400, "invalid_request"},
		{"GET", "/v1/audit?after=-1", "", "", nil, 400, "invalid_request"},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"Authorization": "Bearer"}, 401, "unauthorized"},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"Authorization": "Bearer "}, 401, "unauthorized"},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"Authorization": "Token " + strings.TrimPrefix(auth, "Bearer ")}, 401, "unauthorized"},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"Authorization": auth + "x"}, 401, "unauthorized"},
		{"POST", sign, json, `{"payload":{"a":1}}`, map[string]string{"Authorization": "Bearer " + strings.Repeat("A", 4096)}, 401, "unauthorized"},
		{"GET", "/v1/keys", "", "", map[string]string{"Authorization": ""}, 401, "unauthorized"},
	}
	if len(cases) < 120 {
		t.Fatalf("battery has %d requests, want at least 120", len(cases))
	}
	for i, tc := range cases {
		if tc.code == "" {
			t.Fatalf("case %d (%s %s) names no error code", i, tc.method, tc.path)
		}
	}
	t.Logf("%d malformed requests, each with its status and code, a verified signature after each", len(cases))
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
			if v == "" {
				r.Header.Del(k)
				continue
			}
			r.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatalf("request %d (%s %s): %v", i, tc.method, tc.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		okCode := true
		switch text, plain := strings.CutPrefix(tc.code, "net/http:"); {
		case plain:
			okCode = strings.Contains(string(b), text)
		case tc.code != "":
			okCode = strings.Contains(string(b), `"code":"`+tc.code+`"`)
		}
		if resp.StatusCode != tc.status || !okCode {
			t.Errorf("request %d %s %s %.60q: %d %.300s, want %d %s", i, tc.method, tc.path, tc.body, resp.StatusCode, b, tc.status, tc.code)
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
