package pkcs11

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	p11 "github.com/miekg/pkcs11"
)

// module is one loaded PKCS#11 library, shared by every Backend in the
// process that names the same path: C_Initialize and C_Finalize are
// process-wide in Cryptoki, so two Backends must not each initialize and
// finalize the library under the other's feet.
//
// Every Cryptoki call except C_Initialize/C_Finalize holds callMu for
// reading. (Re)initialization takes it for writing, and outside Open only
// with TryLock: it never waits behind a call that hangs in the device, and
// C_Finalize never runs while another thread is inside the library.
//
// The library is never unloaded (no dlclose): some modules do not survive
// being loaded twice in one process, and a path is loaded at most once.
type module struct {
	path string
	ctx  *p11.Ctx
	info p11.Info // from C_GetInfo after the first C_Initialize

	callMu      sync.RWMutex
	initialized bool          // guarded by callMu
	gen         atomic.Uint64 // counts C_Initialize calls; session and object handles from an older generation are void

	refs int // Backends holding the module; guarded by modules.Mutex
}

var modules struct {
	sync.Mutex
	byPath map[string]*module
}

// acquireModule loads the library at path once per process, initializes
// it when needed and counts a reference. Errors name the path and whether
// the file is missing or failed to load.
func acquireModule(path string) (*module, error) {
	modules.Lock()
	defer modules.Unlock()
	m := modules.byPath[path]
	if m == nil {
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("PKCS#11 module %s not found (install the HSM vendor's PKCS#11 library, or fix --pkcs11-module)", path)
		case err != nil:
			return nil, fmt.Errorf("PKCS#11 module %s: %w", path, err)
		case fi.IsDir():
			return nil, fmt.Errorf("PKCS#11 module %s is a directory; name the shared library (.so) itself", path)
		}
		ctx := p11.New(path)
		if ctx == nil {
			return nil, fmt.Errorf("PKCS#11 module %s could not be loaded (dlopen failed: not a shared library for this platform, or a dependency is missing; try `ldd %s`)", path, path)
		}
		m = &module{path: path, ctx: ctx}
		if modules.byPath == nil {
			modules.byPath = map[string]*module{}
		}
		modules.byPath[path] = m
	}
	if err := m.ensureInitialized(); err != nil {
		return nil, fmt.Errorf("PKCS#11 module %s: C_Initialize: %w", path, err)
	}
	m.refs++
	return m, nil
}

// release drops a reference; the last one finalizes the library unless a
// call is still stuck inside it.
func (m *module) release() {
	modules.Lock()
	defer modules.Unlock()
	m.refs--
	if m.refs > 0 {
		return
	}
	if !m.callMu.TryLock() {
		return // a call is still running in the library; leave it initialized
	}
	defer m.callMu.Unlock()
	if m.initialized {
		_ = m.ctx.Finalize()
		m.initialized = false
	}
}

func (m *module) ensureInitialized() error {
	m.callMu.RLock()
	ok := m.initialized
	m.callMu.RUnlock()
	if ok {
		return nil
	}
	m.callMu.Lock()
	defer m.callMu.Unlock()
	return m.initLocked()
}

func (m *module) initLocked() error {
	if m.initialized {
		return nil
	}
	if err := m.ctx.Initialize(); err != nil && !errors.Is(err, p11.Error(p11.CKR_CRYPTOKI_ALREADY_INITIALIZED)) {
		return err
	}
	m.initialized = true
	m.gen.Add(1)
	if info, err := m.ctx.GetInfo(); err == nil {
		m.info = info
	}
	return nil
}

// tryReinit runs C_Finalize and C_Initialize when no call is inside the
// library, so the module rescans its slots (SoftHSM2 only notices a
// restored token directory this way; hardware modules re-establish their
// connection). It reports false, doing nothing, while a call is running.
func (m *module) tryReinit() (bool, error) {
	if !m.callMu.TryLock() {
		return false, nil
	}
	defer m.callMu.Unlock()
	if m.initialized {
		_ = m.ctx.Finalize()
		m.initialized = false
	}
	return true, m.initLocked()
}
