package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/tlog"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

type tlogBenchOptions struct {
	server           string
	batch, clients   int
	duration, warmup time.Duration
	batchMaxSize     uint
	batchMaxAge      time.Duration
	dataDir          string
}

func newTlogBenchCmd() *cobra.Command {
	o := &tlogBenchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the log append rate: add-batch against --server, or an in-process log",
		Long: `Append random artifact hashes to a log for --duration after --warmup and
report leaves/s, add-batch latency (p50/p99: sequenced and integrated, SEP
signed), this process's CPU per leaf and the machine's load average.

With --server, requests go to that operator's POST add-batch (HTTP, JSON,
only loopback targets are accepted). Without it, an operator runs in this process on a
fresh --data-dir (default: a temporary directory, removed after) and the
clients call Operator.Add directly: the engine bound without HTTP.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), cmd.OutOrStdout()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "", "base URL of a running keysvc tlog serve (default: an in-process log)")
	f.IntVar(&o.batch, "batch", 1000, "entries per add-batch (1 to 10000)")
	f.IntVar(&o.clients, "concurrency", 4, "concurrent clients")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "measured time")
	f.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured time first")
	f.UintVar(&o.batchMaxSize, "batch-max-size", tlog.DefaultBatchMaxSize, "in-process log: Tessera batch size")
	f.DurationVar(&o.batchMaxAge, "batch-max-age", tlog.DefaultBatchMaxAge, "in-process log: Tessera batch age")
	f.StringVar(&o.dataDir, "data-dir", "", "in-process log: data directory (default: a new temporary one)")
	return cmd
}

func (o *tlogBenchOptions) run(ctx context.Context, w io.Writer) error {
	if o.batch < 1 || o.batch > tlogfmt.MaxBatchEntries || o.clients < 1 {
		return fmt.Errorf("--batch must be 1 to %d and --concurrency positive", tlogfmt.MaxBatchEntries)
	}
	var add func(ctx context.Context, subs []tlogfmt.Submission) error
	target := o.server
	if o.server == "" {
		dir := o.dataDir
		if dir == "" {
			d, err := os.MkdirTemp("", "keysvc-tlog-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(d)
			dir = d
		}
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return err
		}
		op, err := tlog.New(ctx, tlog.Config{Dir: dir, Origin: "bench.example.test/vrp", Signer: priv,
			BatchMaxSize: o.batchMaxSize, BatchMaxAge: o.batchMaxAge, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return err
		}
		defer op.Close(context.Background())
		add = func(ctx context.Context, subs []tlogfmt.Submission) error { _, _, err := op.Add(ctx, subs); return err }
		target = "in-process (" + dir + ")"
	} else {
		if err := loopbackOnly(o.server); err != nil {
			return err
		}
		client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.clients}}
		url := strings.TrimSuffix(o.server, "/") + tlogfmt.PathPrefix + tlogfmt.EndpointAddBatch
		add = func(ctx context.Context, subs []tlogfmt.Submission) error {
			body, _ := json.Marshal(tlogfmt.AddBatchRequest{Entries: subs})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			rb, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("add-batch: %d %s", resp.StatusCode, rb)
			}
			return nil
		}
	}

	var seq atomic.Uint64
	var salt [8]byte
	rand.Read(salt[:])
	subs := func() []tlogfmt.Submission {
		out := make([]tlogfmt.Submission, o.batch)
		var b [16]byte
		copy(b[:8], salt[:])
		for i := range out {
			binary.BigEndian.PutUint64(b[8:], seq.Add(1))
			sum := sha256.Sum256(b[:])
			out[i] = tlogfmt.Submission{ArtifactType: tlogfmt.ArtifactAttestation, ArtifactHash: "sha256:" + hex.EncodeToString(sum[:])}
		}
		return out
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		leaves    int
		errs      int
		measuring atomic.Bool
	)
	end := time.Now().Add(o.warmup + o.duration)
	var wg sync.WaitGroup
	for c := 0; c < o.clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				batch := subs()
				t0 := time.Now()
				err := add(ctx, batch)
				d := time.Since(t0)
				if !measuring.Load() {
					continue
				}
				mu.Lock()
				if err != nil {
					errs++
				} else {
					leaves += len(batch)
					latencies = append(latencies, d)
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(o.warmup)
	measuring.Store(true)
	start, cpu0 := time.Now(), processCPUTime()
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPUTime()-cpu0
	if len(latencies) == 0 {
		return fmt.Errorf("no add-batch succeeded (%d errors)", errs)
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))] }
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "target\t%s\nbatch\t%d\nclients\t%d\nmeasured\t%s\nleaves\t%d\nleaves/s\t%.0f\nadd-batch p50\t%s\nadd-batch p99\t%s\nerrors\t%d\nbench CPU/leaf\t%s\nload average\t%s\n",
		target, o.batch, o.clients, elapsed.Round(time.Millisecond), leaves, float64(leaves)/elapsed.Seconds(),
		pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), errs,
		(cpu / time.Duration(leaves)).Round(100*time.Nanosecond), strings.TrimSpace(string(load)))
	return nil
}

// processCPUTime is this process's user+system CPU time (getrusage).
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
