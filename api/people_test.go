package api_test

import (
	"context"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/store"
)

// certHarness is the harness's API served by one api.Server on two TLS
// listeners, "sign" (client CA signCA) and "admin" (client CA adminCA), as
// serve wires them, with client-certificate principals bound to them.
type certHarness struct {
	*harness
	serverCA, signCA, adminCA, otherCA *testCA
	sign, admin                        string // base URLs
}

func newCertHarness(t *testing.T) *certHarness {
	h := newHarness(t, harnessOpts{})
	ch := &certHarness{harness: h, serverCA: newTestCA(t, "server CA"), signCA: newTestCA(t, "node CA"),
		adminCA: newTestCA(t, "officer CA"), otherCA: newTestCA(t, "other CA")}
	s := api.New(api.Config{Manager: h.mgr, Auth: h.auth, Store: h.store, Logger: nil, ClientPrincipals: []api.ClientPrincipal{
		{Listener: "admin", CASHA256: ch.adminCA.fingerprint(), CommonName: "officer-1",
			Principal: api.Principal{Name: "alice", Scopes: []string{api.ScopeAdminKeys, api.ScopeAdminRevoke, "sign:*"}}},
		{Listener: "sign", CASHA256: ch.signCA.fingerprint(), CommonName: "node-1",
			Principal: api.Principal{Name: "node-1", Scopes: []string{"sign:villa"}}},
	}})
	ch.sign = tlsListener(t, s.HandlerForListener("sign", api.SurfaceSign), ch.serverCA, ch.signCA).URL
	// The admin listener trusts two CAs; only adminCA's certificates map.
	admin := tlsListenerPool(t, s.HandlerForListener("admin", api.SurfaceAdmin), ch.serverCA, ch.adminCA, ch.otherCA)
	ch.admin = admin.URL
	return ch
}

// send does one request through c (which may present a client
// certificate) with a bearer token when tok is set, and returns status and body.
func (ch *certHarness) send(t *testing.T, c *http.Client, method, url, tok, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestTwoPersonRuleComparesPeople (issue 13, item 1): one officer holding
// two API tokens named alice (or "Alice", from before names were checked),
// or a token and a client certificate mapped to alice, cannot file and
// approve their own revocation, key-material destruction or the switch
// that turns the rule off (403 same_principal); a second person can.
func TestTwoPersonRuleComparesPeople(t *testing.T) {
	ch := newCertHarness(t)
	h := ch.harness
	h.createKey("villa", villa, fixedKind)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	alice1 := h.token("alice", tokenOK, api.ScopeAdminKeys, api.ScopeAdminRevoke)
	alice2 := h.token("alice", tokenOK, api.ScopeAdminRevoke)
	aliceOld := h.token("Alice ", tokenOK, api.ScopeAdminRevoke) // stored before names were validated
	bob := h.token("bob", tokenOK, api.ScopeAdminRevoke)
	aliceCert := ch.adminCA.issue(x509.ExtKeyUsageClientAuth, "officer-1")
	aliceByCert := tlsClient(ch.serverCA, &aliceCert)
	plain := tlsClient(ch.serverCA, nil)

	resp, body := h.do(request{method: http.MethodPut, path: "/v1/keys/villa/policy", auth: bearer(admin), ctype: "application/json",
		body: []byte(`{"rotation_period":"","two_person_rule":true,"reason":"officers agree"}`)})
	wantStatus(t, "two-person rule on", resp, body, http.StatusOK)
	old := h.mgr.Keyring().Keys["villa"].Active.KID()
	resp, body = h.postJSON("/v1/keys/villa/rotate", admin, `{"mode":"now","reason":"retire the first version"}`)
	wantStatus(t, "rotate", resp, body, http.StatusOK)
	active := h.mgr.Keyring().Keys["villa"].Active.KID()
	past := time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)

	type credential struct {
		name string
		c    *http.Client
		tok  string
	}
	viaToken := func(name, tok string) credential { return credential{name, plain, tok} }
	cert := credential{"alice's client certificate", aliceByCert, ""}
	file := func(t *testing.T, by credential, method, path, body string) string {
		t.Helper()
		resp, b := ch.send(t, by.c, method, ch.admin+path, by.tok, body)
		wantStatus(t, by.name+" files "+path, resp, b, http.StatusAccepted)
		var out struct{ Approval api.ApprovalInfo }
		decode(t, b, &out)
		if out.Approval.RequestedBy != "principal:alice" {
			t.Errorf("approval requested_by %q, want principal:alice", out.Approval.RequestedBy)
		}
		return out.Approval.ID
	}
	approve := func(t *testing.T, by credential, id string, status int) {
		t.Helper()
		resp, b := ch.send(t, by.c, http.MethodPost, ch.admin+"/v1/approvals/"+id+"/approve", by.tok, "")
		if status == http.StatusForbidden {
			wantError(t, by.name+" approves", resp, b, http.StatusForbidden, api.CodeSamePrincipal)
			return
		}
		wantStatus(t, by.name+" approves", resp, b, status)
	}

	for _, c := range []struct {
		what          string
		filer         credential
		method, path  string
		body          string
		sameOfficer   []credential
		secondOfficer credential
		afterApproval func(t *testing.T)
	}{
		{"revocation", viaToken("alice (token 1)", alice1), http.MethodPost, "/v1/versions/" + active + "/revoke",
			`{"compromised_at":"` + past + `","reason":"leak"}`,
			[]credential{viaToken("alice (token 2)", alice2), viaToken("Alice (legacy name)", aliceOld), cert}, viaToken("bob", bob),
			func(t *testing.T) {
				if v, _ := h.store.GetVersion(context.Background(), active); v.State != store.StateRevoked {
					t.Errorf("%s is %s after bob's approval", active, v.State)
				}
			}},
		{"destruction", cert, http.MethodPost, "/v1/versions/" + old + "/destroy", `{"reason":"old key material"}`,
			[]credential{viaToken("alice (token 1)", alice1), viaToken("alice (token 2)", alice2)}, viaToken("bob", bob),
			func(t *testing.T) {
				if v, _ := h.store.GetVersion(context.Background(), old); v.MaterialDestroyedAt == nil {
					t.Errorf("%s not destroyed after bob's approval", old)
				}
			}},
		{"switching the rule off", viaToken("alice (token 1)", alice1), http.MethodPut, "/v1/keys/villa/policy",
			`{"rotation_period":"","two_person_rule":false,"reason":"too slow"}`,
			[]credential{viaToken("alice (token 2)", alice2), cert}, viaToken("bob", bob),
			func(t *testing.T) {
				if h.mgr.Keyring().Keys["villa"].Policy.TwoPersonRule {
					t.Error("two-person rule still on after bob's approval")
				}
			}},
	} {
		t.Run(c.what, func(t *testing.T) {
			id := file(t, c.filer, c.method, c.path, c.body)
			for _, same := range c.sameOfficer {
				approve(t, same, id, http.StatusForbidden)
			}
			approve(t, c.secondOfficer, id, http.StatusOK)
			c.afterApproval(t)
		})
	}
}

// TestClientCertificatePrincipals (issue 13, partial): a client certificate
// maps to a principal only on the listener and through the CA its entry
// names, and only when its subject has exactly one common name. A node
// certificate (the signing listener's CA) with an officer's CN, a
// certificate of another CA the admin listener also trusts, and a
// two-CN certificate ending in the officer's CN are all refused (401).
func TestClientCertificatePrincipals(t *testing.T) {
	ch := newCertHarness(t)
	h := ch.harness
	h.createKey("villa", villa, fixedKind)
	client := func(ca *testCA, cns ...string) *http.Client {
		c := ca.issue(x509.ExtKeyUsageClientAuth, cns...)
		return tlsClient(ch.serverCA, &c)
	}
	sign := ch.sign + "/v1/keys/villa/sign"
	keys := ch.admin + "/v1/keys"
	for _, c := range []struct {
		what        string
		c           *http.Client
		method, url string
		body        string
		status      int
		code        string
	}{
		{"the node's certificate on the signing listener", client(ch.signCA, "node-1"), http.MethodPost, sign, `{"payload":{"a":1}}`, 200, ""},
		{"the officer's certificate on the admin listener", client(ch.adminCA, "officer-1"), http.MethodGet, keys, "", 200, ""},
		{"a node-CA certificate with the officer's CN, signing listener", client(ch.signCA, "officer-1"), http.MethodPost, sign, `{"payload":{"a":1}}`, 401, api.CodeUnauthorized},
		{"another CA the admin listener trusts, officer's CN", client(ch.otherCA, "officer-1"), http.MethodGet, keys, "", 401, api.CodeUnauthorized},
		{"two CNs ending in the officer's", client(ch.adminCA, "intruder", "officer-1"), http.MethodGet, keys, "", 401, api.CodeUnauthorized},
		{"two CNs ending in the node's", client(ch.signCA, "intruder", "node-1"), http.MethodPost, sign, `{"payload":{"a":1}}`, 401, api.CodeUnauthorized},
		{"two CNs, both the officer's", client(ch.adminCA, "officer-1", "officer-1"), http.MethodGet, keys, "", 401, api.CodeUnauthorized},
		{"no CN", client(ch.adminCA), http.MethodGet, keys, "", 401, api.CodeUnauthorized},
		{"the officer's certificate on the signing listener (its CA is not trusted there)", nil, "", "", "", 0, ""},
	} {
		if c.c == nil {
			// The listener does not trust the officer CA: the client has no
			// certificate to offer for its CA list (or the handshake fails
			// when it sends one anyway), so no principal.
			officer := ch.adminCA.issue(x509.ExtKeyUsageClientAuth, "officer-1")
			req, _ := http.NewRequest(http.MethodPost, sign, strings.NewReader(`{"payload":{"a":1}}`))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := tlsClient(ch.serverCA, &officer).Do(req); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				wantError(t, c.what, resp, b, http.StatusUnauthorized, api.CodeUnauthorized)
			}
			continue
		}
		resp, body := ch.send(t, c.c, c.method, c.url, "", c.body)
		if c.code == "" {
			wantStatus(t, c.what, resp, body, c.status)
			continue
		}
		wantError(t, c.what, resp, body, c.status, c.code)
	}
}

// TestLegacyApprovalRequesterResolved: an approval filed before approvals
// compared people recorded the requester's token ("token:<id>"); that
// token's name decides, so alice's second token cannot approve it either.
func TestLegacyApprovalRequesterResolved(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.createKey("villa", villa, fixedKind)
	admin := h.token("admin", tokenOK, api.ScopeAdminKeys)
	alice1 := h.token("alice", tokenOK, api.ScopeAdminRevoke)
	alice2 := h.token("alice", tokenOK, api.ScopeAdminRevoke)
	bob := h.token("bob", tokenOK, api.ScopeAdminRevoke)
	resp, body := h.do(request{method: http.MethodPut, path: "/v1/keys/villa/policy", auth: bearer(admin), ctype: "application/json",
		body: []byte(`{"rotation_period":"","two_person_rule":true}`)})
	wantStatus(t, "two-person rule on", resp, body, http.StatusOK)
	ctx := context.Background()
	sum := api.TokenHash(alice1)
	var aliceID string
	list, err := h.store.ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range list {
		if string(tk.SHA256) == string(sum[:]) {
			aliceID = tk.ID
		}
	}
	kid := h.mgr.Keyring().Keys["villa"].Active.KID()
	now := store.Now()
	err = h.store.InTx(ctx, func(tx store.Tx) error {
		return tx.InsertApproval(ctx, store.Approval{ID: "legacy0000000001", KeyName: "villa", Action: "revoke", KID: kid,
			Params:      []byte(`{"compromised_at":"` + store.FormatTime(now.Add(-time.Hour)) + `","reason":"leak"}`),
			RequestedBy: "token:" + aliceID, RequestedByName: "token:" + aliceID + "(alice)", RequestedAt: now, ExpiresAt: now.Add(time.Hour), Status: "pending"})
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, body = h.postJSON("/v1/approvals/legacy0000000001/approve", alice2, ``)
	wantError(t, "alice's second token approves a legacy approval of her first", resp, body, http.StatusForbidden, api.CodeSamePrincipal)
	resp, body = h.postJSON("/v1/approvals/legacy0000000001/approve", bob, ``)
	wantStatus(t, "bob approves", resp, body, http.StatusOK)
}
