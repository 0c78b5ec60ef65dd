package api

import (
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit bounds the requests each principal (API token) may make: a
// token bucket (golang.org/x/time/rate) refilled at PerSecond, holding at
// most Burst. A request takes one token, a batch one per item (each item is
// a signature). PerSecond <= 0 disables limiting.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// limiters holds one token bucket per principal.
type limiters struct {
	cfg RateLimit
	mu  sync.Mutex
	m   map[string]*rate.Limiter
}

func newLimiters(cfg RateLimit) *limiters {
	if cfg.Burst <= 0 {
		cfg.Burst = max(1, int(math.Ceil(cfg.PerSecond)))
	}
	return &limiters{cfg: cfg, m: map[string]*rate.Limiter{}}
}

// allow takes one request from id's bucket. When the bucket is empty it
// reports how long until a request would be allowed.
func (l *limiters) allow(id string, now time.Time) (bool, time.Duration) { return l.allowN(id, now, 1) }

// allowN takes n from id's bucket (a batch of n signatures), or nothing
// and how long until n would be allowed. n above the burst never fits:
// callers check exceeds first.
func (l *limiters) allowN(id string, now time.Time, n int) (bool, time.Duration) {
	if l.cfg.PerSecond <= 0 || n <= 0 {
		return true, 0
	}
	l.mu.Lock()
	lim, ok := l.m[id]
	if !ok {
		lim = rate.NewLimiter(rate.Limit(l.cfg.PerSecond), l.cfg.Burst)
		l.m[id] = lim
	}
	l.mu.Unlock()
	r := lim.ReserveN(now, n)
	if !r.OK() {
		return false, time.Duration(float64(n) / l.cfg.PerSecond * float64(time.Second))
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// exceeds reports whether n is more than the bucket can ever hold.
func (l *limiters) exceeds(n int) bool { return l.cfg.PerSecond > 0 && n > l.cfg.Burst }

// retryAfter renders a delay as Retry-After seconds (RFC 9110 §10.2.3), at least 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
