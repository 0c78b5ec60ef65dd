package verifier

import (
	"errors"
	"strings"
	"time"
	"unicode"
)

// ErrInstant reports a string that is not an RFC 3339 date-time.
var ErrInstant = errors.New("not an RFC 3339 date-time")

// ParseInstant parses an RFC 3339 §5.6 date-time, strictly:
//
//	YYYY-MM-DD "T" HH:MM:SS [ "." 1*DIGIT ] ( "Z" / ("+" / "-") HH:MM )
//
// "T" and "Z" may be lower case (RFC 3339 §5.6 note). The date must exist
// in the proleptic Gregorian calendar, hour 00–23, minute 00–59, second
// 00–59 (a leap second :60 is refused), offset hours 00–23. Any fraction
// length is accepted; the result keeps nanoseconds. Every other form —
// including those JavaScript's Date.parse accepts — returns ErrInstant.
func ParseInstant(s string) (time.Time, error) {
	// Fixed part: "2006-01-02T15:04:05" is 19 bytes.
	if len(s) < 20 {
		return time.Time{}, ErrInstant
	}
	num := func(i, n int) (int, bool) {
		v := 0
		for _, c := range []byte(s[i : i+n]) {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 2)
	day, ok3 := num(8, 2)
	hour, ok4 := num(11, 2)
	minute, ok5 := num(14, 2)
	sec, ok6 := num(17, 2)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 ||
		s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') || s[13] != ':' || s[16] != ':' {
		return time.Time{}, ErrInstant
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(year, month) ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, ErrInstant
	}
	rest := s[19:]
	nsec := 0
	if rest[0] == '.' {
		i := 1
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			if i <= 9 {
				nsec = nsec*10 + int(rest[i]-'0')
			}
			i++
		}
		if i == 1 {
			return time.Time{}, ErrInstant
		}
		for d := i; d <= 9; d++ {
			nsec *= 10
		}
		rest = rest[i:]
	}
	var loc *time.Location
	switch {
	case rest == "Z" || rest == "z":
		loc = time.UTC
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, ok1 := num(len(s)-5, 2)
		om, ok2 := num(len(s)-2, 2)
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return time.Time{}, ErrInstant
		}
		off := oh*3600 + om*60
		if rest[0] == '-' {
			off = -off
		}
		loc = time.FixedZone("", off)
	default:
		return time.Time{}, ErrInstant
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, loc), nil
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	default:
		return 31
	}
}

// parseWindowBound is the reference verifier's parseInstant: a non-blank
// string that is an instant, as Unix milliseconds.
func parseWindowBound(v any) (int64, bool) {
	s, ok := v.(string)
	if !ok || isBlank(s) {
		return 0, false
	}
	t, err := ParseInstant(s)
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}

// isBlank reports whether s is empty after JavaScript's String.prototype.trim,
// which strips ECMAScript WhiteSpace and LineTerminator: Unicode White_Space
// except U+0085, plus U+FEFF.
func isBlank(s string) bool {
	return strings.TrimFunc(s, func(r rune) bool {
		return r == '\uFEFF' || (r != '\u0085' && unicode.IsSpace(r))
	}) == ""
}
