package mcpserve

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit bounds the requests each client address may send to /mcp: a
// token bucket (golang.org/x/time/rate) refilled at PerSecond, holding at
// most Burst. The endpoint is anonymous, so a client is its network
// address: an IPv4 address, or an IPv6 /64 (one host usually holds a whole
// /64). Behind a reverse proxy every client shares the proxy's address;
// limit there as well. PerSecond <= 0 disables the limit.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// DefaultRateLimit is the limit when Config.RateLimit is the zero value:
// 20 requests/s per client address, bursts of 40 (an agent verifying a
// receipt makes three requests: initialize, initialized, tools/call).
var DefaultRateLimit = RateLimit{PerSecond: 20, Burst: 40}

// maxClients bounds the buckets held at once; past it, buckets idle for a
// minute are dropped, and if that frees nothing every new client shares
// one overflow bucket.
const maxClients = 8192

type clientLimits struct {
	cfg      RateLimit
	now      func() time.Time
	mu       sync.Mutex
	m        map[netip.Prefix]*clientBucket
	overflow *rate.Limiter
}

type clientBucket struct {
	lim  *rate.Limiter
	last time.Time
}

func newClientLimits(cfg RateLimit, now func() time.Time) *clientLimits {
	if cfg.Burst <= 0 {
		cfg.Burst = max(1, int(math.Ceil(cfg.PerSecond)))
	}
	return &clientLimits{cfg: cfg, now: now, m: map[netip.Prefix]*clientBucket{},
		overflow: rate.NewLimiter(rate.Limit(cfg.PerSecond), cfg.Burst)}
}

// clientKey is the address the limit applies to.
func clientKey(r *http.Request) netip.Prefix {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	addr = addr.Unmap()
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}

// allow takes one request from the client's bucket; when it is empty it
// reports how long until the next request would pass.
func (l *clientLimits) allow(r *http.Request) (bool, time.Duration) {
	if l.cfg.PerSecond <= 0 {
		return true, 0
	}
	now := l.now()
	key := clientKey(r)
	l.mu.Lock()
	b, ok := l.m[key]
	if !ok {
		if len(l.m) >= maxClients {
			for k, old := range l.m {
				if now.Sub(old.last) > time.Minute {
					delete(l.m, k)
				}
			}
		}
		if len(l.m) < maxClients {
			b = &clientBucket{lim: rate.NewLimiter(rate.Limit(l.cfg.PerSecond), l.cfg.Burst)}
			l.m[key] = b
		}
	}
	lim := l.overflow
	if b != nil {
		b.last = now
		lim = b.lim
	}
	l.mu.Unlock()
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// retryAfter renders a delay as Retry-After seconds (RFC 9110 §10.2.3), at
// least 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
