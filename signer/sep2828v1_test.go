package signer

import (
	"errors"
	"testing"

	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/internal/testvectors"
)

// TestSEP2828V1Vectors holds ProjectSEP2828V1 to the shared
// tools_call_params_plus_meta_authorization_binding_v1 vectors: exact
// projection bytes and digest, and every fails_closed case refused with its
// stable code.
func TestSEP2828V1Vectors(t *testing.T) {
	doc := testvectors.ReadSEP2828V1(t)
	if doc.Projection != SEP2828V1Projection {
		t.Fatalf("vector projection %q, code implements %q", doc.Projection, SEP2828V1Projection)
	}
	// The stable code each fails_closed case must be refused with.
	refusals := map[string]string{
		"no_binding_fails_closed":         CodeSEP2828BindingMissing,
		"no_meta_fails_closed":            CodeSEP2828BindingMissing,
		"empty_nonce_fails_closed":        CodeSEP2828BindingInvalid,
		"nonce_not_string_fails_closed":   CodeSEP2828BindingInvalid,
		"binding_not_object_fails_closed": CodeSEP2828BindingInvalid,
		"missing_arguments_fails_closed":  CodeSEP2828ArgsMissing,
	}
	digested, refused := 0, 0
	for _, c := range doc.Cases {
		t.Run(c.ID, func(t *testing.T) {
			canon, digest, err := ProjectSEP2828V1(c.Params)
			if c.Expected.Error != "" {
				if c.Expected.Error != "fails_closed" {
					t.Fatalf("unknown expected error %q", c.Expected.Error)
				}
				want, ok := refusals[c.ID]
				if !ok {
					t.Fatalf("new fails_closed case %q: add its expected code to this test", c.ID)
				}
				var se *SEP2828Error
				if !errors.As(err, &se) || se.Code != want {
					t.Fatalf("err = %v, want *SEP2828Error %s", err, want)
				}
				if canon != nil || digest != "" {
					t.Fatalf("refused case returned bytes %q / digest %q", canon, digest)
				}
				refused++
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(canon) != c.Expected.ProjectionBytes {
				t.Fatalf("projection bytes\n got %s\nwant %s", canon, c.Expected.ProjectionBytes)
			}
			if digest != c.Expected.Digest {
				t.Fatalf("digest %s, want %s", digest, c.Expected.Digest)
			}
			digested++
		})
	}
	if digested != 5 || refused != len(refusals) {
		t.Fatalf("ran %d digested and %d refused cases, want 5 and %d", digested, refused, len(refusals))
	}
}

// TestSEP2828V1Strict checks the refusals beyond the vectors: duplicate
// names anywhere, integers beyond I-JSON, a non-string name, _meta that is
// not an object.
func TestSEP2828V1Strict(t *testing.T) {
	for _, c := range []struct{ name, params, code string }{
		{"duplicate in binding", `{"name":"t","arguments":{},"_meta":{"authorization_binding":{"nonce":"a","nonce":"b"}}}`, strictjson.CodeDuplicateKey},
		{"duplicate in arguments", `{"name":"t","arguments":{"a":1,"a":2},"_meta":{"authorization_binding":{"nonce":"a"}}}`, strictjson.CodeDuplicateKey},
		{"integer beyond I-JSON", `{"name":"t","arguments":{"a":9007199254740992},"_meta":{"authorization_binding":{"nonce":"a"}}}`, strictjson.CodeNumberTooLarge},
		{"name not a string", `{"name":7,"arguments":{},"_meta":{"authorization_binding":{"nonce":"a"}}}`, CodeSEP2828NameMissing},
		{"arguments an array", `{"name":"t","arguments":[],"_meta":{"authorization_binding":{"nonce":"a"}}}`, CodeSEP2828ArgsMissing},
		{"_meta a string", `{"name":"t","arguments":{},"_meta":"x"}`, CodeSEP2828BindingMissing},
		{"params an array", `[]`, CodeSEP2828NameMissing},
		{"nonce null", `{"name":"t","arguments":{},"_meta":{"authorization_binding":{"nonce":null}}}`, CodeSEP2828BindingInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := ProjectSEP2828V1([]byte(c.params))
			var se *SEP2828Error
			var je *strictjson.Error
			switch {
			case errors.As(err, &se):
				if se.Code != c.code {
					t.Fatalf("code %s, want %s", se.Code, c.code)
				}
			case errors.As(err, &je):
				if je.Code != c.code {
					t.Fatalf("code %s, want %s", je.Code, c.code)
				}
			default:
				t.Fatalf("err = %v, want code %s", err, c.code)
			}
		})
	}
}
