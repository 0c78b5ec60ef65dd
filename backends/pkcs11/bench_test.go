package pkcs11

import (
	"context"
	"crypto/sha256"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/pkcs11/softhsmtest"
	"github.com/keysvc/keysvc/signer"
)

// BenchmarkSignPKCS11 measures the rate at which keysvc signs compact JWS
// through the backend (signer.JWSSigner -> session pool -> C_SignInit +
// C_Sign) beside the rate of bare C_SignInit + C_Sign calls, each on
// GOMAXPROCS goroutines. The two are measured in alternating 250 ms rounds
// (8 of each) so that a shared machine's drifting speed falls on both
// alike. Metrics: keysvc-signs/s, direct-signs/s and keysvc/direct.
//
//	go test -run '^$' -bench SignPKCS11 ./backends/pkcs11/
func BenchmarkSignPKCS11(b *testing.B) {
	tk := softhsmtest.New(b)
	be := openBackend(b, testConfig(b, tk))
	ctx := context.Background()
	payload := []byte(`{"tool":"get_verified_stay_offer","arguments_sha256":"2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050","offer_ref":"offer:villaakerlyckan.se:2026-09-02/05"}`)
	for i, alg := range []string{signer.AlgEdDSA, signer.AlgES256} {
		kid := "villaakerlyckan.se-2026-05-18-0" + string(rune('1'+i))
		h, err := be.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: alg})
		if err != nil {
			b.Fatal(err)
		}
		s, err := be.Signer(ctx, kid, h)
		if err != nil {
			b.Fatal(err)
		}
		j, err := signer.NewJWSSigner(kid, alg, s)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(alg, func(b *testing.B) {
			var failed atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := j.Sign(payload, ""); err != nil {
						failed.Add(1)
					}
				}
			})
			b.StopTimer()
			if failed.Load() > 0 {
				b.Fatalf("%d signatures failed", failed.Load())
			}
			viaKeysvc := func() error {
				_, err := j.Sign(payload, "")
				return err
			}
			direct := directSigner(b, be, h.Ref, alg, len(payload))
			var nk, nd int64
			var tk, td time.Duration
			for range 8 {
				n, d := signRound(b, viaKeysvc)
				nk, tk = nk+n, tk+d
				n, d = signRound(b, direct)
				nd, td = nd+n, td+d
			}
			k, dr := float64(nk)/tk.Seconds(), float64(nd)/td.Seconds()
			b.ReportMetric(k, "keysvc-signs/s")
			b.ReportMetric(dr, "direct-signs/s")
			b.ReportMetric(k/dr, "keysvc/direct")
		})
	}
}

// signRound calls sign on GOMAXPROCS goroutines for 250 ms and returns how
// many calls completed and the time taken.
func signRound(b *testing.B, sign func() error) (int64, time.Duration) {
	var n atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	time.AfterFunc(250*time.Millisecond, func() { stop.Store(true) })
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for !stop.Load() {
				if err := sign(); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return n.Load(), time.Since(start)
}

// directSigner returns a sign function making bare Cryptoki calls
// (C_SignInit + C_Sign over a message of msgLen bytes, the JWS signing
// input's size) on a session of each calling goroutine's own.
func directSigner(b *testing.B, be *Backend, ref, alg string, msgLen int) func() error {
	u, err := parseObjectURI(ref)
	if err != nil {
		b.Fatal(err)
	}
	m := be.mod
	slot := be.state.Load().slot
	mech, data := uint(ckmEdDSA), []byte(strings.Repeat("x", msgLen))
	if alg == signer.AlgES256 {
		d := sha256.Sum256(data)
		mech, data = p11.CKM_ECDSA, d[:]
	}
	sessions := make(chan p11.SessionHandle, runtime.GOMAXPROCS(0))
	for range cap(sessions) {
		sh, err := m.ctx.OpenSession(slot, p11.CKF_SERIAL_SESSION)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = m.ctx.CloseSession(sh) })
		sessions <- sh
	}
	sh := <-sessions
	objs, err := (&session{c: m.ctx, sh: sh}).findObjects(labelTemplate(p11.CKO_PRIVATE_KEY, u.Object, u.ID))
	sessions <- sh
	if err != nil || len(objs) != 1 {
		b.Fatalf("find key: %v %v", objs, err)
	}
	key := objs[0]
	return func() error {
		sh := <-sessions
		defer func() { sessions <- sh }()
		m.callMu.RLock()
		defer m.callMu.RUnlock()
		if err := m.ctx.SignInit(sh, []*p11.Mechanism{p11.NewMechanism(mech, nil)}, key); err != nil {
			return err
		}
		_, err := m.ctx.Sign(sh, data)
		return err
	}
}
