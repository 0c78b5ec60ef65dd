package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// Admin mutations and the Idempotency-Key header (ADR 0014; the header of
// the IETF httpapi draft "The Idempotency-Key HTTP Header Field").
//
// A request that carries Idempotency-Key (1 to 255 printable ASCII
// characters) is performed at most once per principal and key: the first
// lifecycle transaction of the request that commits claims the key in the
// same transaction (rotation.WithIdempotencyKey), and the response is
// stored once the handler has answered. A retry with the same key and the
// same method, path and body replays the stored response (header
// Idempotent-Replayed: true); with a different request it is refused (422
// idempotency_key_reused); while the first is still running it waits up to
// idempotencyWait, then answers 409 idempotency_in_flight (Retry-After).
// A request that failed before committing anything stores nothing, so a
// retry performs it. Records are kept for store.IdempotencyTTL.
//
// Every admin mutation also gets a write deadline of AdminWriteTimeout
// (default 2 minutes) instead of the listener's, so an answer that takes
// longer than the listener's write timeout (an immediate rotation waits
// for its activation instant, a slow store retries) still reaches the
// client.

const (
	idempotencyHeader = "Idempotency-Key"
	replayedHeader    = "Idempotent-Replayed"
	idempotencyWait   = 30 * time.Second
)

// mutation wraps an admin mutation handler: write deadline, then
// Idempotency-Key handling. It runs after authentication.
func (s *Server) mutation(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		rc := http.NewResponseController(c.Response().Writer)
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.AdminWriteTimeout)) // unsupported writers keep theirs
		key := c.Request().Header.Get(idempotencyHeader)
		if key == "" {
			return next(c)
		}
		if !validIdempotencyKey(key) {
			return fail(http.StatusBadRequest, CodeInvalidRequest, "Idempotency-Key must be 1 to 255 printable ASCII characters")
		}
		body, err := s.readBody(c, s.cfg.MaxBodyBytes)
		if c.Request().ContentLength == 0 && c.Request().Header.Get(echo.HeaderContentType) == "" {
			body, err = nil, nil // routes whose body is optional
		}
		if err != nil {
			return err
		}
		c.Request().Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.Sum256([]byte(c.Request().Method + " " + c.Request().URL.Path + "\n" + string(body)))
		rec := store.IdempotencyKey{Principal: "token:" + principal(c).TokenID, Key: key, Fingerprint: hex.EncodeToString(sum[:])}
		ctx := c.Request().Context()
		if done, err := s.replay(c, rec, false); done || err != nil {
			return err
		}
		ictx := rotation.WithIdempotencyKey(ctx, rec)
		c.SetRequest(c.Request().WithContext(ictx))
		cw := &captureWriter{ResponseWriter: c.Response().Writer}
		c.Response().Writer = cw
		err = next(c)
		if errors.Is(err, rotation.ErrIdempotencyConflict) || isCode(err, CodeIdempotencyInFlight) {
			c.Response().Writer = cw.ResponseWriter
			_, err = s.replay(c, rec, true)
			return err
		}
		if !rotation.Claimed(ictx) {
			return err // nothing committed: a retry performs the request
		}
		if err != nil {
			// Committed, then failed (e.g. the activation could not be
			// recorded): the error handler writes the answer into cw.
			s.echo.HTTPErrorHandler(err, c)
			err = nil
		}
		s.storeResponse(ctx, rec, cw.status(), cw.buf.Bytes())
		return err
	}
}

// replay answers from the stored record of rec, waiting for one in flight
// when wait (the request lost the race to claim it) or when it was found
// unfinished. done is false when there is no record.
func (s *Server) replay(c echo.Context, rec store.IdempotencyKey, wait bool) (done bool, err error) {
	ctx := c.Request().Context()
	deadline := time.Now().Add(idempotencyWait)
	for {
		got, err := s.cfg.Store.GetIdempotencyKey(ctx, rec.Principal, rec.Key)
		switch {
		case errors.Is(err, store.ErrNotFound) && !wait:
			return false, nil
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return true, err
		case err == nil && got.Fingerprint != rec.Fingerprint:
			return true, fail(http.StatusUnprocessableEntity, CodeIdempotencyKeyReused, "Idempotency-Key %q was used with another request", rec.Key)
		case err == nil && got.Status != 0:
			c.Response().Header().Set(replayedHeader, "true")
			return true, c.Blob(got.Status, echo.MIMEApplicationJSON, got.Body)
		}
		if time.Now().After(deadline) {
			if err == nil && time.Since(got.CreatedAt) > 10*time.Minute {
				return true, fail(http.StatusConflict, CodeIdempotencyLost, "the request with Idempotency-Key %q committed but its response was not recorded (the server stopped); inspect the key's versions and the audit trail", rec.Key)
			}
			c.Response().Header().Set("Retry-After", "2")
			return true, fail(http.StatusConflict, CodeIdempotencyInFlight, "a request with Idempotency-Key %q is still running", rec.Key)
		}
		wait = true
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// storeResponse records the answer of the request that claimed rec,
// retrying for a while: the change committed, its answer must not be lost
// to a brief store failure. Outside the request's context, which ends
// when the client goes away.
func (s *Server) storeResponse(ctx context.Context, rec store.IdempotencyKey, status int, body []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for d := 100 * time.Millisecond; ; d = min(2*d, 5*time.Second) {
		err := s.cfg.Store.CompleteIdempotencyKey(ctx, rec.Principal, rec.Key, status, body)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			s.cfg.Logger.Error("storing the response of an idempotent request failed; a retry answers idempotency_outcome_unrecorded", "idempotency_key", rec.Key, "err", err)
			return
		case <-time.After(d):
		}
	}
}

func validIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func isCode(err error, code string) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Code == code
}

// captureWriter copies the response (status and body) while writing it.
type captureWriter struct {
	http.ResponseWriter
	code int
	buf  bytes.Buffer
}

func (w *captureWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *captureWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.buf.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *captureWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}
