// Package pkcs11 is the PKCS#11 backend: Ed25519 and P-256 key pairs are
// generated inside an HSM token (PKCS#11 v3.0, OASIS "PKCS #11
// Cryptographic Token Interface Base Specification Version 3.0") and the
// private half never leaves it (CKA_SENSITIVE=true, CKA_EXTRACTABLE=false).
// keysvc asks the token to sign: CKM_EDDSA (pure Ed25519, RFC 8032 §5.1)
// for EdDSA keys and CKM_ECDSA over the SHA-256 digest for ES256 keys.
//
// The binding is github.com/miekg/pkcs11 (cgo); crypto11 has no Ed25519
// (docs/adr/0007-pkcs11-binding.md). The token is found by its label, never
// by slot id, which modules may renumber. Each key version is a private and
// a public key object sharing CKA_LABEL = prefix+kid and a random 16-byte
// CKA_ID; key history stores an RFC 7512 PKCS#11 URI naming module, token
// and object, e.g.
//
//	pkcs11:token=keysvc;object=villaakerlyckan.se-2026-05-18-01;id=%3a%9c...;type=private?module-path=/usr/lib/softhsm/libsofthsm2.so
//
// Calls go through a bounded pool of logged-in sessions and each has a
// timeout (Config.Timeout): a token that hangs or disappears turns calls
// into errors wrapping backends.ErrUnavailable, never into a hang, and the
// backend reconnects (finding the slot by label again, re-initializing the
// module and logging in again) once the token is back.
package pkcs11

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	p11 "github.com/miekg/pkcs11"

	"github.com/keysvc/keysvc/backends"
)

// Kind is this backend's name in key history and configuration.
const Kind = "pkcs11"

// Defaults for Config.
const (
	DefaultSessions = 8
	DefaultTimeout  = 5 * time.Second
)

// PKCS#11 v3.0 values that github.com/miekg/pkcs11 v1.1.2 does not define
// (PKCS#11 v3.0 pkcs11t.h).
const (
	ckkECEdwards           = 0x40   // CKK_EC_EDWARDS
	ckmECEdwardsKeyPairGen = 0x1055 // CKM_EC_EDWARDS_KEY_PAIR_GEN
	ckmEdDSA               = 0x1057 // CKM_EDDSA: without parameters, pure Ed25519 with a single-part C_Sign
)

const (
	keyIDSize            = 16          // bytes of the random CKA_ID of each key version
	maxReconnectEvery    = time.Second // at most one reconnect attempt per interval (the timeout, when shorter)
	ed25519SignatureSize = 64
	p256RawSignatureSize = 64 // CKM_ECDSA output for P-256: r||s, 32 bytes each
	p256PointSize        = 65 // uncompressed SEC 1 point 04||X||Y
	ed25519CurveName     = "edwards25519"
)

// Config configures a Backend. PIN is the user PIN; it is never logged nor
// put into errors.
type Config struct {
	ModulePath     string        // path of the vendor's PKCS#11 shared library
	TokenLabel     string        // CKA token label (CK_TOKEN_INFO.label), trailing blanks ignored
	PIN            string        // user PIN (CKU_USER)
	KeyLabelPrefix string        // prepended to the kid in CKA_LABEL; "" by default
	Sessions       int           // session pool size; DefaultSessions when 0
	Timeout        time.Duration // per call, including the wait for a free session; DefaultTimeout when 0
	Logger         *slog.Logger
}

// Errors from Open; test with errors.Is.
var (
	// ErrTokenNotFound: no token in the module carries the configured
	// label. It also wraps backends.ErrUnavailable.
	ErrTokenNotFound = errors.New("pkcs11: token not found")
	// ErrLoginFailed: the token refused the PIN (incorrect, locked,
	// expired). It also wraps backends.ErrUnavailable. keysvc does not
	// retry a rejected PIN (every attempt counts toward the token's
	// lockout): after one, the backend fails until restarted.
	ErrLoginFailed = errors.New("pkcs11: login failed")
)

// Backend is the PKCS#11 backend. Create it with Open; it is safe for
// concurrent use.
type Backend struct {
	cfg Config
	log *slog.Logger
	mod *module

	lanes   *lanePool     // the session pool: one lane per session, taken for a call
	control chan struct{} // one slot for calls that need no session: token info, reconnect

	state        atomic.Pointer[tokenState]
	reconnecting chan struct{}         // one reconnect at a time
	lastAttempt  atomic.Int64          // unix nanos of the last reconnect attempt
	loginErr     atomic.Pointer[error] // a rejected PIN: never tried again
	stuck        atomic.Int64          // calls abandoned after their timeout, still inside the library
	closed       atomic.Bool
}

// tokenState is an immutable snapshot of where the token is. Sessions and
// object handles found under one tokenState are void under another.
type tokenState struct {
	modGen uint64 // module generation the slot was found in
	slot   uint
	err    error // non-nil: the token is unreachable (the cause)
}

// lane is one pooled session; whoever takes it from Backend.lanes owns it.
type lane struct {
	sh   p11.SessionHandle
	open bool
	st   *tokenState // the state the session was opened under
}

// lanePool is the session pool. Free lanes form a stack, so the session
// used last serves the next call: with two callers, SoftHSM2 signed Ed25519
// about 6 % faster on two hot sessions than rotating through eight
// (docs/performance.md). One token in slots per free lane lets callers
// wait with a timeout.
type lanePool struct {
	slots chan struct{}
	mu    sync.Mutex
	free  []*lane
}

func newLanePool(n int) *lanePool {
	p := &lanePool{slots: make(chan struct{}, n)}
	for range n {
		p.free = append(p.free, &lane{})
		p.slots <- struct{}{}
	}
	return p
}

// available is ready when a lane is free; after receiving from it, call pop.
func (p *lanePool) available() <-chan struct{} { return p.slots }

// pop takes the most recently returned lane; the caller received a token
// from available first.
func (p *lanePool) pop() *lane {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return l
}

// put returns a lane taken with pop.
func (p *lanePool) put(l *lane) {
	p.mu.Lock()
	p.free = append(p.free, l)
	p.mu.Unlock()
	p.slots <- struct{}{}
}

// ReadPINFile reads a user PIN from path: the file's content without a
// trailing newline. The file must not be accessible by group or others
// (chmod 600). Errors never include the content.
func ReadPINFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("PKCS#11 PIN file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("PKCS#11 PIN file %s has mode %04o; it must not be accessible by group or others (chmod 600)", path, fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("PKCS#11 PIN file: %w", err)
	}
	pin := strings.TrimRight(string(raw), "\r\n")
	clear(raw)
	if pin == "" {
		return "", fmt.Errorf("PKCS#11 PIN file %s is empty", path)
	}
	return pin, nil
}

// Open loads the module, finds the token by label and logs in. Errors are
// meant for an operator reading a failed start:
//
//   - module missing: "PKCS#11 module /path not found ..."
//   - no such token (ErrTokenNotFound): "no PKCS#11 token labelled "x" in
//     /path; tokens present: "a", "b""
//   - wrong PIN (ErrLoginFailed): "PKCS#11 login to token "x" failed:
//     incorrect PIN"
//
// Open is bounded by ctx and, per Cryptoki call, by cfg.Timeout.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.ModulePath == "" {
		return nil, errors.New("pkcs11 backend: the module path is required (--pkcs11-module)")
	}
	if cfg.TokenLabel == "" {
		return nil, errors.New("pkcs11 backend: the token label is required (--pkcs11-token-label)")
	}
	if cfg.PIN == "" {
		return nil, errors.New("pkcs11 backend: no user PIN (use --pkcs11-pin-file or KEYSVC_PKCS11_PIN)")
	}
	if cfg.Sessions < 0 || cfg.Timeout < 0 {
		return nil, errors.New("pkcs11 backend: sessions and timeout must not be negative")
	}
	if cfg.Sessions == 0 {
		cfg.Sessions = DefaultSessions
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Backend{
		cfg:     cfg,
		log:     cfg.Logger.With("backend", Kind, "token", cfg.TokenLabel),
		lanes:   newLanePool(cfg.Sessions),
		control: make(chan struct{}, 1),

		reconnecting: make(chan struct{}, 1),
	}
	// Loading and C_Initialize run under the timeout too: a network HSM's
	// library may block connecting.
	type loaded struct {
		m   *module
		err error
	}
	ch := make(chan loaded, 1)
	go func() {
		m, err := acquireModule(cfg.ModulePath)
		ch <- loaded{m, err}
	}()
	timer := time.NewTimer(cfg.Timeout)
	defer timer.Stop()
	select {
	case l := <-ch:
		if l.err != nil {
			return nil, l.err
		}
		b.mod = l.m
	case <-timer.C:
		go func() {
			if l := <-ch; l.m != nil {
				l.m.release()
			}
		}()
		return nil, fmt.Errorf("%w: PKCS#11 module %s did not initialize within %s", backends.ErrUnavailable, cfg.ModulePath, cfg.Timeout)
	case <-ctx.Done():
		go func() {
			if l := <-ch; l.m != nil {
				l.m.release()
			}
		}()
		return nil, ctx.Err()
	}
	// Find the slot and log in (a pooled session proves the PIN).
	var st *tokenState
	err := b.controlCall(ctx, "find token", func() error {
		var err error
		st, err = b.findToken()
		return err
	})
	if err == nil {
		b.state.Store(st)
		err = b.withSession(ctx, "login", func(*session) error { return nil })
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	b.log.Info("PKCS#11 token ready", "module", cfg.ModulePath, "slot", st.slot, "sessions", cfg.Sessions, "timeout", cfg.Timeout.String())
	return b, nil
}

var (
	_ backends.Backend       = (*Backend)(nil)
	_ backends.HealthChecker = (*Backend)(nil)
)

// Kind returns "pkcs11".
func (b *Backend) Kind() string { return Kind }

// TokenLabel returns the configured token label.
func (b *Backend) TokenLabel() string { return b.cfg.TokenLabel }

// Close closes the idle sessions and releases the module (C_Finalize when
// no other Backend uses it and no call is stuck in it). Signers obtained
// from b fail with backends.ErrUnavailable afterwards. Close does not wait
// for calls stuck in the device.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	if b.mod == nil {
		return nil
	}
	b.mod.callMu.RLock()
	gen, initialized := b.mod.gen.Load(), b.mod.initialized
	for {
		var l *lane
		select {
		case <-b.lanes.available():
			l = b.lanes.pop()
		default:
		}
		if l == nil {
			break
		}
		if l.open && initialized && l.st.modGen == gen {
			_ = b.mod.ctx.CloseSession(l.sh)
		}
		l.open = false
	}
	b.mod.callMu.RUnlock()
	b.mod.release()
	return nil
}

// findToken returns the slot whose token carries the configured label.
// It takes the module's call lock itself.
func (b *Backend) findToken() (*tokenState, error) {
	m := b.mod
	m.callMu.RLock()
	defer m.callMu.RUnlock()
	if !m.initialized {
		return nil, p11.Error(p11.CKR_CRYPTOKI_NOT_INITIALIZED)
	}
	slots, err := m.ctx.GetSlotList(true)
	if err != nil {
		return nil, fmt.Errorf("C_GetSlotList: %w", err)
	}
	var present []string
	uninitialized := 0
	for _, s := range slots {
		ti, err := m.ctx.GetTokenInfo(s)
		if err != nil {
			continue // a token that cannot answer is not ours to judge here
		}
		if ti.Flags&p11.CKF_TOKEN_INITIALIZED == 0 {
			uninitialized++
			continue
		}
		label := strings.TrimRight(ti.Label, " \x00")
		if label == b.cfg.TokenLabel {
			return &tokenState{modGen: m.gen.Load(), slot: s}, nil
		}
		present = append(present, fmt.Sprintf("%q", label))
	}
	list := "none"
	if len(present) > 0 {
		list = strings.Join(present, ", ")
	}
	if uninitialized > 0 {
		list += fmt.Sprintf(" (and %d uninitialized)", uninitialized)
	}
	return nil, &tokenNotFoundError{msg: fmt.Sprintf("no PKCS#11 token labelled %q in %s; tokens present: %s", b.cfg.TokenLabel, m.path, list)}
}

type tokenNotFoundError struct{ msg string }

func (e *tokenNotFoundError) Error() string { return e.msg }
func (e *tokenNotFoundError) Unwrap() []error {
	return []error{ErrTokenNotFound, backends.ErrUnavailable}
}

type loginError struct{ msg string }

func (e *loginError) Error() string   { return e.msg }
func (e *loginError) Unwrap() []error { return []error{ErrLoginFailed, backends.ErrUnavailable} }

// newLoginError returns the operator-facing error for a C_Login failure
// that is about the PIN, or nil for any other failure.
func (b *Backend) newLoginError(err error) error {
	var ce p11.Error
	if !errors.As(err, &ce) {
		return nil
	}
	var reason string
	switch ce {
	case p11.CKR_PIN_INCORRECT, p11.CKR_PIN_LEN_RANGE:
		reason = "incorrect PIN"
	case p11.CKR_PIN_LOCKED:
		reason = "the user PIN is locked (too many wrong attempts; the security officer must unblock it)"
	case p11.CKR_PIN_EXPIRED:
		reason = "the user PIN has expired"
	case p11.CKR_USER_PIN_NOT_INITIALIZED:
		reason = "the token's user PIN is not initialized"
	default:
		return nil // not a PIN problem: a device or session error
	}
	return &loginError{msg: fmt.Sprintf("PKCS#11 login to token %q failed: %s", b.cfg.TokenLabel, reason)}
}
