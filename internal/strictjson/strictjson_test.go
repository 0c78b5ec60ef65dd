package strictjson

import (
	"errors"
	"github.com/go-json-experiment/json/jsontext"
	"strings"
	"testing"
)

func code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return "other:" + err.Error()
	}
	return ""
}

var (
	ijson = Limits{Numbers: NumbersIJSON}
	exact = Limits{Numbers: NumbersExact}
)

func TestCheckCodes(t *testing.T) {
	deep := strings.Repeat("[", 33) + strings.Repeat("]", 33)
	cases := []struct {
		name, in string
		lim      Limits
		want     string
	}{
		{"ok object", `{"a":1,"b":[true,null,"x"]}`, Limits{}, ""},
		{"ok scalar", `"x"`, Limits{}, ""},
		{"ok whitespace after", "{\"a\":1}\n\t ", Limits{}, ""},
		{"empty", "  ", Limits{}, CodeEmptyBody},
		{"duplicate top", `{"a":1,"a":2}`, Limits{}, CodeDuplicateKey},
		{"duplicate nested", `{"a":{"b":1,"b":1}}`, Limits{}, CodeDuplicateKey},
		{"duplicate via escape", `{"a":1,"\u0061":2}`, Limits{}, CodeDuplicateKey},
		{"invalid utf8", "{\"a\":\"\xff\"}", Limits{}, CodeInvalidUTF8},
		{"lone high surrogate", `{"a":"\ud800"}`, Limits{}, CodeInvalidUTF8},
		{"lone low surrogate", `{"a":"\udc00x"}`, Limits{}, CodeInvalidUTF8},
		{"paired surrogates ok", `{"a":"\ud83d\ude00"}`, Limits{}, ""},
		{"trailing object", `{"a":1}{"b":2}`, Limits{}, CodeTrailingData},
		{"trailing garbage", `{"a":1} x`, Limits{}, CodeTrailingData},
		{"truncated", `{"a":`, Limits{}, CodeInvalidJSON},
		{"not json", `hello`, Limits{}, CodeInvalidJSON},
		{"too deep", deep, Limits{}, CodeTooDeep},
		{"depth at limit ok", strings.Repeat("[", 32) + strings.Repeat("]", 32), Limits{}, ""},
		{"ijson: 2^53 out of range", `{"n":9007199254740992}`, ijson, CodeNumberTooLarge},
		{"ijson: 2^53-1 ok", `{"n":9007199254740991}`, ijson, ""},
		{"ijson: negative out of range", `[-9007199254740993]`, ijson, CodeNumberTooLarge},
		{"ijson: integral float out of range", `[1e20]`, ijson, CodeNumberTooLarge},
		{"ijson: overflow", `[1e400]`, ijson, CodeNumberTooLarge},
		{"ijson: fractions and large floats ok", `[0.1, 1e-7, 2.5e10, -0, 1e300, 1.5e21]`, ijson, ""},
		{"ijson: integer literal beyond 1e21", `[1000000000000000000000000]`, ijson, CodeNumberTooLarge},
		{"exact: inexact integer literal", `{"n":9007199254740993}`, exact, CodeNumberTooLarge},
		{"exact: exact large integer ok", `[9007199254740992, 100000000000000000000]`, exact, ""},
		{"exact: RFC 8785's own integer output ok", `[72070000000000020]`, exact, ""},
		{"exact: digits the double does not print", `[72070000000000016]`, exact, CodeNumberTooLarge},
		{"exact: exponent form is a float", `[1E30, 9007199254740993.0, 1e20]`, exact, ""},
		{"exact: overflow", `[-1e400]`, exact, CodeNumberTooLarge},
		{"any: anything that parses", `[9007199254740993, 1e400]`, Limits{}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := code(Check([]byte(c.in), c.lim)); got != c.want {
				t.Fatalf("Check(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

func TestDecodeStruct(t *testing.T) {
	type req struct {
		Tool string `json:"tool"`
		N    int    `json:"n,omitempty"`
	}
	var r req
	if err := Decode([]byte(`{"tool":"t","n":3}`), &r, Limits{}); err != nil || r.Tool != "t" || r.N != 3 {
		t.Fatalf("got %+v, %v", r, err)
	}
	if got := code(Decode([]byte(`{"tool":"t","extra":1}`), &r, Limits{})); got != CodeUnknownField {
		t.Fatalf("unknown field: got %q", got)
	}
	if got := code(Decode([]byte(`{"tool":5}`), &r, Limits{})); got != CodeInvalidField {
		t.Fatalf("wrong type: got %q", got)
	}
	err := Decode([]byte(`{"tool":"t","extra":1}`), &r, Limits{})
	if !strings.Contains(err.Error(), "/extra") {
		t.Fatalf("message should name the field: %v", err)
	}
	// null where the field cannot hold it is a wrong type, not "absent".
	for _, body := range []string{`{"tool":null}`, `{"tool":"t","n":null}`} {
		err := Decode([]byte(body), &r, Limits{})
		if code(err) != CodeInvalidField || !strings.Contains(err.Error(), "must not be null") {
			t.Fatalf("%s: %v", body, err)
		}
	}
	type raw struct {
		P *int           `json:"p"`
		V jsontext.Value `json:"v"`
	}
	var rr raw
	if err := Decode([]byte(`{"p":null,"v":null}`), &rr, Limits{}); err != nil || rr.P != nil || string(rr.V) != "null" {
		t.Fatalf("nullable fields: %+v %v", rr, err)
	}
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,2,{"b":"\ud800"}]`, `{"a":1,"a":2}`, `"x"`, `1e400`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Check(b, ijson)
		if err != nil && code(err) == "" {
			t.Fatalf("error without code: %v", err)
		}
	})
}

// TestDecodeNullBody: a body that is JSON null is not an object: refused
// (invalid_field) rather than leaving the struct as it was.
func TestDecodeNullBody(t *testing.T) {
	var v struct {
		A string `json:"a"`
	}
	for _, body := range []string{`null`, ` null `} {
		err := Decode([]byte(body), &v, Limits{})
		var se *Error
		if !errors.As(err, &se) || se.Code != CodeInvalidField {
			t.Errorf("Decode(%q) = %v, want %s", body, err, CodeInvalidField)
		}
	}
	var any struct{}
	if err := Decode([]byte(`{}`), &any, Limits{}); err != nil {
		t.Errorf("Decode({}) = %v", err)
	}
}
