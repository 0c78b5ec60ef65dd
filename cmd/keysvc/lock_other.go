//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import "context"

// lockDataDir is a no-op where keysvc does not use flock(2): a second
// serve on one SQLite data directory is not detected there.
func lockDataDir(string) (func(), error) { return func() {}, nil }

// lockFileExclusive is a no-op where keysvc does not use flock(2).
func lockFileExclusive(context.Context, string) (func(), error) { return func() {}, nil }
