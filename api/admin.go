package api

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// KeyInfo describes a key in admin responses.
type KeyInfo struct {
	Name      string    `json:"name"`
	Issuer    string    `json:"issuer"`
	Algorithm string    `json:"algorithm"`
	Backend   string    `json:"backend"`
	JWKSURL   string    `json:"jwks_url"`
	ActiveKID string    `json:"active_kid,omitempty"`
	Versions  int       `json:"versions"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
	Default   bool      `json:"default"`
}

// VersionInfo describes a key version in admin responses: its published
// JWKS entry (with lifecycle members) and its backend reference.
type VersionInfo struct {
	jwksserve.Entry
	BackendRef string    `json:"backend_ref"`
	CreatedAt  time.Time `json:"created_at"`
}

func keyInfo(e *rotation.KeyEntry, isDefault bool) KeyInfo {
	k := KeyInfo{Name: e.Key.Name, Issuer: e.Key.Issuer, Algorithm: e.Key.Algorithm, Backend: e.Key.Backend,
		JWKSURL: e.Key.JWKSURL, Versions: len(e.Versions), CreatedAt: e.Key.CreatedAt, CreatedBy: e.Key.CreatedBy, Default: isDefault}
	if e.Active != nil {
		k.ActiveKID = e.Active.KID()
	}
	return k
}

func versionInfo(v store.KeyVersion) (VersionInfo, error) {
	entry, err := jwksserve.EntryFor(v)
	if err != nil {
		return VersionInfo{}, err
	}
	return VersionInfo{Entry: entry, BackendRef: v.BackendRef, CreatedAt: v.CreatedAt}, nil
}

func (s *Server) listKeys(c echo.Context) error {
	ring := s.cfg.Manager.Keyring()
	out := struct {
		Keys []KeyInfo `json:"keys"`
	}{Keys: []KeyInfo{}}
	for _, n := range ring.SortedNames() {
		out.Keys = append(out.Keys, keyInfo(ring.Keys[n], n == ring.Default))
	}
	return c.JSON(http.StatusOK, out)
}

// createKeyRequest is the body of POST /v1/keys.
type createKeyRequest struct {
	Name      string `json:"name"`
	Issuer    string `json:"issuer"`
	Algorithm string `json:"algorithm,omitempty"`
	Backend   string `json:"backend,omitempty"`
	JWKSURL   string `json:"jwks_url,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// CreateKeyResponse is the answer of POST /v1/keys.
type CreateKeyResponse struct {
	Key     KeyInfo     `json:"key"`
	Version VersionInfo `json:"version"`
}

func (s *Server) createKey(c echo.Context) error {
	var req createKeyRequest
	if err := s.decodeBody(c, &req); err != nil {
		return err
	}
	p := principal(c)
	_, v, err := s.cfg.Manager.CreateKey(c.Request().Context(), rotation.CreateKeyRequest{
		Name: req.Name, Issuer: req.Issuer, Algorithm: req.Algorithm, Backend: req.Backend, JWKSURL: req.JWKSURL,
	}, rotation.Actor{Name: actorName(p), Reason: req.Reason})
	if err != nil {
		return lifecycleError(err)
	}
	ring := s.cfg.Manager.Keyring()
	vi, err := versionInfo(v)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, CreateKeyResponse{Key: keyInfo(ring.Keys[req.Name], ring.Default == req.Name), Version: vi})
}

func (s *Server) listVersions(c echo.Context) error {
	e, err := s.entry(c.Param("name"))
	if err != nil {
		return err
	}
	out := struct {
		Key      string        `json:"key"`
		Versions []VersionInfo `json:"versions"`
	}{Key: e.Key.Name, Versions: []VersionInfo{}}
	for _, v := range e.Versions {
		vi, err := versionInfo(v)
		if err != nil {
			return err
		}
		out.Versions = append(out.Versions, vi)
	}
	return c.JSON(http.StatusOK, out)
}

// RotateResponse is the answer of POST /v1/keys/{name}/rotate.
type RotateResponse struct {
	Active  VersionInfo `json:"active"`
	Retired VersionInfo `json:"retired"`
}

func (s *Server) rotate(c echo.Context) error {
	var req struct {
		Reason string `json:"reason,omitempty"`
	}
	if c.Request().ContentLength != 0 {
		if err := s.decodeBody(c, &req); err != nil {
			return err
		}
	}
	newV, oldV, err := s.cfg.Manager.Rotate(c.Request().Context(), c.Param("name"), rotation.Actor{Name: actorName(principal(c)), Reason: req.Reason})
	if err != nil {
		return lifecycleError(err)
	}
	a, err := versionInfo(newV)
	if err != nil {
		return err
	}
	r, err := versionInfo(oldV)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, RotateResponse{Active: a, Retired: r})
}

func actorName(p Principal) string { return "token:" + p.TokenID + "(" + p.Name + ")" }

func lifecycleError(err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, rotation.ErrInvalidRequest):
		return fail(http.StatusBadRequest, CodeInvalidRequest, "%s", strings.TrimPrefix(msg, rotation.ErrInvalidRequest.Error()+": "))
	case errors.Is(err, rotation.ErrKeyExists):
		return fail(http.StatusConflict, CodeKeyExists, "%s", msg)
	case errors.Is(err, rotation.ErrKeyNotFound):
		return fail(http.StatusNotFound, CodeKeyNotFound, "%s", msg)
	case errors.Is(err, rotation.ErrNoActive):
		return fail(http.StatusConflict, CodeNoActiveVersion, "%s", msg)
	case errors.Is(err, rotation.ErrUnknownBackend):
		return fail(http.StatusBadRequest, CodeInvalidRequest, "%s", msg)
	case errors.Is(err, backends.ErrUnsupportedAlgorithm):
		return fail(http.StatusBadRequest, CodeInvalidRequest, "%s", msg)
	case errors.Is(err, backends.ErrUnavailable):
		return fail(http.StatusServiceUnavailable, CodeBackendUnavailable, "key backend unavailable")
	}
	return err
}
