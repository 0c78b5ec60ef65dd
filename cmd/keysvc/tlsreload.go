package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader serves a listener's TLS certificate from a PEM certificate
// and key file pair and loads them again when either file changes (its
// modification time or size), so that a renewed certificate (ACME, an
// operator's rotation) takes effect without a restart (issue 15: did:web
// served directly on the issuer's domain). The files are checked at most
// once per checkEvery, on a handshake; a pair that does not load (a
// half-written renewal) keeps the previous certificate and is logged.
type certReloader struct {
	certFile, keyFile string
	checkEvery        time.Duration
	log               *slog.Logger
	now               func() time.Time

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     [2]fileStamp
	checkedAt time.Time
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// newCertReloader loads the pair once; an error here is a startup error.
func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, checkEvery: time.Second, log: log, now: time.Now}
	st, err := r.stamps()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert, r.stamp, r.checkedAt = &cert, st, r.now()
	return r, nil
}

func (r *certReloader) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{fi.ModTime(), fi.Size()}
	}
	return out, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checkedAt) < r.checkEvery {
		return r.cert, nil
	}
	r.checkedAt = now
	st, err := r.stamps()
	if err != nil || st == r.stamp {
		if err != nil {
			r.log.Warn("TLS certificate files unreadable; serving the loaded certificate", "cert", r.certFile, "err", err)
		}
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		// Not recorded as seen: retried on the next check, so the second
		// half of a renewal is picked up once written.
		r.log.Warn("TLS certificate changed but does not load; serving the previous one", "cert", r.certFile, "err", err)
		return r.cert, nil
	}
	r.cert, r.stamp = &cert, st
	r.log.Info("TLS certificate reloaded", "cert", r.certFile)
	return r.cert, nil
}

// reloadingTLS is the tls.Config of a listener whose certificate reloads.
func reloadingTLS(name, certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	r, err := newCertReloader(certFile, keyFile, log)
	if err != nil {
		return nil, fmt.Errorf("%s listener TLS certificate: %w", name, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}, nil
}
