package api

import (
	"context"
	"net/http"
)

// SetBatchWorkers replaces how many goroutines sign a batch of n items and
// returns a function that restores the default (benchmarks compare
// sequential with parallel signing).
func SetBatchWorkers(f func(n int) int) (restore func()) {
	batchWorkers = f
	return func() { batchWorkers = defaultBatchWorkers }
}

// RoutedOnly is HandlerForListener without the direct JWKS answer: every
// request through echo (TestJWKSDirectSameAnswer compares the two).
func RoutedOnly(s *Server, allowed Surface) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.echo.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), surfaceKey{}, allowed)))
	})
}
