package pkcs11

import (
	"errors"
	"fmt"
	"strings"
)

// objectURI is the part of an RFC 7512 PKCS#11 URI keysvc writes and reads:
//
//	pkcs11:token=<label>;object=<label>;id=<bytes>;type=private?module-path=<path>
//
// Path attributes are separated by ";", query attributes by "&"; values are
// percent-encoded (RFC 7512 §2.3). The id is always written fully
// percent-encoded, as §2.3 recommends for binary values.
type objectURI struct {
	Token      string // CK_TOKEN_INFO.label
	Object     string // CKA_LABEL
	ID         []byte // CKA_ID
	Type       string // "private", "public", ...
	ModulePath string // query attribute module-path
}

const uriScheme = "pkcs11:"

// String formats u as an RFC 7512 URI.
func (u objectURI) String() string {
	var sb strings.Builder
	sb.WriteString(uriScheme)
	sep := ""
	attr := func(name, value string, all bool) {
		sb.WriteString(sep)
		sb.WriteString(name)
		sb.WriteByte('=')
		pctEncode(&sb, value, all, false)
		sep = ";"
	}
	if u.Token != "" {
		attr("token", u.Token, false)
	}
	if u.Object != "" {
		attr("object", u.Object, false)
	}
	if len(u.ID) > 0 {
		attr("id", string(u.ID), true)
	}
	if u.Type != "" {
		attr("type", u.Type, false)
	}
	if u.ModulePath != "" {
		sb.WriteString("?module-path=")
		pctEncode(&sb, u.ModulePath, false, true)
	}
	return sb.String()
}

// pctEncode writes s, percent-encoding every byte but RFC 3986 unreserved
// characters (and "/" in a query value); all encodes every byte.
func pctEncode(sb *strings.Builder, s string, all, query bool) {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !all && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' || query && c == '/') {
			sb.WriteByte(c)
			continue
		}
		sb.WriteByte('%')
		sb.WriteByte(hex[c>>4])
		sb.WriteByte(hex[c&15])
	}
}

// parseObjectURI parses a PKCS#11 URI. Unknown attributes are ignored (RFC
// 7512 §2.3 lets a consumer ignore attributes it does not know); a
// repeated attribute is an error.
func parseObjectURI(s string) (objectURI, error) {
	var u objectURI
	rest, ok := strings.CutPrefix(s, uriScheme)
	if !ok {
		return u, fmt.Errorf("not a PKCS#11 URI (want %q...)", uriScheme)
	}
	path, query, _ := strings.Cut(rest, "?")
	seen := map[string]bool{}
	parse := func(part, sep string, set func(name, value string)) error {
		if part == "" {
			return nil
		}
		for _, a := range strings.Split(part, sep) {
			name, raw, ok := strings.Cut(a, "=")
			if !ok || name == "" {
				return fmt.Errorf("malformed PKCS#11 URI attribute %q", a)
			}
			if seen[name] {
				return fmt.Errorf("PKCS#11 URI repeats attribute %q", name)
			}
			seen[name] = true
			v, err := pctDecode(raw)
			if err != nil {
				return fmt.Errorf("PKCS#11 URI attribute %s: %w", name, err)
			}
			set(name, v)
		}
		return nil
	}
	err := parse(path, ";", func(name, v string) {
		switch name {
		case "token":
			u.Token = v
		case "object":
			u.Object = v
		case "id":
			u.ID = []byte(v)
		case "type":
			u.Type = v
		}
	})
	if err != nil {
		return objectURI{}, err
	}
	err = parse(query, "&", func(name, v string) {
		if name == "module-path" {
			u.ModulePath = v
		}
	})
	return u, err
}

func pctDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			out = append(out, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("truncated percent-encoding")
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("bad percent-encoding %q", s[i:i+3])
		}
		out = append(out, byte(hi<<4|lo))
		i += 2
	}
	return string(out), nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
