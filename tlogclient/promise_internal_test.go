package tlogclient

import (
	"crypto/sha256"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
)

// TestDecodePromise: the promise payload decoder accepts the JCS payload a
// log signs (ADR 0012) and refuses each way a promise can fail to promise
// what was submitted.
func TestDecodePromise(t *testing.T) {
	a, b := HashArtifact("eyJa.b.c"), HashArtifact("eyJd.e.f")
	entries := []Entry{{ArtifactType: ArtifactAttestation, ArtifactHash: a}, {ArtifactType: ArtifactStatusEvent, ArtifactHash: b}}
	entry := func(h [32]byte, typ, rest string) string {
		return `{"artifact_hash":"` + FormatHash(h) + `","artifact_type":"` + typ + `"` + rest + `}`
	}
	good := `{"entries":[` + entry(a, ArtifactAttestation, `,"leaf_index":7,"logged_at":"2026-12-01T16:00:00Z"`) + `,` +
		entry(b, ArtifactStatusEvent, `,"leaf_index":8,"logged_at":"2026-12-01T16:00:01Z"`) +
		`],"log_id":"log.example.test/vrp","mmd_seconds":60,"timestamp":"2026-12-01T16:00:02Z"}`
	var p Promise
	p.Entries = make([]PromisedEntry, 2)
	if err := decodePromise([]byte(good), entries, &p); err != nil {
		t.Fatal(err)
	}
	if p.LogID != "log.example.test/vrp" || p.MMD != time.Minute || !p.Timestamp.Equal(time.Date(2026, 12, 1, 16, 0, 2, 0, time.UTC)) ||
		p.Entries[0].LeafIndex != 7 || p.Entries[1].LeafIndex != 8 || p.Entries[1].ArtifactHash != b ||
		!p.Entries[1].LoggedAt.Equal(time.Date(2026, 12, 1, 16, 0, 1, 0, time.UTC)) {
		t.Fatalf("decoded %+v", p)
	}
	for name, c := range map[string]struct{ payload, want string }{
		"swapped entries": {strings.Replace(strings.Replace(good, FormatHash(a), "X", 1), FormatHash(b), FormatHash(a), 1), "entry 0: is not the one submitted (artifact_hash)"},
		"not a v0.1 type": {strings.Replace(good, `"artifact_type":"vrp_status_event"`, `"artifact_type":"vrp_other"`, 1), "entry 1: artifact_type is not a v0.1 artifact type"},
		"type escaped":    {strings.Replace(good, `"artifact_type":"vrp_status_event"`, `"artifact_type":"vrp_\u0073tatus_event"`, 1), "entry 1: artifact_type is not in its RFC 8785 form"},
		"other escaped":   {strings.Replace(good, `"artifact_type":"vrp_status_event"`, `"artifact_type":"vrp_r\u0065ceipt"`, 1), "entry 1: artifact_type is not in its RFC 8785 form"},
		"one missing":     {strings.Replace(good, `,`+entry(b, ArtifactStatusEvent, `,"leaf_index":8,"logged_at":"2026-12-01T16:00:01Z"`), ``, 1), "1 entries promised for 2 submitted"},
		"no logged_at":    {strings.Replace(good, `,"logged_at":"2026-12-01T16:00:00Z"`, ``, 1), "entry 0: artifact_hash, artifact_type or logged_at missing"},
		"bad logged_at":   {strings.Replace(good, `"2026-12-01T16:00:00Z"`, `"yesterday"`, 1), "entry 0: logged_at is not RFC 3339"},
		"negative index":  {strings.Replace(good, `"leaf_index":7`, `"leaf_index":-7`, 1), "entry 0: leaf_index is not a non-negative integer"},
		"duplicate name":  {strings.Replace(good, `"leaf_index":7`, `"leaf_index":7,"leaf_index":9`, 1), "entry 0: jsontext: duplicate object member name"},
		"no log_id":       {strings.Replace(good, `"log_id":"log.example.test/vrp",`, ``, 1), "log_id, timestamp or mmd_seconds missing or malformed"},
		"trailing data":   {good + `{}`, "payload: data after the object"},
		"not an object":   {`[]`, "payload is not a JSON object"},
	} {
		p.Entries = make([]PromisedEntry, 2)
		err := decodePromise([]byte(c.payload), entries, &p)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	// An entry echoed under another v0.1 type is a conflict (ADR 0043),
	// reported once the rest of the promise checks.
	p.Entries = make([]PromisedEntry, 2)
	err := decodePromise([]byte(strings.Replace(good, `"artifact_type":"vrp_status_event"`, `"artifact_type":"vrp_receipt"`, 1)), entries, &p)
	var tc *TypeConflictError
	if !errors.As(err, &tc) || !reflect.DeepEqual(tc.Conflicts, []TypeConflict{{Index: 1, Entry: entries[1], LoggedType: ArtifactReceipt}}) {
		t.Errorf("other type: %v, want a TypeConflictError for entry 1 (vrp_receipt)", err)
	}
	p.Entries = make([]PromisedEntry, 2)
	err = decodePromise([]byte(strings.Replace(strings.Replace(good, `"artifact_type":"vrp_status_event"`, `"artifact_type":"vrp_receipt"`, 1), `"log_id":"log.example.test/vrp",`, ``, 1)), entries, &p)
	if errors.As(err, &tc) || err == nil || err.Error() != "log_id, timestamp or mmd_seconds missing or malformed" {
		t.Errorf("other type in a malformed promise: %v, want the malformation", err)
	}
}

// TestCheckDigestPromise: a digest promise (ADR 0038) is accepted only for
// the count and the exact bytes submitted.
func TestCheckDigestPromise(t *testing.T) {
	body := []byte(`{"entries":[{"artifact_type":"vrp_attestation","artifact_hash":"` + FormatHash(HashArtifact("a")) + `"}]}`)
	h := sha256.Sum256(body)
	good := `{"body_sha256":"` + FormatHash(h) + `","count":1,"log_id":"log.example.test/vrp","mmd_seconds":60,"timestamp":"2026-12-01T16:00:02Z"}`
	var p Promise
	if err := checkDigestPromise([]byte(good), 1, body, &p); err != nil {
		t.Fatal(err)
	}
	if p.LogID != "log.example.test/vrp" || p.MMD != time.Minute || p.BodySHA256 != h || p.Entries != nil ||
		!p.Timestamp.Equal(time.Date(2026, 12, 1, 16, 0, 2, 0, time.UTC)) {
		t.Fatalf("checked %+v", p)
	}
	for name, c := range map[string]struct {
		payload string
		n       int
		body    []byte
		want    string
	}{
		"other count":     {good, 2, body, "1 entries promised for 2 submitted"},
		"other body":      {good, 1, append([]byte(" "), body...), "body_sha256 is not the SHA-256 of the body submitted"},
		"no body_sha256":  {strings.Replace(good, `"body_sha256":"`+FormatHash(h)+`",`, ``, 1), 1, body, "tlogfmt: SEP payload: body_sha256 is not"},
		"no log_id":       {strings.Replace(good, `"log_id":"log.example.test/vrp",`, ``, 1), 1, body, "tlogfmt: SEP payload: timestamp, count"},
		"unknown member":  {strings.Replace(good, `"count":1`, `"count":1,"entries":[]`, 1), 1, body, "tlogfmt: SEP payload:"},
		"not JSON":        {`[`, 1, body, "tlogfmt: SEP payload:"},
		"count as string": {strings.Replace(good, `"count":1`, `"count":"1"`, 1), 1, body, "tlogfmt: SEP payload:"},
	} {
		err := checkDigestPromise([]byte(c.payload), c.n, c.body, &Promise{})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// BenchmarkDecodePromise: the payload of a 1,000-entry Signed Entry
// Promise read and checked against the submitted entries (ADR 0033).
// Reported per entry; allocations are per promise.
func BenchmarkDecodePromise(b *testing.B) {
	const n = 1000
	entries := make([]Entry, n)
	var sb strings.Builder
	sb.WriteString(`{"entries":[`)
	for i := range entries {
		entries[i] = Entry{ArtifactType: ArtifactAttestation, ArtifactHash: HashArtifact(strings.Repeat("x", i))}
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"artifact_hash":"` + FormatHash(entries[i].ArtifactHash) + `","artifact_type":"vrp_attestation","leaf_index":` +
			strconv.Itoa(1000000+i) + `,"logged_at":"2026-12-01T16:00:00Z"}`)
	}
	sb.WriteString(`],"log_id":"log.example.test/vrp","mmd_seconds":60,"timestamp":"2026-12-01T16:00:02Z"}`)
	payload := []byte(sb.String())
	p := Promise{Entries: make([]PromisedEntry, n)}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := decodePromise(payload, entries, &p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/entry")
}

// TestAppendAddBatch: the add-batch body written by hand is byte for byte
// what encoding a {"entries":[{artifact_type, artifact_hash}]} struct
// gives, for every v0.1 artifact type, and no entry is longer than
// addBatchEntryBytes (the buffer's size hint); AddBatch refuses an
// artifact type it would have to escape.
func TestAppendAddBatch(t *testing.T) {
	types := []string{ArtifactAttestation, ArtifactSignedOffer, ArtifactStatusEvent, ArtifactReceipt, ArtifactSpec}
	type addEntry struct {
		ArtifactType string `json:"artifact_type"`
		ArtifactHash string `json:"artifact_hash"`
	}
	var entries []Entry
	var want struct {
		Entries []addEntry `json:"entries"`
	}
	for i, typ := range types {
		h := HashArtifact("artifact " + strconv.Itoa(i))
		entries = append(entries, Entry{ArtifactType: typ, ArtifactHash: h})
		want.Entries = append(want.Entries, addEntry{ArtifactType: typ, ArtifactHash: FormatHash(h)})
		one, _ := json.Marshal(addEntry{ArtifactType: typ, ArtifactHash: FormatHash(h)})
		if len(one)+1 > addBatchEntryBytes {
			t.Errorf("entry of type %s takes %d bytes with its comma, more than addBatchEntryBytes (%d)", typ, len(one)+1, addBatchEntryBytes)
		}
	}
	wb, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if got := appendAddBatch(nil, entries); string(got) != string(wb) {
		t.Fatalf("appendAddBatch:\n%s\nwant\n%s", got, wb)
	}
	if got := appendAddBatch(nil, entries[:1]); !strings.HasPrefix(string(got), `{"entries":[{"artifact_type":"vrp_attestation","artifact_hash":"sha256:`) || !strings.HasSuffix(string(got), `"}]}`) {
		t.Fatalf("one entry: %s", got)
	}
	l, err := NewHTTPLog("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.AddBatch(t.Context(), []Entry{{ArtifactType: `vrp_attestation","x":"`, ArtifactHash: entries[0].ArtifactHash}})
	if err == nil || !strings.Contains(err.Error(), "is not a v0.1 artifact type") {
		t.Fatalf("AddBatch with an artifact type that needs escaping: %v", err)
	}
}
