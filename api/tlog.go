package api

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/labstack/echo/v4"

	"github.com/keysvc/keysvc/tlogclient"
)

// Error codes of the transparency-log integration (issue 12, ADR 0015).
const (
	// CodeTlogUnavailable (503): the signature could not be recorded for
	// the transparency log (its outbox in key history did not commit), so
	// it is withheld; retry.
	CodeTlogUnavailable = "tlog_unavailable"
	// CodeTlogNotFound (404): no configured log has the leaf yet (a log
	// includes it within its maximum merge delay); retry later.
	CodeTlogNotFound = "tlog_not_found"
	// CodeTlogNotConfigured (404): this keysvc has no transparency log.
	CodeTlogNotConfigured = "tlog_not_configured"
)

// TransparencyLog is the node's transparency-log client
// (tlogclient.Client): the signing API records every JWS it issues
// before answering, and GET /v1/tlog/proof asks it for proofs.
type TransparencyLog interface {
	// RecordJWS makes the leaves of these JWS durable (the outbox) and
	// returns nil only once they are; the response that carries them is
	// written after it.
	RecordJWS(ctx context.Context, jws []string) error
	// Proof returns the tlog member for a JWS, byte for byte as the log
	// serves it; an error wrapping tlogclient.ErrNotFound when no log has
	// it yet.
	Proof(ctx context.Context, jws string) ([]byte, error)
	// Ready reports a delivery backlog past its thresholds (/readyz).
	Ready() error
}

// issuer is a signing response that carries one JWS.
type issuer interface {
	jsonAppender
	issuedJWS() string
	// withJWS returns the response with its JWS set to jws (a signature
	// signJWS left for the end of its run).
	withJWS(jws string) issuer
}

func (r SignResponse) issuedJWS() string      { return r.JWS }
func (r TransportResponse) issuedJWS() string { return r.JWS }

func (r SignResponse) withJWS(jws string) issuer { r.JWS = jws; return r }

func (r TransportResponse) withJWS(jws string) issuer {
	r.JWS, r.Attestation.Signature = jws, jws
	return r
}

// recordIssued is the one hook of the signing handlers: after a successful
// signature and before the response is written, the JWS are recorded for
// the transparency log; a JWS that could not be recorded is never
// returned (503 tlog_unavailable).
func (s *Server) recordIssued(c echo.Context, jws ...string) error {
	if s.cfg.Tlog == nil || len(jws) == 0 {
		return nil
	}
	if err := s.cfg.Tlog.RecordJWS(c.Request().Context(), jws); err != nil {
		s.cfg.Logger.Warn("transparency log: signature withheld, its leaf could not be recorded", "signatures", len(jws),
			"request_id", c.Response().Header().Get(echo.HeaderXRequestID), "err", err)
		return fail(http.StatusServiceUnavailable, CodeTlogUnavailable, "the signature could not be recorded for the transparency log; retry")
	}
	return nil
}

// recordIssuedOne is recordIssued for a single signing answer: the
// one-element slice is made only when a log is configured, so a sign
// without one allocates nothing for it.
func (s *Server) recordIssuedOne(c echo.Context, jws string) error {
	if s.cfg.Tlog == nil {
		return nil
	}
	return s.recordIssued(c, jws)
}

// maxProofJWS bounds the jws query parameter (serve's listeners cap request
// headers at 16 KiB anyway).
const maxProofJWS = 16 << 10

// tlogProof answers GET /v1/tlog/proof?jws=<compact JWS>: the tlog member
// for an attestation's signature, to insert into the receipt. The caller
// must hold a signing scope (any layer) of the key whose version signed it,
// named by the JWS header kid: whoever may make a key's signatures may
// fetch their proofs, nobody else through this node.
func (s *Server) tlogProof(c echo.Context) error {
	if s.cfg.Tlog == nil {
		return fail(http.StatusNotFound, CodeTlogNotConfigured, "no transparency log is configured on this keysvc")
	}
	jws := c.QueryParam("jws")
	if jws == "" || len(jws) > maxProofJWS || strings.Count(jws, ".") != 2 {
		return fail(http.StatusBadRequest, CodeInvalidRequest, "jws must be a compact JWS (three base64url segments)")
	}
	kid, ok := jwsKID(jws)
	if !ok {
		return fail(http.StatusBadRequest, CodeInvalidRequest, "jws must be a compact JWS whose protected header has a kid")
	}
	name, found := s.keyOfKID(kid)
	if !found {
		return fail(http.StatusNotFound, CodeVersionNotFound, "no key version with that kid")
	}
	p := principal(c)
	scope := "sign:" + name
	if !p.Allows(scope+":"+LayerJWS) && !p.Allows(scope+":"+LayerTransport) {
		return fail(http.StatusForbidden, CodeForbidden, "token lacks a signing scope of key %s (%s, %s:%s or %s:%s)", name, scope, scope, LayerJWS, scope, LayerTransport)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 20*time.Second)
	defer cancel()
	body, err := s.cfg.Tlog.Proof(ctx, jws)
	switch {
	case errors.Is(err, tlogclient.ErrNotFound):
		return fail(http.StatusNotFound, CodeTlogNotFound, "no configured transparency log includes this signature yet; retry after the log's maximum merge delay")
	case err != nil:
		s.cfg.Logger.Warn("transparency log: proof lookup failed", "kid", kid, "err", err)
		return fail(http.StatusServiceUnavailable, CodeTlogUnavailable, "the transparency log could not be reached; retry")
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, body)
}

// jwsKID returns the kid of a compact JWS's protected header.
func jwsKID(jws string) (string, bool) {
	h, _, _ := strings.Cut(jws, ".")
	raw, err := base64.RawURLEncoding.Strict().DecodeString(h)
	if err != nil {
		return "", false
	}
	var hdr struct {
		KID string `json:"kid"`
	}
	if json.Unmarshal(raw, &hdr) != nil || hdr.KID == "" {
		return "", false
	}
	return hdr.KID, true
}

// keyOfKID returns the name of the key that has a version kid (any state).
func (s *Server) keyOfKID(kid string) (string, bool) {
	ring := s.cfg.Manager.Keyring()
	for _, name := range ring.SortedNames() {
		for _, v := range ring.Keys[name].Versions {
			if v.KID == kid {
				return name, true
			}
		}
	}
	return "", false
}
