//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// dataDirLockFile is the file in a SQLite data directory that a running
// serve holds an exclusive flock(2) on.
const dataDirLockFile = "serve.lock"

// lockDataDir takes an exclusive, non-blocking flock on
// <dir>/serve.lock, so a second keysvc serve on the same SQLite key
// history fails at once instead of both writing it (SQLite in one data
// directory is for one process; scale out on PostgreSQL). The lock goes
// with the process, however it ends; the file stays and holds the pid of
// the last holder, for the message.
func lockDataDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, dataDirLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(b))
			if pid == "" {
				pid = "unknown"
			}
			return nil, fmt.Errorf("data directory %s is in use by another keysvc serve (pid %s, lock %s): one process per SQLite key history; stop it, or use another --data-dir, or PostgreSQL (--postgres-url) for several replicas", dir, pid, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}

// lockFileExclusive takes an exclusive flock(2) on path (created if
// missing, mode 0600) and returns its release. While another open file
// holds it, it tries again every lockRetry until ctx is done, then fails
// with ErrLockHeld wrapped with the path.
func lockFileExclusive(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	t := time.NewTicker(lockRetry)
	defer t.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, ErrLockHeld)
		case <-t.C:
		}
	}
}
