package kmstest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestKMSServerProtocol checks the wire format the SDK relies on, with
// plain HTTP: JSON 1.1 content type, X-Amz-Target routing, SigV4 presence,
// and errors as {"__type","message"} with X-Amzn-ErrorType.
func TestKMSServerProtocol(t *testing.T) {
	s, err := Start(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") {
		t.Fatalf("server listens on %s, want loopback", s.URL)
	}
	const auth = "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/kms/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=" +
		"0000000000000000000000000000000000000000000000000000000000000000"
	do := func(target, contentType, authorization, body string) (int, string, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/", strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("X-Amz-Target", target)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if ct := resp.Header.Get("Content-Type"); ct != "application/x-amz-json-1.1" {
			t.Fatalf("response Content-Type %q", ct)
		}
		return resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"), out
	}
	const ct = "application/x-amz-json-1.1"
	cases := []struct {
		target, ct, auth, body string
		status                 int
		code                   string
	}{
		{"TrentService.ListKeys", ct, "", `{}`, 400, "MissingAuthenticationTokenException"},
		{"TrentService.ListKeys", "application/json", auth, `{}`, 400, "SerializationException"},
		{"Other.ListKeys", ct, auth, `{}`, 400, "UnknownOperationException"},
		{"TrentService.Encrypt", ct, auth, `{}`, 400, "UnknownOperationException"},
		{"TrentService.ListKeys", ct, strings.Replace(auth, "us-east-1", "eu-north-1", 1), `{}`, 400, "InvalidSignatureException"},
		{"TrentService.CreateKey", ct, auth, `{"KeySpec":"ECC_NIST_EDWARDS25519"}`, 400, "ValidationException"},
		{"TrentService.CreateKey", ct, auth, `{"KeySpec":"RSA_2048","KeyUsage":"SIGN_VERIFY"}`, 400, "UnsupportedOperationException"},
		{"TrentService.Sign", ct, auth, `{"KeyId":"alias/none","Message":"eA==","SigningAlgorithm":"ED25519_SHA_512"}`, 400, "NotFoundException"},
	}
	for _, c := range cases {
		status, hdr, out := do(c.target, c.ct, c.auth, c.body)
		if status != c.status || hdr != c.code || out["__type"] != c.code || out["message"] == "" {
			t.Errorf("%s %s: %d %s %v, want %d %s", c.target, c.body, status, hdr, out, c.status, c.code)
		}
	}
	status, _, out := do("TrentService.CreateKey", ct, auth, `{"KeySpec":"ECC_NIST_EDWARDS25519","KeyUsage":"SIGN_VERIFY","Tags":[{"TagKey":"keysvc:kid","TagValue":"a"}]}`)
	md, _ := out["KeyMetadata"].(map[string]any)
	if status != 200 || md["KeySpec"] != SpecEd25519 || md["KeyState"] != "Enabled" || !strings.HasPrefix(md["Arn"].(string), "arn:aws:kms:us-east-1:111122223333:key/") {
		t.Fatalf("CreateKey: %d %v", status, out)
	}
	if tags := s.Tags(md["Arn"].(string)); tags["keysvc:kid"] != "a" {
		t.Fatalf("tags %v", tags)
	}
	status, _, out = do("TrentService.Sign", ct, auth, `{"KeyId":"`+md["KeyId"].(string)+`","Message":"eA==","SigningAlgorithm":"ED25519_SHA_512","MessageType":"RAW"}`)
	if status != 200 || out["SigningAlgorithm"] != AlgEd25519 || len(out["Signature"].(string)) != 88 {
		t.Fatalf("Sign: %d %v", status, out)
	}
}
