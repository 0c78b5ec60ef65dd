package api_test

import (
	"context"
	"database/sql"
	"net/http"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends/software"
)

// TestSealedKeyBoundToKeyName (issue 13, partial): the software backend's
// sealed private key is bound (AES-GCM additional data) to its key name as
// well as its kid. Someone with write access to key history who moves key
// villa's active version under key "other" does not get "other" signing
// with villa's key material: the blob does not open (503), while villa's
// own signing keeps working once the version is back.
func TestSealedKeyBoundToKeyName(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, software.Kind)
	h.createKey("other", "other.example", software.Kind)
	tok := h.token("node", tokenOK, api.ScopeSignAll)
	villaKID := h.mgr.Keyring().Keys["villa"].Active.KID()
	otherKID := h.mgr.Keyring().Keys["other"].Active.KID()
	resp, body := h.postJSON("/v1/keys/other/sign", tok, `{"payload":{"a":1}}`)
	wantStatus(t, "other signs", resp, body, http.StatusOK)

	db, err := sql.Open("sqlite", h.dbPath+"?_busy_timeout=5000&_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The tampering: other's version retires, villa's becomes other's.
	exec(`UPDATE key_versions SET state = 'retired', retired_at = activated_at WHERE kid = ?`, otherKID)
	exec(`UPDATE key_versions SET key_name = 'other' WHERE kid = ?`, villaKID)
	if err := h.mgr.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, body = h.postJSON("/v1/keys/other/sign", tok, `{"payload":{"a":1}}`)
	wantError(t, "other signing with villa's moved version", resp, body, http.StatusServiceUnavailable, api.CodeBackendUnavailable)

	exec(`UPDATE key_versions SET key_name = 'villa' WHERE kid = ?`, villaKID)
	if err := h.mgr.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, body = h.postJSON("/v1/keys/villa/sign", tok, `{"payload":{"a":1}}`)
	wantStatus(t, "villa signs again with its own version", resp, body, http.StatusOK)
}
