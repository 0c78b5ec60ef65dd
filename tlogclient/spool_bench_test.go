package tlogclient_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/keysvc/keysvc/tlogclient"
)

// nopLog is a log that is never reached: the benchmark does not run the
// senders, it measures what a signing request waits for.
type nopLog struct{}

func (nopLog) URL() string { return "http://127.0.0.1:1" }
func (nopLog) AddBatch(context.Context, []tlogclient.Entry) (*tlogclient.Promise, error) {
	return nil, io.ErrUnexpectedEOF
}
func (nopLog) Proof(context.Context, [32]byte, uint64) ([]byte, error) {
	return nil, tlogclient.ErrNotFound
}
func (nopLog) Archive(context.Context, uint64, int) ([]tlogclient.ArchivedTree, error) {
	return nil, nil
}

// BenchmarkSpoolRecord is Record of one JWS into the spool by 16
// concurrent requests (group commit), per spool sync mode: the durability
// cost a signing request waits for, to compare with BenchmarkEnqueueOutbox
// (store package). rec/group is the mean group size.
func BenchmarkSpoolRecord(b *testing.B) {
	for _, mode := range []string{tlogclient.SpoolSyncWrite, tlogclient.SpoolSyncFdatasync} {
		b.Run(mode, func(b *testing.B) {
			sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: b.TempDir(), Sync: mode, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer sp.Close()
			c, err := tlogclient.New(tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{nopLog{}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.RecordJWS(context.Background(), []string{fmt.Sprintf("eyJbench.%d.sig", n.Add(1))}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/record")
			if g := metricSum(b, c, "keysvc_tlog_group_commit_rows"); g > 0 {
				b.ReportMetric(float64(b.N)/g, "rec/group")
			}
		})
	}
}
