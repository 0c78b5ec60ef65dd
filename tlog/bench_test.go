package tlog_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keysvc/keysvc/tlog"
	"github.com/keysvc/keysvc/tlog/tlogaudit"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

var benchSeq atomic.Uint64

func benchSubs(n int) []tlogfmt.Submission {
	subs := make([]tlogfmt.Submission, n)
	var b [8]byte
	for i := range subs {
		binary.BigEndian.PutUint64(b[:], benchSeq.Add(1))
		sum := sha256.Sum256(b[:])
		subs[i] = tlogfmt.Submission{ArtifactType: tlogfmt.ArtifactAttestation, ArtifactHash: "sha256:" + hex.EncodeToString(sum[:])}
	}
	return subs
}

// BenchmarkAppend measures the log append rate in process: each op is one
// Add of a batch (returning its SEP after Tessera sequenced and integrated
// every entry), from `clients` goroutines at once so Tessera's batches
// fill. Reported: leaves/s. Fsck runs on the log afterwards. The
// "unsigned" case is AddUnsigned (serve's embedded log): the same work
// without signing the promise.
func BenchmarkAppend(b *testing.B) {
	for _, c := range []struct {
		batch, clients int
		unsigned       bool
	}{{1, 16, false}, {100, 4, false}, {1000, 4, false}, {1000, 4, true}, {10000, 2, false}} {
		name := fmt.Sprintf("batch=%d/clients=%d", c.batch, c.clients)
		if c.unsigned {
			name += "/unsigned"
		}
		b.Run(name, func(b *testing.B) {
			op, _ := startLogB(b, tlog.Config{})
			ctx := context.Background()
			b.ResetTimer()
			start, cpu0 := time.Now(), processCPU()
			var wg sync.WaitGroup
			var next atomic.Int64
			for g := 0; g < c.clients; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						var err error
						if c.unsigned {
							_, err = op.AddUnsigned(ctx, benchSubs(c.batch))
						} else {
							_, _, err = op.Add(ctx, benchSubs(c.batch))
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			reportRate(b, b.N*c.batch, start, cpu0)
		})
	}
}

// BenchmarkAddBatchHTTP is BenchmarkAppend through POST add-batch on
// loopback (JSON decoding, strict checks, SEP signing included).
func BenchmarkAddBatchHTTP(b *testing.B) {
	const batch, clients = 1000, 4
	_, srv := startLogB(b, tlog.Config{})
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	var wg sync.WaitGroup
	var next atomic.Int64
	for g := 0; g < clients; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				body, _ := json.Marshal(tlogfmt.AddBatchRequest{Entries: benchSubs(batch)})
				resp, err := http.Post(srv.URL+tlogfmt.PathPrefix+"add-batch", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("add-batch: %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	reportRate(b, b.N*batch, start, cpu0)
}

// processCPU is this process's user+system CPU time (getrusage).
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck // cannot fail for RUSAGE_SELF
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportRate reports leaves/s (wall clock) and CPU per leaf: on a shared
// machine the CPU cost is the steadier number; 2 cores / cpu-ns/leaf is the
// CPU-bound ceiling of this machine.
func reportRate(b *testing.B, leaves int, start time.Time, cpu0 time.Duration) {
	b.ReportMetric(float64(leaves)/time.Since(start).Seconds(), "leaves/s")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(leaves), "cpu-ns/leaf")
}

// BenchmarkScan measures tlogaudit.Scan (keysvc anchor check --scan) over
// loopback HTTP: each op reads a log of 100,000 entries in full against
// its STH. Reported: entries/s.
func BenchmarkScan(b *testing.B) {
	op, srv := startLogB(b, tlog.Config{})
	ctx := context.Background()
	const n = 100_000
	for range n / 10_000 {
		if _, _, err := op.Add(ctx, benchSubs(10_000)); err != nil {
			b.Fatal(err)
		}
	}
	key := op.Key().Public
	var s *tlogaudit.Scanned
	for s == nil || s.TreeSize < n {
		time.Sleep(50 * time.Millisecond)
		var err error
		if s, err = tlogaudit.Scan(ctx, tlogaudit.ScanOptions{BaseURL: srv.URL, Keys: []ed25519.PublicKey{key}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		if _, err := tlogaudit.Scan(ctx, tlogaudit.ScanOptions{BaseURL: srv.URL, Keys: []ed25519.PublicKey{key}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}
