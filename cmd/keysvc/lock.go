package main

import (
	"errors"
	"time"
)

// ErrLockHeld is lockFileExclusive's error when another process (or
// another open file of this one) still held the lock when its context
// ended.
var ErrLockHeld = errors.New("held by another process until the wait ended")

// lockRetry is how often lockFileExclusive tries a held lock again.
const lockRetry = 50 * time.Millisecond
