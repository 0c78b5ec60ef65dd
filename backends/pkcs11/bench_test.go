package pkcs11

import (
	"context"
	"crypto/sha256"
	"os"
	"runtime"
	"strconv"
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

// BenchmarkSignPKCS11 measures, in the same run and with the same number
// of goroutines (GOMAXPROCS), the rate at which keysvc signs compact JWS
// through the backend (signer.JWSSigner -> session pool -> C_SignInit +
// C_Sign) beside the rate of bare C_SignInit + C_Sign calls on sessions of
// their own. Metrics: keysvc-signs/s and direct-signs/s.
// $KEYSVC_BENCH_PARALLELISM sets b.SetParallelism for the keysvc half.
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
			if p, err := strconv.Atoi(os.Getenv("KEYSVC_BENCH_PARALLELISM")); err == nil && p > 0 {
				b.SetParallelism(p)
			}
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := j.Sign(payload, ""); err != nil {
						failed.Add(1)
					}
				}
			})
			keysvc := float64(b.N) / time.Since(start).Seconds()
			b.StopTimer()
			if failed.Load() > 0 {
				b.Fatalf("%d signatures failed", failed.Load())
			}
			direct := directSignRate(b, be, h.Ref, alg, b.N, len(payload))
			b.ReportMetric(keysvc, "keysvc-signs/s")
			b.ReportMetric(direct, "direct-signs/s")
		})
	}
}

// directSignRate signs n messages with bare Cryptoki calls from GOMAXPROCS
// goroutines, each on its own session, and returns signatures per second.
func directSignRate(b *testing.B, be *Backend, ref, alg string, n, msgLen int) float64 {
	u, err := parseObjectURI(ref)
	if err != nil {
		b.Fatal(err)
	}
	m := be.mod
	m.callMu.RLock()
	defer m.callMu.RUnlock()
	slot := be.state.Load().slot
	mech, data := uint(ckmEdDSA), []byte(strings.Repeat("x", msgLen))
	if alg == signer.AlgES256 {
		d := sha256.Sum256(data)
		mech, data = p11.CKM_ECDSA, d[:]
	}
	workers := runtime.GOMAXPROCS(0)
	sessions := make([]p11.SessionHandle, workers)
	var key p11.ObjectHandle
	for i := range sessions {
		sh, err := m.ctx.OpenSession(slot, p11.CKF_SERIAL_SESSION)
		if err != nil {
			b.Fatal(err)
		}
		defer m.ctx.CloseSession(sh)
		sessions[i] = sh
	}
	objs, err := (&session{c: m.ctx, sh: sessions[0]}).findObjects(labelTemplate(p11.CKO_PRIVATE_KEY, u.Object, u.ID))
	if err != nil || len(objs) != 1 {
		b.Fatalf("find key: %v %v", objs, err)
	}
	key = objs[0]
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, sh := range sessions {
		wg.Add(1)
		go func(sh p11.SessionHandle) {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := m.ctx.SignInit(sh, []*p11.Mechanism{p11.NewMechanism(mech, nil)}, key); err != nil {
					b.Error(err)
					return
				}
				if _, err := m.ctx.Sign(sh, data); err != nil {
					b.Error(err)
					return
				}
			}
		}(sh)
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}
