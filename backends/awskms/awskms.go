// Package awskms is the AWS KMS backend: every key version is its own KMS
// asymmetric key (KeyUsage SIGN_VERIFY) whose private half never leaves KMS.
//
//   - EdDSA (Ed25519) versions are KeySpec ECC_NIST_EDWARDS25519 keys signed
//     with SigningAlgorithm ED25519_SHA_512 and MessageType RAW: pure
//     Ed25519 (RFC 8032) over the JWS signing input. The pre-hash mode
//     ED25519_PH_SHA_512 is never used: its signatures do not verify as
//     EdDSA JWS. RAW messages are capped at 4096 bytes by KMS; longer ones
//     are refused before any call with backends.ErrMessageTooLarge.
//   - ES256 (P-256) versions are KeySpec ECC_NIST_P256 keys signed with
//     ECDSA_SHA_256 and MessageType DIGEST over the SHA-256 the JWS layer
//     computed, so there is no length limit. KMS returns ASN.1 DER, as
//     crypto.Signer implementations do; signer.SignCompact converts it to
//     the 64-byte JWS r||s.
//
// Each key version gets the alias alias/keysvc/<kid> (dots mapped to
// underscores) and the tags keysvc:key and keysvc:kid. Its backend
// reference is "awskms:<key ARN>?alias=<alias>&region=<region>".
//
// Every KMS call waits for a slot of a client-side semaphore (bursts queue
// rather than fail against the account's Sign quota), and is retried by the
// SDK's standard retryer with capped, jittered exponential backoff on
// throttling and transient faults. Waiting for a slot and the call itself
// are each bounded by the timeout. Errors map to the backends sentinels:
// throttling to ErrThrottled, disabled or pending-deletion keys to
// ErrKeyDisabled, everything that means "KMS cannot be used right now"
// (network, timeouts, 5xx, credentials, a key that cannot be found) to
// ErrUnavailable. See docs/adr/0008-aws-kms.md.
package awskms

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/signer"
)

// Kind is this backend's name in key history and configuration.
const Kind = "awskms"

// MaxRawMessage is the largest message KMS signs with MessageType RAW. An
// Ed25519 JWS signing input longer than this cannot be signed by KMS.
const MaxRawMessage = 4096

// Defaults for Config.
const (
	DefaultMaxConcurrency = 256
	DefaultTimeout        = 5 * time.Second
	DefaultMaxAttempts    = 4
	DefaultBaseBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff     = time.Second
	DefaultHealthTTL      = 10 * time.Second
	DefaultAliasPrefix    = "alias/keysvc/"
)

// Config configures a Backend. Only Region is required.
type Config struct {
	// Region is the AWS region holding the keys, e.g. "eu-north-1".
	Region string
	// Endpoint overrides the KMS endpoint (an emulator, a VPC endpoint),
	// e.g. "http://127.0.0.1:4599". Empty: the region's public endpoint.
	Endpoint string
	// MaxConcurrency bounds the KMS calls in flight from this process;
	// further calls wait for a slot (within Timeout). KMS's default quota
	// for ECC Sign is 1,000 requests/s per account and region.
	MaxConcurrency int
	// Timeout bounds the wait for a request slot, and separately one KMS
	// operation with its retries; Sign (which has no context) returns
	// within twice this at worst.
	Timeout time.Duration
	// MaxAttempts is the SDK retryer's attempt limit (first try included).
	MaxAttempts int
	// BaseBackoff and MaxBackoff shape the retry delay: attempt n waits a
	// uniformly random time in [0, min(MaxBackoff, BaseBackoff*2^(n-1))].
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// AliasPrefix is prepended to the sanitized kid to name each version's
	// alias; it must start with "alias/" and end with "/". Deployments
	// that share an account and region should use distinct prefixes.
	AliasPrefix string
	// HealthTTL is how long a Healthy result is reused.
	HealthTTL time.Duration
	// Credentials overrides the standard AWS credential chain (environment,
	// shared config and credentials files, SSO, web identity, ECS/EC2 roles).
	Credentials aws.CredentialsProvider
	// HTTPClient overrides the SDK's HTTP client.
	HTTPClient aws.HTTPClient
	// Logger receives warnings; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Region == "" {
		return errors.New("awskms: a region is required")
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("awskms: endpoint %q must be an absolute http(s) URL", c.Endpoint)
		}
	}
	if c.MaxConcurrency <= 0 {
		c.MaxConcurrency = DefaultMaxConcurrency
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = DefaultBaseBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.AliasPrefix == "" {
		c.AliasPrefix = DefaultAliasPrefix
	}
	if !strings.HasPrefix(c.AliasPrefix, "alias/") || strings.HasPrefix(c.AliasPrefix, "alias/aws/") ||
		!strings.HasSuffix(c.AliasPrefix, "/") || strings.Trim(c.AliasPrefix[len("alias/"):], "/") == "" ||
		sanitizeAlias(c.AliasPrefix) != c.AliasPrefix {
		return fmt.Errorf("awskms: alias prefix %q must look like alias/NAME/ (characters a-zA-Z0-9:/_-, not alias/aws/)", c.AliasPrefix)
	}
	if c.HealthTTL <= 0 {
		c.HealthTTL = DefaultHealthTTL
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Backend is the AWS KMS backend. Create it with New; safe for concurrent use.
type Backend struct {
	cfg    Config
	client *kms.Client
	sem    chan struct{}

	mu      sync.Mutex
	publics map[string]crypto.PublicKey // by key ARN; KMS public keys never change

	healthMu  sync.Mutex
	healthAt  time.Time
	healthErr error
}

// New returns a backend for cfg. It loads the AWS configuration (region,
// credential chain) but makes no KMS call: credentials are resolved on first
// use, and Healthy reports whether KMS answers.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxAttempts
				o.MaxBackoff = cfg.MaxBackoff
				o.Backoff = jitterBackoff{base: cfg.BaseBackoff, max: cfg.MaxBackoff}
			})
		}),
	}
	if cfg.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(cfg.Credentials))
	}
	hc := cfg.HTTPClient
	if hc == nil {
		// Keep as many idle connections as calls may be in flight, so a
		// burst does not open and close connections.
		hc = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConns = cfg.MaxConcurrency
			tr.MaxIdleConnsPerHost = cfg.MaxConcurrency
		})
	}
	opts = append(opts, config.WithHTTPClient(hc))
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("awskms: loading AWS configuration: %w", err)
	}
	client := kms.NewFromConfig(awsCfg, func(o *kms.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	return &Backend{
		cfg:     cfg,
		client:  client,
		sem:     make(chan struct{}, cfg.MaxConcurrency),
		publics: map[string]crypto.PublicKey{},
	}, nil
}

// Kind returns "awskms".
func (b *Backend) Kind() string { return Kind }

// Region returns the configured region.
func (b *Backend) Region() string { return b.cfg.Region }

// Client returns the underlying SDK client (tests, benchmarks, tools).
func (b *Backend) Client() *kms.Client { return b.client }

// Close releases nothing: the SDK client holds no resources that need it.
func (b *Backend) Close() error { return nil }

// jitterBackoff is "full jitter" exponential backoff: attempt n (1-based,
// the attempt that failed) waits uniformly in [0, min(max, base*2^(n-1))].
type jitterBackoff struct{ base, max time.Duration }

func (j jitterBackoff) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	d := j.max
	if attempt >= 1 && attempt < 31 {
		if e := j.base << (attempt - 1); e > 0 && e < j.max {
			d = e
		}
	}
	return time.Duration(rand.Int64N(int64(d) + 1)), nil
}

// call runs fn under the concurrency limit and maps its error. Waiting for
// a slot is bounded by Timeout (then ErrThrottled: the client-side queue
// is full), and so is the call with its retries (then ErrUnavailable).
func (b *Backend) call(ctx context.Context, op, keyID string, fn func(ctx context.Context) error) error {
	wait := time.NewTimer(b.cfg.Timeout)
	defer wait.Stop()
	select {
	case b.sem <- struct{}{}:
	case <-wait.C:
		return fmt.Errorf("%w: awskms %s %s: all %d request slots stayed busy for %s", backends.ErrThrottled, op, keyID, cap(b.sem), b.cfg.Timeout)
	case <-ctx.Done():
		return fmt.Errorf("%w: awskms %s %s: %w", backends.ErrUnavailable, op, keyID, ctx.Err())
	}
	defer func() { <-b.sem }()
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	return mapError(op, keyID, fn(ctx))
}

// Error codes, matched on smithy.APIError.ErrorCode(): the Go SDK has no
// typed errors for some (ThrottlingException, ValidationException,
// AccessDeniedException), so all are matched the same way.
var (
	disabledCodes = []string{"DisabledException", "KMSInvalidStateException"}
	throttleCodes = []string{"ThrottlingException", "Throttling", "LimitExceededException",
		"TooManyRequestsException", "RequestLimitExceeded"}
	mismatchCodes    = []string{"InvalidKeyUsageException", "IncorrectKeyException"}
	unavailableCodes = []string{"KMSInternalException", "DependencyTimeoutException", "KeyUnavailableException",
		"InternalFailure", "InternalFailureException", "ServiceUnavailable", "ServiceUnavailableException",
		"AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException",
		"ExpiredTokenException", "IncompleteSignature", "MissingAuthenticationToken", "InvalidClientTokenId",
		"NotFoundException", "InvalidArnException", "CustomKeyStoreInvalidStateException"}
)

// mapError maps an SDK error to the backends sentinels; the KMS error code
// and message stay in the text.
//
// NotFoundException maps to ErrUnavailable, not ErrKeyMismatch: a key that
// cannot be found is most often a configuration error (wrong region,
// account or endpoint) and otherwise a key deleted out of band; either way
// KMS cannot sign for the version, and nothing suggests the material was
// swapped (a swapped but existing key is caught by the public key check).
func mapError(op, keyID string, err error) error {
	if err == nil {
		return nil
	}
	where := "awskms " + op
	if keyID != "" {
		where += " " + keyID
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code, msg := ae.ErrorCode(), ae.ErrorMessage()
		detail := fmt.Sprintf("%s: %s: %s", where, code, msg)
		switch {
		case slices.Contains(throttleCodes, code):
			return fmt.Errorf("%w: %s (after retries)", backends.ErrThrottled, detail)
		case slices.Contains(disabledCodes, code):
			return fmt.Errorf("%w: %s", backends.ErrKeyDisabled, detail)
		case slices.Contains(mismatchCodes, code):
			return fmt.Errorf("%w: %s", backends.ErrKeyMismatch, detail)
		case code == "NotFoundException":
			return fmt.Errorf("%w: %s (deleted, or another region, account or endpoint)", backends.ErrUnavailable, detail)
		case slices.Contains(unavailableCodes, code) || ae.ErrorFault() == smithy.FaultServer:
			return fmt.Errorf("%w: %s", backends.ErrUnavailable, detail)
		}
		// A client error KMS did not expect from a well-formed request
		// (ValidationException, ...): a bug, not an outage.
		return fmt.Errorf("%s: %w", where, err)
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusTooManyRequests {
		return fmt.Errorf("%w: %s: %w", backends.ErrThrottled, where, err)
	}
	// Network errors, timeouts, 5xx without a modeled error, cancellation,
	// credentials that cannot be resolved.
	return fmt.Errorf("%w: %s: %w", backends.ErrUnavailable, where, err)
}

// keySpecFor returns the KMS key spec and signing algorithm of a JWS alg.
func keySpecFor(alg string) (types.KeySpec, types.SigningAlgorithmSpec, error) {
	switch alg {
	case signer.AlgEdDSA:
		return types.KeySpecEccNistEdwards25519, types.SigningAlgorithmSpecEd25519Sha512, nil
	case signer.AlgES256:
		return types.KeySpecEccNistP256, types.SigningAlgorithmSpecEcdsaSha256, nil
	}
	return "", "", fmt.Errorf("%w: %q (awskms signs EdDSA and ES256)", backends.ErrUnsupportedAlgorithm, alg)
}

// algForPublic returns the JWS alg of a public key.
func algForPublic(pub crypto.PublicKey) (string, error) {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		if len(k) == ed25519.PublicKeySize {
			return signer.AlgEdDSA, nil
		}
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return signer.AlgES256, nil
		}
	}
	return "", fmt.Errorf("%w: public key %T", backends.ErrUnsupportedAlgorithm, pub)
}

// PublicKeyFromDER parses a KMS GetPublicKey result (DER
// SubjectPublicKeyInfo, RFC 5280) into ed25519.PublicKey or a P-256
// *ecdsa.PublicKey; other key types are refused.
func PublicKeyFromDER(der []byte) (crypto.PublicKey, error) {
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("awskms: public key is not a DER SubjectPublicKeyInfo: %w", err)
	}
	if _, err := algForPublic(pub); err != nil {
		return nil, err
	}
	return pub, nil
}

// AliasFor returns the alias of key version kid under prefix: characters
// outside [a-zA-Z0-9:/_-] become '_' ('.' in DNS names) or "_xHH".
func AliasFor(prefix, kid string) string { return prefix + sanitizeAlias(kid) }

func sanitizeAlias(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == ':', c == '/', c == '_', c == '-':
			sb.WriteByte(c)
		case c == '.':
			sb.WriteByte('_')
		default:
			fmt.Fprintf(&sb, "_x%02X", c)
		}
	}
	return sb.String()
}

// Ref is a parsed backend reference.
type Ref struct {
	KeyID  string // the key ARN (a bare key id is accepted too)
	Alias  string // e.g. "alias/keysvc/villaakerlyckan_se-2026-05-18-01"; may be empty
	Region string // may be empty (then the backend's region)
}

// String formats r as "awskms:<key ARN>?alias=...&region=...".
func (r Ref) String() string {
	q := url.Values{}
	if r.Alias != "" {
		q.Set("alias", r.Alias)
	}
	if r.Region != "" {
		q.Set("region", r.Region)
	}
	s := Kind + ":" + r.KeyID
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// ParseRef parses a backend reference written by CreateKey.
func ParseRef(ref string) (Ref, error) {
	rest, ok := strings.CutPrefix(ref, Kind+":")
	if !ok {
		return Ref{}, fmt.Errorf("awskms: reference %q does not start with %q", ref, Kind+":")
	}
	id, query, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(query)
	if err != nil || id == "" {
		return Ref{}, fmt.Errorf("awskms: malformed reference %q", ref)
	}
	r := Ref{KeyID: id, Alias: q.Get("alias"), Region: q.Get("region")}
	if arn, ok := strings.CutPrefix(id, "arn:"); ok {
		// arn:PARTITION:kms:REGION:ACCOUNT:key/ID
		parts := strings.SplitN(arn, ":", 5)
		if len(parts) != 5 || parts[1] != "kms" || !strings.HasPrefix(parts[4], "key/") {
			return Ref{}, fmt.Errorf("awskms: reference %q does not name a KMS key ARN", ref)
		}
		if r.Region == "" {
			r.Region = parts[2]
		} else if r.Region != parts[2] {
			return Ref{}, fmt.Errorf("awskms: reference %q: region %s differs from the ARN's %s", ref, r.Region, parts[2])
		}
	}
	return r, nil
}

func (b *Backend) checkRegion(r Ref) error {
	if r.Region != "" && r.Region != b.cfg.Region {
		return fmt.Errorf("%w: awskms: key %s is in region %s but this backend is configured for %s", backends.ErrUnavailable, r.KeyID, r.Region, b.cfg.Region)
	}
	return nil
}

// CreateKey creates one KMS key for the key version req.KID (tagged
// keysvc:key and keysvc:kid), its alias, and reads its public key. When
// the alias or the public key fails, the new KMS key is scheduled for
// deletion (7 days) so no orphan is left behind.
func (b *Backend) CreateKey(ctx context.Context, req backends.CreateRequest) (backends.Handle, error) {
	spec, _, err := keySpecFor(req.Algorithm)
	if err != nil {
		return backends.Handle{}, err
	}
	alias := AliasFor(b.cfg.AliasPrefix, req.KID)
	if len(alias) > 256 {
		return backends.Handle{}, fmt.Errorf("awskms: alias %s is longer than KMS allows (256)", alias)
	}
	var out *kms.CreateKeyOutput
	err = b.call(ctx, "CreateKey", "", func(ctx context.Context) (err error) {
		out, err = b.client.CreateKey(ctx, &kms.CreateKeyInput{
			KeySpec:     spec,
			KeyUsage:    types.KeyUsageTypeSignVerify,
			Description: aws.String(fmt.Sprintf("keysvc key version %s of key %s", req.KID, req.KeyName)),
			Tags: []types.Tag{
				{TagKey: aws.String("keysvc:key"), TagValue: aws.String(req.KeyName)},
				{TagKey: aws.String("keysvc:kid"), TagValue: aws.String(req.KID)},
			},
		})
		return err
	})
	if err != nil {
		return backends.Handle{}, err
	}
	if out.KeyMetadata == nil || out.KeyMetadata.Arn == nil {
		return backends.Handle{}, fmt.Errorf("%w: awskms CreateKey: response without a key ARN", backends.ErrUnavailable)
	}
	arn := *out.KeyMetadata.Arn
	cleanup := func(cause error) error {
		// Best effort, on a fresh context: the caller's may be the one that ended.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.Timeout)
		defer cancel()
		if _, derr := b.scheduleDeletion(cctx, arn, 7); derr != nil {
			b.cfg.Logger.Warn("awskms: could not schedule deletion of an orphaned KMS key; delete it by hand", "key_arn", arn, "kid", req.KID, "err", derr)
		}
		return cause
	}
	err = b.call(ctx, "CreateAlias", arn, func(ctx context.Context) error {
		_, err := b.client.CreateAlias(ctx, &kms.CreateAliasInput{AliasName: aws.String(alias), TargetKeyId: aws.String(arn)})
		return err
	})
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "AlreadyExistsException" {
			err = fmt.Errorf("%w (another keysvc deployment in this account and region may use the same issuer: give it its own --awskms-alias-prefix)", err)
		}
		return backends.Handle{}, cleanup(err)
	}
	pub, err := b.publicKey(ctx, arn)
	if err != nil {
		return backends.Handle{}, cleanup(err)
	}
	if got, _ := algForPublic(pub); got != req.Algorithm {
		return backends.Handle{}, cleanup(fmt.Errorf("%w: awskms: KMS returned a %s public key for a %s key", backends.ErrKeyMismatch, got, req.Algorithm))
	}
	ref := Ref{KeyID: arn, Alias: alias, Region: b.cfg.Region}
	return backends.Handle{Ref: ref.String(), Public: pub}, nil
}

// publicKey returns the key's public key, from cache or GetPublicKey.
func (b *Backend) publicKey(ctx context.Context, keyID string) (crypto.PublicKey, error) {
	b.mu.Lock()
	pub, ok := b.publics[keyID]
	b.mu.Unlock()
	if ok {
		return pub, nil
	}
	var out *kms.GetPublicKeyOutput
	err := b.call(ctx, "GetPublicKey", keyID, func(ctx context.Context) (err error) {
		out, err = b.client.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(keyID)})
		return err
	})
	if err != nil {
		return nil, err
	}
	pub, err = PublicKeyFromDER(out.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", backends.ErrKeyMismatch, keyID, err)
	}
	b.mu.Lock()
	b.publics[keyID] = pub
	b.mu.Unlock()
	return pub, nil
}

// PublicKey returns the public key of the KMS key named by ref (cached
// after the first GetPublicKey).
func (b *Backend) PublicKey(ctx context.Context, ref string) (crypto.PublicKey, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if err := b.checkRegion(r); err != nil {
		return nil, err
	}
	return b.publicKey(ctx, r.KeyID)
}

// Signer loads the key version named by h: DescribeKey must show an
// enabled SIGN_VERIFY key of the spec h.Public implies, offering the
// signing algorithm keysvc uses (else ErrKeyDisabled / ErrKeyMismatch),
// and its public key must equal h.Public (else ErrKeyMismatch).
func (b *Backend) Signer(ctx context.Context, kid string, h backends.Handle) (crypto.Signer, error) {
	r, err := ParseRef(h.Ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", backends.ErrKeyMismatch, kid, err)
	}
	if err := b.checkRegion(r); err != nil {
		return nil, err
	}
	alg, err := algForPublic(h.Public)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kid, err)
	}
	spec, sigAlg, _ := keySpecFor(alg)
	var out *kms.DescribeKeyOutput
	err = b.call(ctx, "DescribeKey", r.KeyID, func(ctx context.Context) (err error) {
		out, err = b.client.DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String(r.KeyID)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kid, err)
	}
	md := out.KeyMetadata
	switch {
	case md == nil:
		return nil, fmt.Errorf("%w: %s: DescribeKey returned no metadata", backends.ErrUnavailable, kid)
	case md.KeyUsage != types.KeyUsageTypeSignVerify:
		return nil, fmt.Errorf("%w: %s: KMS key %s has KeyUsage %s, want %s", backends.ErrKeyMismatch, kid, r.KeyID, md.KeyUsage, types.KeyUsageTypeSignVerify)
	case md.KeySpec != spec:
		return nil, fmt.Errorf("%w: %s: KMS key %s has KeySpec %s, want %s for %s", backends.ErrKeyMismatch, kid, r.KeyID, md.KeySpec, spec, alg)
	case len(md.SigningAlgorithms) > 0 && !slices.Contains(md.SigningAlgorithms, sigAlg):
		return nil, fmt.Errorf("%w: %s: KMS key %s does not offer %s", backends.ErrKeyMismatch, kid, r.KeyID, sigAlg)
	case !md.Enabled || md.KeyState != types.KeyStateEnabled:
		return nil, fmt.Errorf("%w: %s: KMS key %s is %s", backends.ErrKeyDisabled, kid, r.KeyID, md.KeyState)
	}
	pub, err := b.publicKey(ctx, r.KeyID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kid, err)
	}
	if !publicEqual(pub, h.Public) {
		return nil, fmt.Errorf("%w: %s: KMS key %s holds another public key than the one recorded for this version", backends.ErrKeyMismatch, kid, r.KeyID)
	}
	return &kmsSigner{b: b, kid: kid, keyID: r.KeyID, alg: alg, sigAlg: sigAlg, pub: pub}, nil
}

func publicEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(equaler)
	return ok && b != nil && ea.Equal(b)
}

// kmsSigner is a crypto.Signer whose private half is a KMS key.
type kmsSigner struct {
	b      *Backend
	kid    string
	keyID  string // key ARN
	alg    string // signer.AlgEdDSA or signer.AlgES256
	sigAlg types.SigningAlgorithmSpec
	pub    crypto.PublicKey
}

func (s *kmsSigner) Public() crypto.PublicKey { return s.pub }

// Sign signs with KMS. EdDSA: msg is the message itself and opts.HashFunc()
// must be 0 (pure Ed25519; Ed25519ph and Ed25519ctx are refused); at most
// MaxRawMessage bytes. ES256: msg is a SHA-256 digest and opts.HashFunc()
// crypto.SHA256; the result is ASN.1 DER like ecdsa.PrivateKey.Sign's.
// Every signature is verified against the public key before it is
// returned. The operation is bounded by the backend's Timeout.
func (s *kmsSigner) Sign(_ io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	var msgType types.MessageType
	switch s.alg {
	case signer.AlgEdDSA:
		if opts != nil && opts.HashFunc() != crypto.Hash(0) {
			return nil, fmt.Errorf("awskms: %s: Ed25519 keys sign pure Ed25519 only (no pre-hash): got hash %v", s.kid, opts.HashFunc())
		}
		if o, ok := opts.(*ed25519.Options); ok && o.Context != "" {
			return nil, fmt.Errorf("awskms: %s: Ed25519ctx is not supported", s.kid)
		}
		if len(msg) > MaxRawMessage {
			return nil, fmt.Errorf("%w: awskms: %s: %d bytes to sign; KMS signs Ed25519 messages of at most %d bytes (RAW, no pre-hash mode is usable for JWS)", backends.ErrMessageTooLarge, s.kid, len(msg), MaxRawMessage)
		}
		if len(msg) == 0 {
			return nil, fmt.Errorf("awskms: %s: KMS cannot sign an empty message", s.kid)
		}
		msgType = types.MessageTypeRaw
	case signer.AlgES256:
		if opts == nil || opts.HashFunc() != crypto.SHA256 || len(msg) != 32 {
			return nil, fmt.Errorf("awskms: %s: ES256 keys sign a 32-byte SHA-256 digest with crypto.SHA256", s.kid)
		}
		msgType = types.MessageTypeDigest
	}
	var out *kms.SignOutput
	err := s.b.call(context.Background(), "Sign", s.keyID, func(ctx context.Context) (err error) {
		out, err = s.b.client.Sign(ctx, &kms.SignInput{
			KeyId:            aws.String(s.keyID),
			Message:          msg,
			MessageType:      msgType,
			SigningAlgorithm: s.sigAlg,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.kid, err)
	}
	sig := out.Signature
	// A remote signer's output is checked before anyone relies on it: a
	// wrong key, a wrong mode (Ed25519ph) or a corrupted response fails here.
	ok := false
	switch k := s.pub.(type) {
	case ed25519.PublicKey:
		ok = len(sig) == ed25519.SignatureSize && ed25519.Verify(k, msg, sig)
	case *ecdsa.PublicKey:
		ok = ecdsa.VerifyASN1(k, msg, sig)
	}
	if !ok {
		return nil, fmt.Errorf("%w: awskms: %s: KMS returned a signature that does not verify under the recorded public key", backends.ErrKeyMismatch, s.kid)
	}
	return sig, nil
}

// Healthy reports whether KMS answers an authenticated call (ListKeys with
// Limit 1) within the context's deadline and the backend's timeout. The
// result is reused for HealthTTL so readiness probes do not add load.
// A disabled key is not a backend failure: it is reported per request as
// key_disabled (see docs/adr/0008-aws-kms.md).
func (b *Backend) Healthy(ctx context.Context) error {
	b.healthMu.Lock()
	defer b.healthMu.Unlock()
	if !b.healthAt.IsZero() && time.Since(b.healthAt) < b.cfg.HealthTTL {
		return b.healthErr
	}
	// The probe does not queue for a request slot: a burst that keeps every
	// slot busy means KMS is working, not that it is down.
	cctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	_, err := b.client.ListKeys(cctx, &kms.ListKeysInput{Limit: aws.Int32(1)})
	err = mapError("ListKeys", "", err)
	if errors.Is(err, backends.ErrThrottled) {
		// KMS answered: it is reachable and our credentials work.
		err = nil
	}
	b.healthAt, b.healthErr = time.Now(), err
	return err
}

// DisableKey disables the KMS key named by ref: KMS refuses to sign with
// it from then on. Reversible with EnableKey (in AWS).
func (b *Backend) DisableKey(ctx context.Context, ref string) error {
	r, err := ParseRef(ref)
	if err != nil {
		return err
	}
	if err := b.checkRegion(r); err != nil {
		return err
	}
	return b.call(ctx, "DisableKey", r.KeyID, func(ctx context.Context) error {
		_, err := b.client.DisableKey(ctx, &kms.DisableKeyInput{KeyId: aws.String(r.KeyID)})
		return err
	})
}

// ScheduleKeyDeletion schedules destruction of the KMS key named by ref
// after pendingWindowDays (7 to 30, KMS's limits) and returns the deletion
// date. Until then it can be cancelled in AWS (CancelKeyDeletion). The
// public key stays published from key history, so receipts signed with the
// version remain verifiable.
func (b *Backend) ScheduleKeyDeletion(ctx context.Context, ref string, pendingWindowDays int) (time.Time, error) {
	if pendingWindowDays < 7 || pendingWindowDays > 30 {
		return time.Time{}, fmt.Errorf("awskms: the pending window must be 7 to 30 days, got %d", pendingWindowDays)
	}
	r, err := ParseRef(ref)
	if err != nil {
		return time.Time{}, err
	}
	if err := b.checkRegion(r); err != nil {
		return time.Time{}, err
	}
	return b.scheduleDeletion(ctx, r.KeyID, pendingWindowDays)
}

func (b *Backend) scheduleDeletion(ctx context.Context, keyID string, days int) (time.Time, error) {
	var out *kms.ScheduleKeyDeletionOutput
	err := b.call(ctx, "ScheduleKeyDeletion", keyID, func(ctx context.Context) (err error) {
		out, err = b.client.ScheduleKeyDeletion(ctx, &kms.ScheduleKeyDeletionInput{KeyId: aws.String(keyID), PendingWindowInDays: aws.Int32(int32(days))})
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	if out.DeletionDate != nil {
		return out.DeletionDate.UTC(), nil
	}
	return time.Now().UTC().AddDate(0, 0, days), nil
}

// DestroyKey implements backends.Destroyer: it schedules deletion of the
// KMS key of key version kid (ScheduleKeyDeletion) after
// opt.PendingWindowDays (7 to 30; 0 means 30) and returns the deletion
// date. KMS disables the key at once and destroys it on that date; until
// then an AWS administrator can cancel (aws kms cancel-key-deletion).
//
// It first checks, with DescribeKey, that the KMS key is the version's: a
// SIGN_VERIFY key whose public key equals h.Public (else ErrKeyMismatch,
// nothing scheduled; a disabled key, whose public key KMS does not serve,
// is scheduled on the strength of its ARN in key history). It is idempotent: a key already pending deletion is
// success with AlreadyDestroyed set and the deletion date KMS reports. A
// key KMS cannot find is an error wrapping ErrUnavailable (it may be
// another account or endpoint), never taken as destroyed.
func (b *Backend) DestroyKey(ctx context.Context, kid string, h backends.Handle, opt backends.DestroyOptions) (backends.DestroyResult, error) {
	days := opt.PendingWindowDays
	if days == 0 {
		days = backends.DefaultPendingWindowDays
	}
	if days < backends.MinPendingWindowDays || days > backends.MaxPendingWindowDays {
		return backends.DestroyResult{}, fmt.Errorf("awskms: %s: the pending window must be %d to %d days, got %d",
			kid, backends.MinPendingWindowDays, backends.MaxPendingWindowDays, days)
	}
	r, err := ParseRef(h.Ref)
	if err != nil {
		return backends.DestroyResult{}, fmt.Errorf("%w: %s: %w", backends.ErrKeyMismatch, kid, err)
	}
	if err := b.checkRegion(r); err != nil {
		return backends.DestroyResult{}, err
	}
	md, err := b.describe(ctx, r.KeyID)
	if err != nil {
		return backends.DestroyResult{}, fmt.Errorf("%s: %w", kid, err)
	}
	if md.KeyUsage != types.KeyUsageTypeSignVerify {
		return backends.DestroyResult{}, fmt.Errorf("%w: %s: KMS key %s has KeyUsage %s; refusing to schedule its deletion", backends.ErrKeyMismatch, kid, r.KeyID, md.KeyUsage)
	}
	if pending, res := pendingDeletion(md); pending {
		return res, nil
	}
	note := fmt.Sprintf("KMS key %s scheduled for deletion (%d days)", r.KeyID, days)
	if h.Public != nil {
		// KMS refuses GetPublicKey for a disabled key (keysvc awskms
		// disable); the key ARN from key history still names it.
		pub, err := b.publicKey(ctx, r.KeyID)
		switch {
		case errors.Is(err, backends.ErrKeyDisabled):
			note += "; the key was disabled, its public key not compared"
		case err != nil:
			return backends.DestroyResult{}, fmt.Errorf("%s: %w", kid, err)
		case !publicEqual(pub, h.Public):
			return backends.DestroyResult{}, fmt.Errorf("%w: %s: KMS key %s holds another public key than the one recorded for this version; refusing to schedule its deletion", backends.ErrKeyMismatch, kid, r.KeyID)
		}
	}
	at, err := b.scheduleDeletion(ctx, r.KeyID, days)
	if errors.Is(err, backends.ErrKeyDisabled) {
		// KMSInvalidStateException: perhaps scheduled meanwhile (another
		// replica, an officer in the AWS console).
		if md2, derr := b.describe(ctx, r.KeyID); derr == nil {
			if pending, res := pendingDeletion(md2); pending {
				return res, nil
			}
		}
	}
	if err != nil {
		return backends.DestroyResult{}, fmt.Errorf("%s: %w", kid, err)
	}
	return backends.DestroyResult{DeletionDate: &at, Note: note}, nil
}

// describe returns DescribeKey's metadata of keyID.
func (b *Backend) describe(ctx context.Context, keyID string) (*types.KeyMetadata, error) {
	var out *kms.DescribeKeyOutput
	err := b.call(ctx, "DescribeKey", keyID, func(ctx context.Context) (err error) {
		out, err = b.client.DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String(keyID)})
		return err
	})
	if err != nil {
		return nil, err
	}
	if out.KeyMetadata == nil {
		return nil, fmt.Errorf("%w: awskms DescribeKey %s: no metadata", backends.ErrUnavailable, keyID)
	}
	return out.KeyMetadata, nil
}

// pendingDeletion reports whether md is a key already pending deletion, and
// the idempotent DestroyKey result for it.
func pendingDeletion(md *types.KeyMetadata) (bool, backends.DestroyResult) {
	if md.KeyState != types.KeyStatePendingDeletion {
		return false, backends.DestroyResult{}
	}
	res := backends.DestroyResult{AlreadyDestroyed: true, Note: "KMS key already pending deletion"}
	if md.DeletionDate != nil {
		at := md.DeletionDate.UTC()
		res.DeletionDate = &at
	}
	return true, res
}

var (
	_ backends.Backend       = (*Backend)(nil)
	_ backends.HealthChecker = (*Backend)(nil)
	_ backends.Destroyer     = (*Backend)(nil)
)
