package anchor

import (
	"context"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/jwksserve"
)

// TestStoredJWKReadOneWay: a database writer adds, to a version's stored
// public JWK, a member another JSON decoder could read as the key: a case
// variant "X" holding another public key, a duplicate "x", an unknown
// member. The anchored thumbprint (go-jose, case-sensitive) ignored the
// case variant and the published entry (encoding/json, case-insensitive,
// last duplicate wins) showed it: the JWKS, key history and did:web
// published the writer's key under a backed version (an attack review,
// session 46). Now the JWK is read one strict way by both: such a version
// is not backed, and its entry is refused.
func TestStoredJWKReadOneWay(t *testing.T) {
	const real = `"x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"`
	for name, jwk := range map[string]string{
		"case-variant member": `{"kty":"OKP","crv":"Ed25519",` + real + `,"X":"PUAXw-hDiVqStwqnTRt-vJyYLM8uxJaMwM1V8Sr0Zgw"}`,
		"duplicate member":    `{"kty":"OKP","crv":"Ed25519",` + real + `,"x":"PUAXw-hDiVqStwqnTRt-vJyYLM8uxJaMwM1V8Sr0Zgw"}`,
		"unknown member":      `{"kty":"OKP","crv":"Ed25519",` + real + `,"x5u":"https://attacker.example/k"}`,
		// The thumbprint of an OKP key has no y: it would be published unanchored.
		"y on an Ed25519 key": `{"kty":"OKP","crv":"Ed25519",` + real + `,"y":"PUAXw-hDiVqStwqnTRt-vJyYLM8uxJaMwM1V8Sr0Zgw"}`,
	} {
		t.Run(name, func(t *testing.T) {
			a := newTestAnchor(t, &emptyLog{})
			h := history(1, 2)
			learnAll(t, a, h)
			if v := a.Check(context.Background(), h); len(v.Versions)+len(v.Keys) != 0 {
				t.Fatalf("before: %+v", v)
			}
			ver := &h.Versions["key00"][0]
			ver.PublicJWK = []byte(jwk)
			v := a.Check(context.Background(), h)
			if why := v.Versions[ver.KID]; !strings.Contains(why, "version "+ver.KID+": anchor: public JWK: ") {
				t.Fatalf("a version whose stored JWK has a %s: verdict %q, want it not backed", name, why)
			}
			if _, err := jwksserve.EntryFor(*ver); err == nil {
				t.Fatalf("EntryFor published a version whose stored JWK has a %s", name)
			}
		})
	}
}
