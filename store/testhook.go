package store

import (
	"context"
	"errors"
	"testing"
)

// ExecRawForTest runs sql verbatim (the driver's own placeholder syntax:
// $1 on PostgreSQL, ? on SQLite) on s outside any transaction, as a
// database superuser could. TEST ONLY: it exists so that tests in any
// package can prove the append-only triggers refuse UPDATE and DELETE
// (reported as ErrAuditAppendOnly) and can tamper with rows. It refuses to
// run outside a test binary. s must come from Open.
func ExecRawForTest(ctx context.Context, s Store, sql string, args ...any) error {
	if !testing.Testing() {
		return errors.New("store: ExecRawForTest called outside a test binary")
	}
	ss, ok := s.(*sqlStore)
	if !ok {
		return errors.New("store: ExecRawForTest: store not from Open")
	}
	if err := ss.raw(ctx, sql, args...); err != nil {
		return ss.fail("raw exec", err)
	}
	return nil
}
