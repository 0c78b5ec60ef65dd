package pkcs11

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"math/big"
	"sort"
	"strings"

	p11 "github.com/miekg/pkcs11"

	"github.com/keysvc/keysvc/signer"
)

// CheckReport is what `keysvc backend check` prints.
type CheckReport struct {
	Module     ModuleInfo
	Token      TokenInfo
	Mechanisms []Mechanism       // sorted by ID
	Algorithms []AlgorithmResult // EdDSA, then ES256
}

// ModuleInfo describes the loaded library (C_GetInfo).
type ModuleInfo struct {
	Path            string
	Manufacturer    string
	Description     string
	LibraryVersion  string // major.minor
	CryptokiVersion string // major.minor
}

// TokenInfo describes the token (C_GetTokenInfo), blanks trimmed.
type TokenInfo struct {
	Slot            uint
	Label           string
	Manufacturer    string
	Model           string
	Serial          string
	HardwareVersion string
	FirmwareVersion string
}

// Mechanism is one mechanism the token offers (C_GetMechanismList,
// C_GetMechanismInfo).
type Mechanism struct {
	ID         uint
	Name       string // "CKM_EDDSA", or the hex value for unnamed ones
	MinKeySize uint
	MaxKeySize uint
	Flags      uint // CKF_SIGN, CKF_GENERATE_KEY_PAIR, ...
}

// FlagNames returns the mechanism's usage flags in words, e.g.
// "sign verify".
func (m Mechanism) FlagNames() string {
	var out []string
	for _, f := range []struct {
		bit  uint
		name string
	}{
		{p11.CKF_ENCRYPT, "encrypt"}, {p11.CKF_DECRYPT, "decrypt"}, {p11.CKF_DIGEST, "digest"},
		{p11.CKF_SIGN, "sign"}, {p11.CKF_VERIFY, "verify"}, {p11.CKF_GENERATE, "generate"},
		{p11.CKF_GENERATE_KEY_PAIR, "generate_key_pair"}, {p11.CKF_WRAP, "wrap"},
		{p11.CKF_UNWRAP, "unwrap"}, {p11.CKF_DERIVE, "derive"},
	} {
		if m.Flags&f.bit != 0 {
			out = append(out, f.name)
		}
	}
	return strings.Join(out, " ")
}

// AlgorithmResult says whether the token can sign for a JWS algorithm.
type AlgorithmResult struct {
	Alg   string // "EdDSA" or "ES256"
	Curve string // "Ed25519" or "P-256"
	Err   error  // nil: generated, signed and verified
}

// Check describes the module and the token and tries each algorithm: it
// generates a session key pair (CKA_TOKEN=false, so nothing is left in the
// token), signs a random message, verifies the signature with Go's
// crypto/ed25519 or crypto/ecdsa and destroys the key pair. It fails only
// when the token cannot be described; a failing algorithm is reported in
// Algorithms.
func (b *Backend) Check(ctx context.Context) (CheckReport, error) {
	r := CheckReport{Module: ModuleInfo{Path: b.cfg.ModulePath}}
	st, err := b.usable(ctx)
	if err != nil {
		return r, err
	}
	err = b.controlCall(ctx, "describe token", func() error {
		m := b.mod
		m.callMu.RLock()
		defer m.callMu.RUnlock()
		info := m.info
		r.Module.Manufacturer = trim(info.ManufacturerID)
		r.Module.Description = trim(info.LibraryDescription)
		r.Module.LibraryVersion = fmt.Sprintf("%d.%d", info.LibraryVersion.Major, info.LibraryVersion.Minor)
		r.Module.CryptokiVersion = fmt.Sprintf("%d.%d", info.CryptokiVersion.Major, info.CryptokiVersion.Minor)
		ti, err := m.ctx.GetTokenInfo(st.slot)
		if err != nil {
			return fmt.Errorf("C_GetTokenInfo: %w", err)
		}
		r.Token = TokenInfo{
			Slot: st.slot, Label: trim(ti.Label), Manufacturer: trim(ti.ManufacturerID), Model: trim(ti.Model), Serial: trim(ti.SerialNumber),
			HardwareVersion: fmt.Sprintf("%d.%d", ti.HardwareVersion.Major, ti.HardwareVersion.Minor),
			FirmwareVersion: fmt.Sprintf("%d.%d", ti.FirmwareVersion.Major, ti.FirmwareVersion.Minor),
		}
		mechs, err := m.ctx.GetMechanismList(st.slot)
		if err != nil {
			return fmt.Errorf("C_GetMechanismList: %w", err)
		}
		for _, mech := range mechs {
			id := mech.Mechanism
			mi := Mechanism{ID: id, Name: mechanismName(id)}
			if infos, err := m.ctx.GetMechanismInfo(st.slot, []*p11.Mechanism{p11.NewMechanism(id, nil)}); err == nil {
				mi.MinKeySize, mi.MaxKeySize, mi.Flags = infos.MinKeySize, infos.MaxKeySize, infos.Flags
			}
			r.Mechanisms = append(r.Mechanisms, mi)
		}
		sort.Slice(r.Mechanisms, func(i, j int) bool { return r.Mechanisms[i].ID < r.Mechanisms[j].ID })
		return nil
	})
	if err != nil {
		return r, b.unavailable("describe token", err)
	}
	for _, a := range []AlgorithmResult{{Alg: signer.AlgEdDSA, Curve: "Ed25519"}, {Alg: signer.AlgES256, Curve: "P-256"}} {
		a.Err = b.withSession(ctx, "check "+a.Alg, func(s *session) error { return checkAlgorithm(s, a.Alg) })
		r.Algorithms = append(r.Algorithms, a)
	}
	return r, nil
}

func checkAlgorithm(s *session, alg string) error {
	pubH, privH, err := s.generate(alg, "keysvc-backend-check", nil, false)
	if err != nil {
		return err
	}
	defer func() {
		_ = s.c.DestroyObject(s.sh, privH)
		_ = s.c.DestroyObject(s.sh, pubH)
	}()
	pub, err := s.checkGenerated(alg, pubH, privH)
	if err != nil {
		return err
	}
	msg := make([]byte, 64)
	if _, err := rand.Read(msg); err != nil {
		return err
	}
	switch alg {
	case signer.AlgEdDSA:
		sig, err := s.sign(ckmEdDSA, privH, msg)
		if err != nil {
			return err
		}
		if !ed25519.Verify(pub.(ed25519.PublicKey), msg, sig) {
			return fmt.Errorf("the token's CKM_EDDSA signature does not verify with crypto/ed25519")
		}
	case signer.AlgES256:
		d := sha256.Sum256(msg)
		sig, err := s.sign(p11.CKM_ECDSA, privH, d[:])
		if err != nil {
			return err
		}
		if len(sig) != p256RawSignatureSize || !ecdsa.Verify(pub.(*ecdsa.PublicKey), d[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			return fmt.Errorf("the token's CKM_ECDSA signature does not verify with crypto/ecdsa")
		}
	}
	return nil
}

func trim(s string) string { return strings.TrimRight(s, " \x00") }
