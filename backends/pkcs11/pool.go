package pkcs11

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	p11 "github.com/miekg/pkcs11"

	"github.com/keysvc/keysvc/backends"
)

// session is what a call running in a lane works with. Its handle belongs
// to the call until the call returns.
type session struct {
	b  *Backend
	c  *p11.Ctx
	sh p11.SessionHandle
	st *tokenState
}

// Call states for the hand-off between a caller and the goroutine running
// the Cryptoki call for it.
const (
	callRunning int32 = iota
	callDone
	callAbandoned
)

// runBounded runs work in a goroutine and waits for it until timer fires
// or ctx ends. A call given up on keeps running (cgo calls cannot be
// interrupted); it is counted in b.stuck until it returns. The caller
// bounds how many such calls can exist: each holds a lane or the control
// slot until it returns.
func (b *Backend) runBounded(ctx context.Context, timer *time.Timer, op string, work func() error) error {
	var state atomic.Int32
	done := make(chan error, 1)
	go func() {
		err := work()
		if !state.CompareAndSwap(callRunning, callDone) {
			b.stuck.Add(-1)
			b.log.Warn("PKCS#11 call returned after its caller gave up", "op", op, "err", err)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-timer.C:
	case <-ctx.Done():
	}
	b.stuck.Add(1) // before the swap, so the worker's decrement never comes first
	if !state.CompareAndSwap(callRunning, callAbandoned) {
		b.stuck.Add(-1)
		return <-done // finished in the meantime
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: PKCS#11 %s on token %q: %w", backends.ErrUnavailable, op, b.cfg.TokenLabel, err)
	}
	return fmt.Errorf("%w: PKCS#11 %s on token %q timed out after %s", backends.ErrUnavailable, op, b.cfg.TokenLabel, b.cfg.Timeout)
}

// controlCall runs fn, which needs no session, on the single control slot
// within the timeout. fn takes the module's call lock itself.
func (b *Backend) controlCall(ctx context.Context, op string, fn func() error) error {
	if b.closed.Load() {
		return b.closedErr()
	}
	timer := time.NewTimer(b.cfg.Timeout)
	defer timer.Stop()
	select {
	case b.control <- struct{}{}:
	case <-timer.C:
		return fmt.Errorf("%w: PKCS#11 %s on token %q: no answer within %s (%d calls stuck in the module)", backends.ErrUnavailable, op, b.cfg.TokenLabel, b.cfg.Timeout, b.stuck.Load())
	case <-ctx.Done():
		return fmt.Errorf("%w: PKCS#11 %s: %w", backends.ErrUnavailable, op, ctx.Err())
	}
	return b.runBounded(ctx, timer, op, func() error {
		defer func() { <-b.control }()
		return fn()
	})
}

// withSession runs fn with a logged-in session from the pool, within the
// timeout (waiting for a free session included). A session that fails
// with a session error is closed and fn retried once on a fresh one; a
// device error marks the token unreachable (see usable). Errors from the
// device wrap backends.ErrUnavailable; errors fn makes itself pass as they
// are.
func (b *Backend) withSession(ctx context.Context, op string, fn func(*session) error) error {
	if b.closed.Load() {
		return b.closedErr()
	}
	if _, err := b.usable(ctx); err != nil {
		return err
	}
	timer := time.NewTimer(b.cfg.Timeout)
	defer timer.Stop()
	var l *lane
	select {
	case <-b.lanes.available():
		l = b.lanes.pop()
	case <-timer.C:
		return fmt.Errorf("%w: PKCS#11 %s on token %q: no free session within %s (%d sessions, %d calls stuck in the module)",
			backends.ErrUnavailable, op, b.cfg.TokenLabel, b.cfg.Timeout, b.cfg.Sessions, b.stuck.Load())
	case <-ctx.Done():
		return fmt.Errorf("%w: PKCS#11 %s: %w", backends.ErrUnavailable, op, ctx.Err())
	}
	return b.runBounded(ctx, timer, op, func() error {
		defer b.lanes.put(l)
		return b.runLane(l, op, fn)
	})
}

func (b *Backend) runLane(l *lane, op string, fn func(*session) error) error {
	m := b.mod
	m.callMu.RLock()
	defer m.callMu.RUnlock()
	st := b.state.Load()
	gen := m.gen.Load()
	if l.open && l.st != st {
		// Opened under an older state: close it if its handle still
		// means something to this module generation, else forget it.
		if m.initialized && l.st.modGen == gen {
			_ = m.ctx.CloseSession(l.sh)
		}
		l.open = false
	}
	if st.err != nil {
		return b.unavailable(op, st.err)
	}
	if !m.initialized || st.modGen != gen {
		err := errors.New("the PKCS#11 module was re-initialized")
		b.markBroken(st, err)
		return b.unavailable(op, err)
	}
	for attempt := 0; ; attempt++ {
		if !l.open {
			if err := b.openSession(l, st); err != nil {
				if isDeviceError(err) {
					b.markBroken(st, err)
				}
				var le *loginError
				if errors.As(err, &le) {
					return err
				}
				return b.unavailable(op, err)
			}
		}
		err := fn(&session{b: b, c: m.ctx, sh: l.sh, st: st})
		if err == nil {
			return nil
		}
		var ce p11.Error
		if !errors.As(err, &ce) {
			return err
		}
		// Close the session on any Cryptoki error: it also ends an
		// operation a failed call may have left active.
		_ = m.ctx.CloseSession(l.sh)
		l.open = false
		if isSessionError(ce) && attempt == 0 {
			continue
		}
		if isDeviceError(ce) {
			b.markBroken(st, err)
		}
		return b.unavailable(op, err)
	}
}

// openSession opens a read-write session on st.slot and logs the user in
// (the login state is shared by all sessions of the application, so
// CKR_USER_ALREADY_LOGGED_IN is success). A rejected PIN is remembered and
// never tried again. The caller holds the module's call lock.
func (b *Backend) openSession(l *lane, st *tokenState) error {
	if p := b.loginErr.Load(); p != nil {
		return *p
	}
	c := b.mod.ctx
	sh, err := c.OpenSession(st.slot, p11.CKF_SERIAL_SESSION|p11.CKF_RW_SESSION)
	if err != nil {
		return fmt.Errorf("C_OpenSession: %w", err)
	}
	if err := c.Login(sh, p11.CKU_USER, b.cfg.PIN); err != nil && !errors.Is(err, p11.Error(p11.CKR_USER_ALREADY_LOGGED_IN)) {
		_ = c.CloseSession(sh)
		if le := b.newLoginError(err); le != nil {
			b.loginErr.CompareAndSwap(nil, &le)
			return le
		}
		return fmt.Errorf("C_Login: %w", err)
	}
	l.sh, l.open, l.st = sh, true, st
	return nil
}

// usable returns the token state, or an error wrapping
// backends.ErrUnavailable while the token is unreachable. One caller at a
// time reconnects, at most once per reconnect interval; callers arriving
// meanwhile wait for that attempt (within the timeout), and while the
// interval has not passed they fail at once instead of queueing behind a
// dead device.
func (b *Backend) usable(ctx context.Context) (*tokenState, error) {
	st := b.state.Load()
	if st.err == nil {
		return st, nil
	}
	if p := b.loginErr.Load(); p != nil {
		return nil, *p
	}
	every := min(b.cfg.Timeout, maxReconnectEvery)
	if time.Since(time.Unix(0, b.lastAttempt.Load())) < every {
		return nil, b.unavailable("call", st.err)
	}
	timer := time.NewTimer(b.cfg.Timeout)
	defer timer.Stop()
	select {
	case b.reconnecting <- struct{}{}:
	case <-timer.C:
		return nil, b.unavailable("call", st.err)
	case <-ctx.Done():
		return nil, b.unavailable("call", st.err)
	}
	defer func() { <-b.reconnecting }()
	if st = b.state.Load(); st.err == nil {
		return st, nil // reconnected while we waited
	}
	if time.Since(time.Unix(0, b.lastAttempt.Load())) < every {
		return nil, b.unavailable("call", st.err) // the attempt we waited for failed
	}
	b.lastAttempt.Store(time.Now().UnixNano())
	if err := b.controlCall(ctx, "reconnect", b.reconnect); err != nil {
		b.log.Warn("PKCS#11 token still unreachable", "err", err)
		var le *loginError
		if errors.As(err, &le) {
			return nil, err
		}
		return nil, b.unavailable("reconnect", err)
	}
	return b.state.Load(), nil
}

// reconnect finds the token by label again and proves a login; when the
// token does not answer, it re-initializes the module first (only when no
// call is inside the library). On success it installs a new tokenState:
// pooled sessions and cached object handles of the old one are dropped.
func (b *Backend) reconnect() error {
	old := b.state.Load()
	st, err := b.findToken()
	if err == nil {
		err = b.probe(st)
	}
	var le *loginError
	if errors.As(err, &le) {
		return err
	}
	if err != nil {
		ok, ierr := b.mod.tryReinit()
		if !ok {
			return fmt.Errorf("%w (module not re-initialized: %d calls still inside it)", err, b.stuck.Load())
		}
		if ierr != nil {
			return fmt.Errorf("C_Initialize: %w", ierr)
		}
		if st, err = b.findToken(); err != nil {
			return err
		}
		if err = b.probe(st); err != nil {
			return err
		}
	}
	b.state.Store(st)
	b.log.Info("PKCS#11 token reachable again", "slot", st.slot, "was", old.err)
	return nil
}

// probe checks that the token in st.slot answers and accepts the PIN.
func (b *Backend) probe(st *tokenState) error {
	m := b.mod
	m.callMu.RLock()
	defer m.callMu.RUnlock()
	if _, err := m.ctx.GetTokenInfo(st.slot); err != nil {
		return fmt.Errorf("C_GetTokenInfo: %w", err)
	}
	var l lane
	if err := b.openSession(&l, st); err != nil {
		return err
	}
	_ = m.ctx.CloseSession(l.sh)
	return nil
}

// markBroken records that the token of st is unreachable, unless the state
// has moved on already.
func (b *Backend) markBroken(st *tokenState, cause error) {
	if st.err != nil {
		return
	}
	broken := *st
	broken.err = cause
	if b.state.CompareAndSwap(st, &broken) {
		b.log.Error("PKCS#11 token unreachable; signing fails with backend_unavailable until it returns", "err", cause)
	}
}

// Healthy reports whether the token answers C_GetTokenInfo under its label
// within the timeout (backends.HealthChecker); while the token is marked
// unreachable it tries to reconnect first. Errors wrap
// backends.ErrUnavailable.
func (b *Backend) Healthy(ctx context.Context) error {
	if p := b.loginErr.Load(); p != nil {
		return *p
	}
	st, err := b.usable(ctx)
	if err != nil {
		return err
	}
	err = b.controlCall(ctx, "health check", func() error {
		m := b.mod
		m.callMu.RLock()
		defer m.callMu.RUnlock()
		if !m.initialized || m.gen.Load() != st.modGen {
			return p11.Error(p11.CKR_CRYPTOKI_NOT_INITIALIZED)
		}
		ti, err := m.ctx.GetTokenInfo(st.slot)
		if err != nil {
			return fmt.Errorf("C_GetTokenInfo: %w", err)
		}
		if label := strings.TrimRight(ti.Label, " \x00"); label != b.cfg.TokenLabel {
			return fmt.Errorf("slot %d now holds token %q: %w", st.slot, label, p11.Error(p11.CKR_TOKEN_NOT_PRESENT))
		}
		if ti.Flags&p11.CKF_USER_PIN_LOCKED != 0 {
			return errors.New("the user PIN is locked")
		}
		return nil
	})
	if err == nil {
		return nil
	}
	if errors.Is(err, backends.ErrUnavailable) {
		return err
	}
	if isDeviceError(err) {
		b.markBroken(st, err)
	}
	return b.unavailable("health check", err)
}

func (b *Backend) unavailable(op string, err error) error {
	if errors.Is(err, backends.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: PKCS#11 %s on token %q: %w", backends.ErrUnavailable, op, b.cfg.TokenLabel, err)
}

func (b *Backend) closedErr() error {
	return fmt.Errorf("%w: PKCS#11 backend for token %q is closed", backends.ErrUnavailable, b.cfg.TokenLabel)
}

// isSessionError: the session is gone or confused; a fresh session may
// succeed.
func isSessionError(ce p11.Error) bool {
	switch ce {
	case p11.CKR_SESSION_HANDLE_INVALID, p11.CKR_SESSION_CLOSED, p11.CKR_USER_NOT_LOGGED_IN,
		p11.CKR_OPERATION_ACTIVE, p11.CKR_OPERATION_NOT_INITIALIZED, p11.CKR_SESSION_COUNT:
		return true
	}
	return false
}

// isDeviceError: the token or module is unreachable or failed; calls will
// keep failing until a reconnect.
func isDeviceError(err error) bool {
	var ce p11.Error
	if !errors.As(err, &ce) {
		return false
	}
	switch ce {
	case p11.CKR_DEVICE_ERROR, p11.CKR_DEVICE_REMOVED, p11.CKR_TOKEN_NOT_PRESENT, p11.CKR_TOKEN_NOT_RECOGNIZED,
		p11.CKR_SLOT_ID_INVALID, p11.CKR_GENERAL_ERROR, p11.CKR_CRYPTOKI_NOT_INITIALIZED, p11.CKR_FUNCTION_FAILED:
		return true
	}
	return false
}
