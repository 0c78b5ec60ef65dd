package api

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/keysvc/keysvc/internal/strictjson"
)

// ItemError is the error of one batch item.
type ItemError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// BatchResult is one item's result: the single-item response, or an error.
type BatchResult[T any] struct {
	Result *T         `json:"result,omitempty"`
	Error  *ItemError `json:"error,omitempty"`
}

// decodeBatch reads a batch body {"items": [...]}. The envelope itself is
// held to the strict rules (JSON object, only "items", once, an array,
// nothing after it); each item stays raw and is decoded strictly on its
// own, so that a duplicate name or invalid UTF-8 inside one item fails that
// item alone.
func (s *Server) decodeBatch(c echo.Context) ([]jsontext.Value, error) {
	body, err := s.readBody(c, s.cfg.MaxBatchBodyBytes)
	if err != nil {
		return nil, err
	}
	lenient := []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}
	malformed := fail(http.StatusBadRequest, strictjson.CodeInvalidJSON, `body must be a JSON object {"items": [...]}`)
	dec := jsontext.NewDecoder(bytes.NewReader(body), lenient...)
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, malformed
	}
	var items []jsontext.Value
	seen := false
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return nil, malformed
		}
		switch {
		case name.String() != "items":
			return nil, fail(http.StatusBadRequest, strictjson.CodeUnknownField, "unknown field /%s", name.String())
		case seen:
			return nil, fail(http.StatusBadRequest, strictjson.CodeDuplicateKey, "duplicate member name in object at /")
		}
		seen = true
		if dec.PeekKind() != '[' {
			return nil, fail(http.StatusBadRequest, strictjson.CodeInvalidField, "field /items has the wrong type or value")
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, malformed
		}
		for dec.PeekKind() != ']' {
			v, err := dec.ReadValue()
			if err != nil {
				return nil, malformed
			}
			if len(items) == s.cfg.MaxBatchItems {
				return nil, fail(http.StatusBadRequest, CodeBatchTooLarge, "at most %d items per batch", s.cfg.MaxBatchItems)
			}
			items = append(items, v.Clone())
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, malformed
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, malformed
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, fail(http.StatusBadRequest, strictjson.CodeTrailingData, "unexpected data after the JSON value")
	}
	if len(items) == 0 {
		return nil, fail(http.StatusBadRequest, CodeInvalidRequest, "items must hold at least one item")
	}
	return items, nil
}

func itemError(err error) *ItemError {
	var ae *apiError
	if errors.As(err, &ae) {
		return &ItemError{Code: ae.Code, Message: ae.Message}
	}
	return &ItemError{Code: CodeInternal, Message: "internal error"}
}

// runBatch answers a batch: every item with the same key version (the one
// signing when the request arrived), results in item order. A failure of
// the backend itself fails the whole batch with its status, since no later
// item could succeed.
func runBatch[R any, T jsonAppender](s *Server, c echo.Context, one func(req R) (T, error)) error {
	items, err := s.decodeBatch(c)
	if err != nil {
		return err
	}
	out := batchResponse[T]{Results: make([]BatchResult[T], len(items))}
	for i, raw := range items {
		var req R
		if err := strictjson.Decode(raw, &req, strictjson.Limits{}); err != nil {
			out.Results[i].Error = itemError(jsonError(err))
			continue
		}
		res, err := one(req)
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.Status >= 500 {
				return err
			}
			out.Results[i].Error = itemError(err)
			continue
		}
		out.Results[i].Result = &res
	}
	return writeJSON(c, http.StatusOK, out)
}

func (s *Server) signBatch(c echo.Context) error {
	e, sg, err := s.activeSigner(c.Param("name"))
	if err != nil {
		return err
	}
	return runBatch(s, c, func(req signRequest) (SignResponse, error) { return s.signOne(e, sg, req) })
}

func (s *Server) transportBatch(c echo.Context) error {
	e, sg, err := s.activeSigner(c.Param("name"))
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	return runBatch(s, c, func(req transportRequest) (TransportResponse, error) {
		return s.transportOne(e, sg, now, req)
	})
}
