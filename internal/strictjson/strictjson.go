// Package strictjson is keysvc's one JSON decoder for untrusted input. It
// refuses, each with its own stable code, everything an ordinary decoder
// would silently accept or guess at: duplicate object member names,
// invalid UTF-8 and lone surrogate escapes (I-JSON, RFC 7493 §2.1, §2.3),
// trailing data after the value, nesting beyond a limit, members a target
// struct does not declare, and — where hashed — numbers a double cannot
// hold exactly or outside the I-JSON range (RFC 7493 §2.2).
//
// Syntax and semantics come from encoding/json/v2 (the
// github.com/go-json-experiment/json mirror), which rejects duplicate names
// and invalid UTF-8 by default.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Stable error codes (also used verbatim in HTTP error responses).
const (
	CodeInvalidJSON    = "invalid_json"        // not JSON at all, or truncated
	CodeDuplicateKey   = "duplicate_key"       // an object repeats a member name
	CodeInvalidUTF8    = "invalid_utf8"        // invalid UTF-8 or a lone surrogate escape
	CodeTrailingData   = "trailing_data"       // bytes after the top-level value
	CodeTooDeep        = "nesting_too_deep"    // nesting beyond Limits.MaxDepth
	CodeUnknownField   = "unknown_field"       // a member the target does not declare
	CodeInvalidField   = "invalid_field"       // a member of the wrong JSON type
	CodeNumberTooLarge = "number_out_of_range" // outside ±(2^53−1) or not finite
	CodeEmptyBody      = "empty_body"          // no bytes at all
)

// Error is a decoding failure with a stable Code and a message that names
// the place (a JSON Pointer, RFC 6901) but never echoes input values.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Limits bound what Decode accepts.
type Limits struct {
	MaxDepth int // maximum nesting of arrays and objects; 0 means 32
	// Numbers selects which numbers are accepted (default: any that parse).
	Numbers NumberRule
}

// NumberRule says which JSON numbers Check accepts.
type NumberRule int

const (
	// NumbersAny accepts every syntactically valid number.
	NumbersAny NumberRule = iota
	// NumbersExact accepts numbers an IEEE 754 double holds as written:
	// integer literals (no fraction, no exponent) must be exactly
	// representable, and nothing may overflow (1e400). Literals with a
	// fraction or exponent are floats by intent and round per RFC 8785
	// §3.2.2.3. RFC 8785 output is a fixed point of this rule.
	NumbersExact
	// NumbersIJSON keeps integers in the I-JSON interoperable range (RFC
	// 7493 §2.2): an integer literal, or a value whose RFC 8785 form is an
	// integer literal (integral, below 1e21), must lie within ±(2^53−1).
	// Floats such as 1e300 or 0.5 pass. For hashed inputs that other
	// implementations must reproduce bit for bit; a fixed point of RFC 8785.
	NumbersIJSON
)

const defaultMaxDepth = 32

// maxSafeInteger is 2^53−1, the I-JSON exact integer limit (RFC 7493 §2.2).
const maxSafeInteger = 1<<53 - 1

// Check validates data as exactly one strict JSON value (see package doc).
func Check(data []byte, lim Limits) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return &Error{CodeEmptyBody, "request body is empty; a JSON value is required"}
	}
	if !utf8.Valid(data) {
		return &Error{CodeInvalidUTF8, "body is not valid UTF-8"}
	}
	maxDepth := lim.MaxDepth
	if maxDepth <= 0 {
		maxDepth = defaultMaxDepth
	}
	return WithDecoder(data, func(dec *jsontext.Decoder) error { return check(dec, maxDepth, lim.Numbers) })
}

// WithDecoder runs fn with a pooled jsontext.Decoder reading data (parsed
// in place, not copied). The decoder has jsontext's default strictness
// (no duplicate names, valid UTF-8) and must not be kept after fn returns.
func WithDecoder(data []byte, fn func(dec *jsontext.Decoder) error) error {
	pd := decoders.Get().(*pooledDecoder)
	defer pd.release()
	pd.in = *bytes.NewBuffer(data) // a *bytes.Buffer is parsed in place
	pd.dec.Reset(&pd.in)
	return fn(pd.dec)
}

func check(dec *jsontext.Decoder, maxDepth int, numbers NumberRule) error {
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return classify(err, dec)
		}
		if dec.StackDepth() > maxDepth {
			return &Error{CodeTooDeep, fmt.Sprintf("JSON nesting deeper than %d at %s", maxDepth, pointer(dec))}
		}
		if numbers != NumbersAny && tok.Kind() == '0' {
			if err := checkNumber(tok.String(), numbers); err != nil {
				return &Error{CodeNumberTooLarge, fmt.Sprintf("number at %s %s", pointer(dec), err)}
			}
		}
		if dec.StackDepth() == 0 {
			break
		}
	}
	// Exactly one value: anything but whitespace after it is refused.
	if _, err := dec.ReadToken(); err != io.EOF {
		return &Error{CodeTrailingData, "unexpected data after the JSON value"}
	}
	return nil
}

// Decode checks data (see Check) and unmarshals it into v, refusing members
// that v's struct types do not declare, and — when v points to a struct —
// a body that is null, or a top-level member whose value is null although
// its field cannot be null (encoding/json would silently leave the zero
// value): CodeInvalidField.
func Decode(data []byte, v any, lim Limits) error {
	if err := Check(data, lim); err != nil {
		return err
	}
	if err := checkNulls(data, v); err != nil {
		return err
	}
	err := json.Unmarshal(data, v, json.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	var se *json.SemanticError
	if errors.As(err, &se) {
		where := string(se.JSONPointer)
		if where == "" {
			where = "/"
		}
		if errors.Is(se.Err, json.ErrUnknownName) {
			return &Error{CodeUnknownField, fmt.Sprintf("unknown field %s", where)}
		}
		return &Error{CodeInvalidField, fmt.Sprintf("field %s has the wrong type or value", where)}
	}
	return &Error{CodeInvalidJSON, "body is not valid JSON"}
}

func pointer(dec *jsontext.Decoder) string {
	p := string(dec.StackPointer())
	if p == "" {
		return "/"
	}
	return p
}

func classify(err error, dec *jsontext.Decoder) error {
	if errors.Is(err, jsontext.ErrDuplicateName) {
		return &Error{CodeDuplicateKey, fmt.Sprintf("duplicate member name in object at %s", pointer(dec))}
	}
	msg := err.Error()
	if strings.Contains(msg, "UTF-8") || strings.Contains(msg, "surrogate") {
		return &Error{CodeInvalidUTF8, fmt.Sprintf("invalid UTF-8 or lone surrogate escape at %s", pointer(dec))}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{CodeInvalidJSON, "JSON value is truncated"}
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		return &Error{CodeInvalidJSON, fmt.Sprintf("invalid JSON at byte %d", se.ByteOffset)}
	}
	return &Error{CodeInvalidJSON, "body is not valid JSON"}
}

func checkNumber(lit string, rule NumberRule) error {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return errors.New("does not fit an IEEE 754 double")
	}
	switch rule {
	case NumbersIJSON:
		// Refused: integer literals beyond the range, and any value whose
		// RFC 8785 form is such an integer literal (integral magnitudes
		// below 1e21 are serialized without an exponent).
		integerLiteral := !strings.ContainsAny(lit, ".eE")
		if math.Abs(f) > maxSafeInteger && (integerLiteral || (f == math.Trunc(f) && math.Abs(f) < 1e21)) {
			return errors.New("is an integer beyond ±(2^53−1), outside the I-JSON range (RFC 7493 §2.2)")
		}
	case NumbersExact:
		// An integer literal states an exact value; RFC 8785 (ECMAScript
		// Number serialization) must print that same integer back: the
		// shortest digits that round-trip the double, padded with zeros.
		// (Comparing with the double's exact binary value instead would
		// refuse RFC 8785's own output, e.g. 72070000000000020.)
		if !strings.ContainsAny(lit, ".eE") {
			if digits := strings.TrimPrefix(lit, "-"); len(digits) <= 15 {
				return nil // below 10^15 < 2^53: every integer is exact
			}
			exact, ok := new(big.Int).SetString(lit, 10)
			printed, _ := new(big.Int).SetString(strconv.FormatFloat(f, 'f', -1, 64), 10)
			if !ok || printed == nil || exact.Cmp(printed) != 0 {
				return errors.New("is an integer an IEEE 754 double cannot hold exactly; it would change when canonicalized")
			}
		}
	}
	return nil
}

// pooledDecoder keeps a jsontext.Decoder (and its token buffers) across
// calls to Check: one per request item would otherwise dominate the
// allocations of a batch.
// The input buffer lives in the pooledDecoder too, so that a call
// allocates nothing (issue 18: three per batch item before).
type pooledDecoder struct {
	dec       *jsontext.Decoder
	in, empty bytes.Buffer
}

var decoders = sync.Pool{New: func() any {
	pd := &pooledDecoder{}
	pd.dec = jsontext.NewDecoder(&pd.empty)
	return pd
}}

// release drops the reference to the caller's bytes and returns pd to the pool.
func (pd *pooledDecoder) release() {
	pd.in = bytes.Buffer{}
	pd.empty.Reset()
	pd.dec.Reset(&pd.empty)
	decoders.Put(pd)
}

// checkNulls refuses `"name": null` at the top level of data for a field of
// v's struct that is not a pointer, slice, map or interface (a raw value
// such as jsontext.Value is a slice and may hold null).
func checkNulls(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct || !bytes.Contains(data, []byte("null")) {
		return nil // the common case costs one scan for the literal
	}
	fields := nonNullable(rv.Elem().Type())
	return WithDecoder(data, func(dec *jsontext.Decoder) error {
		tok, err := dec.ReadToken()
		if err == nil && tok.Kind() == 'n' {
			// encoding/json would leave the struct as it is: a body of
			// null is not an object (issue 13 battery).
			return &Error{CodeInvalidField, "the body must be a JSON object, not null"}
		}
		if err != nil || tok.Kind() != '{' || len(fields) == 0 {
			return nil // not an object: Unmarshal reports it
		}
		for dec.PeekKind() != '}' {
			name, err := dec.ReadToken()
			if err != nil {
				return nil
			}
			if dec.PeekKind() == 'n' && fields[name.String()] {
				return &Error{CodeInvalidField, fmt.Sprintf("field /%s must not be null", name.String())}
			}
			if err := dec.SkipValue(); err != nil {
				return nil
			}
		}
		return nil
	})
}

// nullableKinds may hold JSON null.
var nullableKinds = map[reflect.Kind]bool{reflect.Pointer: true, reflect.Slice: true, reflect.Map: true, reflect.Interface: true}

var nonNullableCache sync.Map // reflect.Type -> map[string]bool

// nonNullable returns the JSON names of t's fields that cannot hold null.
func nonNullable(t reflect.Type) map[string]bool {
	if m, ok := nonNullableCache.Load(t); ok {
		return m.(map[string]bool)
	}
	m := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" || nullableKinds[f.Type.Kind()] {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = true
	}
	nonNullableCache.Store(t, m)
	return m
}
