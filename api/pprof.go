package api

import (
	"net/http"
	"net/http/pprof"
	rpprof "runtime/pprof"
	"strings"

	"github.com/labstack/echo/v4"
)

// pprofHandler serves net/http/pprof's index and profiles (Config.Pprof):
// /debug/pprof/ (index), /debug/pprof/profile?seconds=N (CPU),
// /debug/pprof/heap, /debug/pprof/allocs, /debug/pprof/goroutine,
// /debug/pprof/trace?seconds=N, /debug/pprof/symbol. Profiles hold stacks,
// sizes and counts, never memory contents. cmdline is not served: a
// --postgres-url on the command line may carry a password.
func pprofHandler(c echo.Context) error {
	name := strings.TrimPrefix(c.Request().URL.Path, "/debug/pprof/")
	var h http.Handler
	switch name {
	case "":
		h = http.HandlerFunc(pprof.Index)
	case "cmdline":
		return echo.ErrNotFound
	case "profile":
		h = http.HandlerFunc(pprof.Profile)
	case "symbol":
		h = http.HandlerFunc(pprof.Symbol)
	case "trace":
		h = http.HandlerFunc(pprof.Trace)
	default:
		if rpprof.Lookup(name) == nil {
			return echo.ErrNotFound // the API's JSON not_found, not pprof's text
		}
		h = pprof.Handler(name) // heap, allocs, goroutine, block, mutex, threadcreate
	}
	h.ServeHTTP(c.Response(), c.Request())
	return nil
}
