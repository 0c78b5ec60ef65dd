package store

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Redacted is what replaces a secret in a displayed connection string.
const Redacted = "REDACTED"

// RedactConnString returns a PostgreSQL connection string for display, with
// every password pgx would read from it replaced by Redacted. It covers both
// forms pgx accepts (pgconn.ParseConfig):
//
//   - URLs (postgres:// or postgresql://, libpq §34.1.1.2): the userinfo
//     password — whatever follows the first ':' before the first '@' that
//     precedes any '/', the boundary pgx and libpq use, which differs from
//     net/url's — and every query parameter whose percent-decoded name is
//     a password (password, sslpassword, …).
//   - keyword/value strings (libpq §34.1.1.1): the value of every keyword
//     naming a password, unquoted or single-quoted with backslash escapes
//     (password='it\'s mine'), with or without spaces around '='.
//
// A keyword/value string that does not tokenize, or a URL whose query does
// not decode, is not shown at all: its boundaries are uncertain, so any
// part of it could be a password. Passwords that come from outside the
// string (PGPASSWORD, a service file, a passfile) are not in it; see
// RedactError for errors. The empty string stays empty.
func RedactConnString(s string) string {
	if s == "" {
		return ""
	}
	if isURLConnString(s) {
		out, _, ok := redactURL(s)
		if !ok {
			return "postgres://" + Redacted + " (connection URL not shown: it does not parse)"
		}
		return out
	}
	pairs, err := tokenizeKeywordValue(s)
	if err != nil {
		return Redacted + " (keyword/value connection string not shown: " + err.Error() + ")"
	}
	parts := make([]string, 0, len(pairs))
	for _, p := range pairs {
		if secretConnKey(p.key) {
			parts = append(parts, p.key+"="+Redacted)
		} else {
			parts = append(parts, p.key+"="+p.raw)
		}
	}
	return strings.Join(parts, " ")
}

// RedactError returns err with every secret of connString scrubbed from its
// message: the passwords the string holds (raw, unescaped and decoded
// spellings) and the password pgx resolves for it from the environment
// (PGPASSWORD), a service file or a passfile. Errors that pgx builds from an
// unparseable string redact only the simple spellings, so for a string this
// package cannot tokenize the message is replaced by one naming the reason.
// The result unwraps to err (errors.Is keeps working); nil stays nil.
func RedactError(err error, connString string) error {
	if err == nil || connString == "" {
		return err
	}
	secrets, ok := connStringSecrets(connString)
	if !ok {
		return &redactedError{msg: "store: the PostgreSQL connection string does not parse (not shown: it may hold a password)", err: err}
	}
	if cfg, perr := pgconn.ParseConfig(connString); perr == nil && cfg.Password != "" {
		secrets = append(secrets, cfg.Password)
	}
	msg := err.Error()
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		// pgx quotes the string with its own redaction, which misses
		// escaped quotes and spaces around '=': show ours instead.
		const open = "cannot parse `"
		start := strings.Index(msg, open)
		end := strings.LastIndex(msg, "`: ")
		if start < 0 || end < start+len(open) {
			return &redactedError{msg: "store: the PostgreSQL connection string does not parse (not shown: it may hold a password)", err: err}
		}
		msg = msg[:start+len(open)] + RedactConnString(connString) + msg[end:]
	}
	// Longest first, so that a secret containing another is removed whole.
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, Redacted)
		}
	}
	return &redactedError{msg: msg, err: err}
}

// redactedError is an error whose message had secrets removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func isURLConnString(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// secretConnKey reports keywords whose values are secrets: password,
// sslpassword and any other keyword naming a password.
func secretConnKey(k string) bool { return strings.Contains(strings.ToLower(k), "password") }

// connStringSecrets returns every password spelling connString holds; ok is
// false when it does not tokenize.
func connStringSecrets(s string) ([]string, bool) {
	if isURLConnString(s) {
		_, secrets, ok := redactURL(s)
		return secrets, ok
	}
	pairs, err := tokenizeKeywordValue(s)
	if err != nil {
		return nil, false
	}
	var out []string
	for _, p := range pairs {
		if secretConnKey(p.key) {
			out = append(out, p.raw, p.value, strings.Trim(p.raw, "'"))
		}
	}
	return out, true
}

// redactURL redacts a postgres:// URL with pgx's boundaries (pgconn
// parseURLSettings): userinfo ends at the first '@' found before any '/',
// the password follows the first ':' in it; the query starts at the first
// '?' after the userinfo and is split at '&'. It returns the redacted URL
// and the secrets it removed (raw and percent-decoded).
func redactURL(s string) (string, []string, bool) {
	scheme := "postgres://"
	if strings.HasPrefix(s, "postgresql://") {
		scheme = "postgresql://"
	}
	p := s[len(scheme):]
	var b strings.Builder
	b.WriteString(scheme)
	var secrets []string
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		user, pw, has := strings.Cut(p[:i], ":")
		b.WriteString(user)
		if has {
			b.WriteString(":" + Redacted)
			secrets = append(secrets, pw)
			if d, err := url.PathUnescape(pw); err == nil {
				secrets = append(secrets, d)
			}
		}
		b.WriteByte('@')
		p = p[i+1:]
	}
	rest, query, hasQuery := strings.Cut(p, "?")
	b.WriteString(rest)
	if !hasQuery {
		return b.String(), secrets, true
	}
	b.WriteByte('?')
	for i, pair := range strings.Split(query, "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		k, v, _ := strings.Cut(pair, "=")
		dk, err := url.QueryUnescape(k)
		if err != nil {
			return "", nil, false
		}
		if !secretConnKey(dk) {
			b.WriteString(pair)
			continue
		}
		b.WriteString(k + "=" + Redacted)
		secrets = append(secrets, v)
		if d, err := url.QueryUnescape(v); err == nil {
			secrets = append(secrets, d)
		}
	}
	return b.String(), secrets, true
}

// kvPair is one keyword=value of a keyword/value connection string: raw is
// the value as written (quotes and escapes included), value its meaning.
type kvPair struct{ key, raw, value string }

const connSpace = " \t\n\r\v\f"

// tokenizeKeywordValue splits a keyword/value connection string by libpq's
// rules, as pgconn's parseKeywordValueSettings does: keyword, optional
// spaces, '=', optional spaces, then a value that is either single-quoted
// (backslash escapes any character; the quote must close) or runs to the
// next space (backslash escapes any character).
func tokenizeKeywordValue(s string) ([]kvPair, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, errors.New("it holds a NUL byte")
	}
	var out []kvPair
	s = strings.TrimLeft(s, connSpace)
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, errors.New(`a keyword without "="`)
		}
		key := strings.Trim(s[:eq], connSpace)
		if key == "" || strings.ContainsAny(key, connSpace) {
			return nil, fmt.Errorf("a malformed keyword")
		}
		s = strings.TrimLeft(s[eq+1:], connSpace)
		var raw, val strings.Builder
		switch {
		case len(s) == 0:
		case s[0] != '\'':
			end := 0
			for ; end < len(s) && !strings.ContainsRune(connSpace, rune(s[end])); end++ {
				if s[end] == '\\' {
					end++
					if end == len(s) {
						break
					}
				}
				val.WriteByte(s[end])
			}
			end = min(end, len(s))
			raw.WriteString(s[:end])
			s = strings.TrimLeft(s[end:], connSpace)
		default:
			end := 1
			for ; end < len(s) && s[end] != '\''; end++ {
				if s[end] == '\\' {
					end++
					if end == len(s) {
						return nil, errors.New("an unterminated quoted value")
					}
				}
				val.WriteByte(s[end])
			}
			if end >= len(s) {
				return nil, errors.New("an unterminated quoted value")
			}
			raw.WriteString(s[:end+1])
			s = strings.TrimLeft(s[end+1:], connSpace)
		}
		out = append(out, kvPair{key: key, raw: raw.String(), value: val.String()})
	}
	return out, nil
}
