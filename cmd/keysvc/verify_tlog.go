package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/keysvc/keysvc/tlogclient"
	"github.com/keysvc/keysvc/verifier"
)

// consistencyChecker checks tlog anchors against the newest tree head of
// the logs given with keysvc verify --log-url (verifier.Options.Consistency).
// Each log's STH is fetched once per run, each consistency proof once per
// pair of sizes.
type consistencyChecker struct {
	logs    []*tlogclient.HTTPLog
	logKeys *verifier.JWKS
	warn    func(format string, a ...any)

	mu     sync.Mutex
	newest map[*tlogclient.HTTPLog]*verifier.SignedTreeHead
	errs   map[*tlogclient.HTTPLog]error
	done   map[string]error // "log_id/tree_size/root_hash" -> result
}

func newConsistencyChecker(urls []string, logKeys *verifier.JWKS, warn func(string, ...any)) (*consistencyChecker, error) {
	c := &consistencyChecker{logKeys: logKeys, warn: warn, newest: map[*tlogclient.HTTPLog]*verifier.SignedTreeHead{},
		errs: map[*tlogclient.HTTPLog]error{}, done: map[string]error{}}
	for _, u := range urls {
		l, err := tlogclient.NewHTTPLog(u)
		if err != nil {
			return nil, fmt.Errorf("--log-url: %w", err)
		}
		c.logs = append(c.logs, l)
	}
	return c, nil
}

// sth returns a log's newest STH, verified with the trusted log keys.
func (c *consistencyChecker) sth(ctx context.Context, l *tlogclient.HTTPLog) (*verifier.SignedTreeHead, error) {
	if s, ok := c.newest[l]; ok {
		return s, nil
	}
	if err, ok := c.errs[l]; ok {
		return nil, err
	}
	jws, _, err := l.STH(ctx)
	var s *verifier.SignedTreeHead
	if err == nil {
		s, err = verifier.VerifySTH(jws, c.logKeys)
	}
	if err != nil {
		c.errs[l] = err
		c.warn("--log-url %s: newest tree head: %v", l.URL(), err)
		return nil, err
	}
	c.newest[l] = s
	return s, nil
}

// check implements verifier.Options.Consistency: the anchor's tree must be
// a prefix of the newest tree of the --log-url log with the same log_id.
func (c *consistencyChecker) check(ctx context.Context, a *verifier.TlogAnchor) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The root is part of the key: two anchors of one log and tree size
	// with different roots are a fork, and the verdict for one says
	// nothing of the other (an attack review, session 46: keyed by size
	// alone, a forked anchor after an honest one of its size reused the
	// honest one's verdict).
	key := fmt.Sprintf("%s/%d/%x", a.LogID, a.TreeSize, a.RootHash)
	if err, ok := c.done[key]; ok {
		return err
	}
	err := c.checkOnce(ctx, a)
	c.done[key] = err
	return err
}

func (c *consistencyChecker) checkOnce(ctx context.Context, a *verifier.TlogAnchor) error {
	for _, l := range c.logs {
		newer, err := c.sth(ctx, l)
		if err != nil || newer.LogID != a.LogID {
			continue
		}
		var proof [][]byte
		if newer.TreeSize > a.TreeSize {
			if proof, err = l.Consistency(ctx, a.TreeSize, newer.TreeSize); err != nil {
				c.warn("--log-url %s: consistency proof %d..%d: %v", l.URL(), a.TreeSize, newer.TreeSize, err)
				return err
			}
		}
		if err := verifier.VerifyConsistency(a, newer, proof); err != nil {
			c.warn("log %s (%s) is INCONSISTENT: the receipt's tree of %d leaves and the log's newest of %d leaves: %v",
				a.LogID, l.URL(), a.TreeSize, newer.TreeSize, err)
			return err
		}
		return nil
	}
	c.warn("no --log-url serves log %s: its proof cannot be checked for consistency", a.LogID)
	return errors.New("no --log-url for log " + a.LogID)
}
