package api

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/tlogclient"
)

// detachedRequest is the body of POST /v1/keys/{name}/sign:detached.
type detachedRequest struct {
	Payload jsontext.Value `json:"payload"` // a JSON object; signed as its RFC 8785 bytes
}

// DetachedResponse is the answer of POST /v1/keys/{name}/sign:detached
// (ADR 0028): a raw signature over the exact bytes returned in Signed.
type DetachedResponse struct {
	KID string `json:"kid"`
	Alg string `json:"alg"` // EdDSA (64-byte Ed25519) or ES256 (64-byte r||s over SHA-256, low S)
	// Signed is the exact bytes signed: the RFC 8785 serialization of the
	// payload, as a string and base64url (no padding).
	Signed    string `json:"signed"`
	SignedB64 string `json:"signed_b64u"`
	// Signature is the raw signature, base64url (no padding) and
	// lower-case hex.
	Signature    string `json:"signature"`
	SignatureHex string `json:"signature_hex"`
	// ArtifactHash is "sha256:<hex>" of Signed: the artifact_hash of the
	// vrp_receipt leaf recorded for the transparency log when one is
	// configured (ADR 0028).
	ArtifactHash string `json:"artifact_hash"`
}

// signDetached answers POST /v1/keys/{name}/sign:detached with scope
// sign:<name>:detached: a detached signature by the key's signing version
// over the RFC 8785 bytes of a JSON object (receipt formats other than
// VRP's, such as the SEP-2828 / vaara receipt draft: ES256, lower-case hex
// r||s over the JCS bytes). Like every signature it is recorded for the
// transparency log before the answer is written.
//
// Errors: 400 invalid_request (payload not a JSON object) and the strict
// JSON codes; 400 layer_mismatch for a payload that claims the transport
// layer (ADR 0013); the signing errors of POST /v1/keys/{name}/sign.
func (s *Server) signDetached(c echo.Context) error {
	e, err := s.entry(c.Param("name"))
	if err != nil {
		return err
	}
	var req detachedRequest
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	if len(req.Payload) == 0 || req.Payload.Kind() != '{' {
		return fail(http.StatusBadRequest, CodeInvalidRequest, "payload must be a JSON object (only an object's RFC 8785 bytes, which begin with '{', are signed detached: ADR 0028)")
	}
	canon, err := signer.Canonicalize(req.Payload)
	if err != nil {
		return jsonError(err)
	}
	if l := signer.ClaimedLayer(canon); l != "" {
		return fail(http.StatusBadRequest, CodeLayerMismatch,
			"the payload claims the %s layer (its type or vrp_mcp_profile_version member); sign it with POST /v1/keys/{name}/mcp-transport (ADR 0013)", l)
	}
	sig, err := s.signerFor(e, s.cfg.Now())
	if err != nil {
		return err
	}
	sg := sig.Signer
	start := time.Now()
	raw, err := sg.SignDetached(canon)
	s.observeBackend(sig, start)
	if errors.Is(err, signer.ErrNotDetachedInput) {
		return fail(http.StatusBadRequest, CodeInvalidRequest, "payload must be a JSON object")
	}
	if err != nil {
		return signError(err)
	}
	if err := s.recordArtifact(c, tlogclient.ArtifactReceipt, string(canon)); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, DetachedResponse{
		KID: sg.KID(), Alg: sg.Alg(),
		Signed: string(canon), SignedB64: base64.RawURLEncoding.EncodeToString(canon),
		Signature: base64.RawURLEncoding.EncodeToString(raw), SignatureHex: hex.EncodeToString(raw),
		ArtifactHash: signer.DigestSHA256(canon),
	})
}

// artifactRecorder is the optional side of a TransparencyLog that records
// artifacts other than JWS (tlogclient.Client.Record).
type artifactRecorder interface {
	Record(ctx context.Context, artifactType string, artifacts ...string) error
}

// The node's log client records detached signatures' leaves.
var _ artifactRecorder = (*tlogclient.Client)(nil)

// recordArtifact records one artifact of the given VRP TL v0.1 type for
// the transparency log before the answer is written, as recordIssued does
// for JWS; a log that cannot record other artifacts withholds the
// signature (503 tlog_unavailable), never silently skips it.
func (s *Server) recordArtifact(c echo.Context, artifactType, artifact string) error {
	if s.cfg.Tlog == nil {
		return nil
	}
	rec, ok := s.cfg.Tlog.(artifactRecorder)
	var err error
	if !ok {
		err = errors.New("the transparency log client records JWS only")
	} else {
		err = rec.Record(c.Request().Context(), artifactType, artifact)
	}
	if err != nil {
		s.cfg.Logger.Warn("transparency log: signature withheld, its leaf could not be recorded", "artifact_type", artifactType,
			"request_id", c.Response().Header().Get(echo.HeaderXRequestID), "err", err)
		return fail(http.StatusServiceUnavailable, CodeTlogUnavailable, "the signature could not be recorded for the transparency log; retry")
	}
	return nil
}
