package mcpnode

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keysvc/keysvc/client"
)

var errClosed = errors.New("mcpnode: signer closed")

// batcher sends transport-assertion requests to keysvc from a fixed set of
// workers. A worker takes one waiting request, then every other request
// already waiting (up to max), and sends them as one
// /v1/keys/NAME/mcp-transport:batch request (a lone request goes to the
// single-item endpoint). Nothing waits to fill a batch: at low load every
// call is sent at once, under load calls that queue up behind a busy
// worker share its next round trip.
type batcher struct {
	c       *client.Client
	key     string
	max     int
	timeout time.Duration
	queue   chan *pending
	stop    chan struct{}
	wg      sync.WaitGroup
	lastUse atomic.Int64 // unix nanoseconds of the last request to keysvc

	requests, batches, batchedItems atomic.Int64
}

type pending struct {
	call client.TransportCall
	done chan outcome // buffered: a worker never blocks on it
}

type outcome struct {
	res client.TransportResult
	err error
}

func newBatcher(c *client.Client, key string, workers, max int, timeout time.Duration) *batcher {
	b := &batcher{c: c, key: key, max: max, timeout: timeout, queue: make(chan *pending, workers*max), stop: make(chan struct{})}
	b.lastUse.Store(time.Now().UnixNano())
	for range workers {
		b.wg.Add(1)
		go b.work()
	}
	return b
}

// sign queues one call and waits for its signature, ctx's end, or Close.
func (b *batcher) sign(ctx context.Context, call client.TransportCall) (client.TransportResult, error) {
	p := &pending{call: call, done: make(chan outcome, 1)}
	select {
	case b.queue <- p:
	case <-ctx.Done():
		return client.TransportResult{}, ctx.Err()
	case <-b.stop:
		return client.TransportResult{}, errClosed
	}
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
		return client.TransportResult{}, ctx.Err()
	}
}

func (b *batcher) work() {
	defer b.wg.Done()
	for {
		select {
		case <-b.stop:
			return
		case p := <-b.queue:
			batch := []*pending{p}
		drain:
			for len(batch) < b.max {
				select {
				case q := <-b.queue:
					batch = append(batch, q)
				default:
					break drain
				}
			}
			b.send(batch)
		}
	}
}

// send signs a batch with its own deadline (no caller's cancellation may
// abort the others' signatures) and answers every item.
func (b *batcher) send(batch []*pending) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	b.lastUse.Store(time.Now().UnixNano())
	b.requests.Add(1)
	if len(batch) == 1 {
		res, err := b.c.MCPTransportCall(ctx, b.key, batch[0].call)
		batch[0].done <- outcome{res, err}
		return
	}
	b.batches.Add(1)
	b.batchedItems.Add(int64(len(batch)))
	calls := make([]client.TransportCall, len(batch))
	for i, p := range batch {
		calls[i] = p.call
	}
	results, err := b.c.MCPTransportBatch(ctx, b.key, calls)
	for i, p := range batch {
		switch {
		case err != nil:
			p.done <- outcome{err: err}
		case results[i].Error != nil:
			p.done <- outcome{err: results[i].Error}
		default:
			p.done <- outcome{res: *results[i].Result}
		}
	}
}

// close stops the workers and fails every call still queued.
func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
	for {
		select {
		case p := <-b.queue:
			p.done <- outcome{err: errClosed}
		default:
			return
		}
	}
}
