package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gowebpki/jcs"
)

// AuditHash returns the hex SHA-256 of an audit row's canonical form: the
// RFC 8785 (JCS) bytes of the JSON object
//
//	{"action","actor","at","details","key_name","kid","prev_hash","reason","seq"}
//
// where "at" is RFC 3339 UTC with microseconds and "details" is the row's JSON
// object (or null). Each row commits to its predecessor through prev_hash, so
// altering or removing any row breaks every later hash.
func AuditHash(ev AuditEvent) (string, error) {
	var details json.RawMessage = []byte("null")
	if len(ev.Details) > 0 {
		details = ev.Details
	}
	doc := struct {
		Action   string          `json:"action"`
		Actor    string          `json:"actor"`
		At       string          `json:"at"`
		Details  json.RawMessage `json:"details"`
		KeyName  string          `json:"key_name"`
		KID      string          `json:"kid"`
		PrevHash string          `json:"prev_hash"`
		Reason   string          `json:"reason"`
		Seq      int64           `json:"seq"`
	}{ev.Action, ev.Actor, FormatTime(ev.At), details, ev.KeyName, ev.KID, ev.PrevHash, ev.Reason, ev.Seq}
	raw, err := json.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("store: audit row %d: %w", ev.Seq, err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("store: audit row %d: canonical JSON: %w", ev.Seq, err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// VerifyAuditChain checks rows (ascending, starting at Seq 1) and returns the
// Seq of the first row whose sequence, prev_hash or hash does not hold, or 0
// when the whole chain is intact.
func VerifyAuditChain(rows []AuditEvent) (firstBroken int64, err error) {
	prev := ""
	for i, ev := range rows {
		if ev.Seq != int64(i+1) || ev.PrevHash != prev {
			return ev.Seq, nil
		}
		h, err := AuditHash(ev)
		if err != nil {
			return 0, err
		}
		if h != ev.Hash {
			return ev.Seq, nil
		}
		prev = ev.Hash
	}
	return 0, nil
}

// Precision is the time precision both implementations store (PostgreSQL
// timestamptz holds microseconds).
const Precision = time.Microsecond

// Now returns the current time in UTC truncated to Precision, so a value
// written and read back compares equal.
func Now() time.Time { return time.Now().UTC().Truncate(Precision) }

// FormatTime formats t as RFC 3339 UTC with exactly six fractional digits.
func FormatTime(t time.Time) string {
	return t.UTC().Truncate(Precision).Format("2006-01-02T15:04:05.000000Z07:00")
}
