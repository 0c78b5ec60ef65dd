package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// Scopes a token can carry.
const (
	ScopeSignAll     = "sign:*"       // sign with every key; "sign:<key>" for one key; "sign:<key>:<layer>" for one layer of it
	ScopeAdminKeys   = "admin:keys"   // create keys, rotate
	ScopeAdminRevoke = "admin:revoke" // revoke key versions
	ScopeAuditRead   = "audit:read"   // read the audit trail
)

// TokenPrefix starts every keysvc API token, so leaked tokens are easy to
// recognize by secret scanners.
const TokenPrefix = "ksv_"

// Principal is an authenticated caller: the person (or node) Name, through
// one credential, TokenID (an API token id, or "cert:<common name>" for a
// client certificate).
type Principal struct {
	TokenID string
	Name    string
	Scopes  []string
}

// ID is the principal's stable id (rotation.PrincipalID of its name): the
// same for every credential of the person, which is what the two-person
// rule compares.
func (p Principal) ID() string { return rotation.PrincipalID(p.Name) }

// principalNameRE is what a new principal name (an API token's name, a
// client-certificate principal) must match: lower-case ASCII letters,
// digits and . _ @ -, starting with a letter or digit, at most 64 bytes. No
// case or look-alike characters can make one person two principals.
var principalNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._@-]{0,63}$`)

// ValidPrincipalName reports whether name may name a new principal (see
// principalNameRE).
func ValidPrincipalName(name string) bool { return principalNameRE.MatchString(name) }

// Allows reports whether p holds scope. Scopes are hierarchical with ":"
// as separator: "sign:*" covers every "sign:…", and "sign:villa" covers
// "sign:villa:transport" (but not "sign:villa-2").
func (p Principal) Allows(scope string) bool {
	for _, s := range p.Scopes {
		if s == scope || (s == ScopeSignAll && strings.HasPrefix(scope, "sign:")) || strings.HasPrefix(scope, s+":") {
			return true
		}
	}
	return false
}

// Signing layers a token can be limited to ("sign:<key>:<layer>").
const (
	LayerJWS       = "jws"       // POST /v1/keys/{name}/sign and sign:batch (offers, any payload)
	LayerTransport = "transport" // POST /v1/keys/{name}/mcp-transport and mcp-transport:batch
	LayerDetached  = "detached"  // POST /v1/keys/{name}/sign:detached (raw signatures over RFC 8785 objects, ADR 0028)
)

// NewToken returns a fresh random token (shown once) and the record to store:
// only its SHA-256 is kept. ttl <= 0 means no expiry.
func NewToken(name string, scopes []string, ttl time.Duration) (secret string, rec store.APIToken, err error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", store.APIToken{}, err
	}
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	now := store.Now()
	rec = store.APIToken{ID: hex.EncodeToString(sum[:6]), Name: name, SHA256: sum[:], Scopes: scopes, CreatedAt: now}
	if ttl > 0 {
		exp := now.Add(ttl)
		rec.ExpiresAt = &exp
	}
	return secret, rec, nil
}

// TokenChecker vets the API tokens as stored before the Authenticator
// accepts them (anchor.Anchor; ADR 0053): it returns the tokens of list it
// backs and, by token id, why each other one is refused
// (rotation.ErrHistoryNotBacked: altered or inserted in the database;
// rotation.ErrHistoryUnconfirmed: it could not be checked now).
type TokenChecker interface {
	CheckTokens(ctx context.Context, list []store.APIToken) (backed []store.APIToken, refused map[string]error)
}

// Authenticator checks bearer tokens against an in-memory copy of the
// token table (hashes only), refreshed from the store periodically so the
// request path never queries the database.
type Authenticator struct {
	store   store.Store
	log     *slog.Logger
	checker TokenChecker
	tokens  atomic.Pointer[map[[32]byte]store.APIToken]
	touchMu sync.Mutex
	touched map[string]time.Time
	// refused: the tokens the checker refused at the last refresh, and
	// why (logged when the reason changes); unconfirmed counts those it
	// could not check.
	refusedMu   sync.Mutex
	refused     map[string]string
	unconfirmed int
}

// NewAuthenticator returns an Authenticator; call Refresh before use. A nil
// log means slog.Default().
func NewAuthenticator(s store.Store, log *slog.Logger) *Authenticator {
	if log == nil {
		log = slog.Default()
	}
	a := &Authenticator{store: s, log: log, touched: map[string]time.Time{}}
	empty := map[[32]byte]store.APIToken{}
	a.tokens.Store(&empty)
	return a
}

// SetTokenChecker makes every Refresh keep only the tokens c backs; call
// it before the first Refresh.
func (a *Authenticator) SetTokenChecker(c TokenChecker) { a.checker = c }

// Refresh reloads token hashes from the store (through the TokenChecker,
// when one is set). A token the checker refuses is not accepted until a
// refresh finds it backed; each refusal is logged once per reason.
func (a *Authenticator) Refresh(ctx context.Context) error {
	list, err := a.store.ListTokens(ctx)
	if err != nil {
		return err
	}
	if a.checker != nil {
		var refused map[string]error
		list, refused = a.checker.CheckTokens(ctx, list)
		a.noteRefused(refused)
	}
	m := make(map[[32]byte]store.APIToken, len(list))
	for _, t := range list {
		if len(t.SHA256) != sha256.Size {
			continue
		}
		m[[32]byte(t.SHA256)] = t
	}
	a.tokens.Store(&m)
	return nil
}

// noteRefused logs each refusal whose reason is new, and keeps the count
// of unconfirmed ones.
func (a *Authenticator) noteRefused(refused map[string]error) {
	a.refusedMu.Lock()
	defer a.refusedMu.Unlock()
	next := make(map[string]string, len(refused))
	unconfirmed := 0
	for id, err := range refused {
		// An unconfirmed token is logged once until it is confirmed or
		// refused, whatever each failed look-up said.
		next[id] = err.Error()
		unsure := errors.Is(err, rotation.ErrHistoryUnconfirmed)
		if unsure {
			next[id] = "unconfirmed"
			unconfirmed++
		}
		switch {
		case a.refused[id] == next[id]:
		case unsure:
			a.log.Warn("API token not accepted until a transparency log confirms it", "token_id", id, "err", err)
		default:
			a.log.Error("API token refused: as stored it is not what the transparency log backs", "token_id", id, "err", err)
		}
	}
	for id := range a.refused {
		if _, still := next[id]; !still {
			a.log.Info("API token no longer refused (backed now, or no longer stored as usable)", "token_id", id)
		}
	}
	a.refused, a.unconfirmed = next, unconfirmed
}

// Unconfirmed returns how many tokens the last refresh left out because
// the TokenChecker could not check them (no transparency log answered).
func (a *Authenticator) Unconfirmed() int {
	a.refusedMu.Lock()
	defer a.refusedMu.Unlock()
	return a.unconfirmed
}

// Usable returns how many tokens are neither revoked nor expired.
func (a *Authenticator) Usable(now time.Time) int {
	n := 0
	for _, t := range *a.tokens.Load() {
		if t.RevokedAt == nil && (t.ExpiresAt == nil || now.Before(*t.ExpiresAt)) {
			n++
		}
	}
	return n
}

// Run refreshes every interval until ctx ends.
func (a *Authenticator) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := a.Refresh(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("token refresh failed", "err", err)
			}
		}
	}
}

// authResult classifies a bearer token.
type authResult int

const (
	authOK authResult = iota
	authMissing
	authInvalid
)

// Authenticate resolves the Authorization header value.
func (a *Authenticator) Authenticate(header string, now time.Time) (Principal, authResult) {
	scheme, tok, ok := strings.Cut(header, " ")
	if header == "" {
		return Principal{}, authMissing
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return Principal{}, authInvalid
	}
	// The token's bytes in a stack buffer (a token is 47 bytes), not a
	// heap copy per request; a longer value still hashes, from the heap.
	var buf [128]byte
	sum := sha256.Sum256(append(buf[:0], strings.TrimSpace(tok)...))
	rec, found := (*a.tokens.Load())[sum]
	// The map is keyed by the hash; the constant-time comparison makes the
	// final check independent of how many bytes match.
	if !found || subtle.ConstantTimeCompare(rec.SHA256, sum[:]) != 1 {
		return Principal{}, authInvalid
	}
	if rec.RevokedAt != nil || (rec.ExpiresAt != nil && !now.Before(*rec.ExpiresAt)) {
		return Principal{}, authInvalid
	}
	a.touch(rec.ID, now)
	return Principal{TokenID: rec.ID, Name: rec.Name, Scopes: rec.Scopes}, authOK
}

// touch records last use at most once a minute per token, off the request path.
func (a *Authenticator) touch(id string, now time.Time) {
	a.touchMu.Lock()
	last, seen := a.touched[id]
	if seen && now.Sub(last) < time.Minute {
		a.touchMu.Unlock()
		return
	}
	a.touched[id] = now
	a.touchMu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.store.TouchToken(ctx, id, now.UTC().Truncate(store.Precision)); err != nil {
			a.log.Debug("token last-used update failed", "token_id", id, "err", err)
		}
	}()
}

// FormatScopes renders scopes for messages.
func FormatScopes(s []string) string { return fmt.Sprintf("%q", s) }

// TokenHash returns the SHA-256 under which a token secret is stored.
func TokenHash(secret string) [32]byte { return sha256.Sum256([]byte(strings.TrimSpace(secret))) }
