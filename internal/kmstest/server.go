// Package kmstest is test-only AWS KMS machinery: Server, a small KMS that
// speaks the real JSON 1.1 protocol (POST /, X-Amz-Target:
// TrentService.<Operation>, Content-Type application/x-amz-json-1.1,
// base64 blobs, errors as {"__type","message"}) on 127.0.0.1 so the real
// SDK client can drive it, and StartLocalKMS, which runs the third-party
// emulator github.com/nsmithuk/local-kms (P-256 only) for tests.
//
// Server exists because no installable emulator signs Ed25519. It enforces
// the rules of the real API that a backend can trip over: Ed25519 keys
// (ECC_NIST_EDWARDS25519) sign with ED25519_SHA_512 only over RAW messages
// and ED25519_PH_SHA_512 only over a 64-byte DIGEST (Ed25519ph of that
// digest, as AWS does), RAW messages are 1 to 4096 bytes, P-256 keys
// (ECC_NIST_P256) sign with ECDSA_SHA_256 only and return DER, disabled
// keys answer DisabledException and keys pending deletion
// KMSInvalidStateException. Faults (throttling, 5xx, latency) can be
// injected, and keys can be seeded: with a fixed private key, or as a
// replay of captured real AWS responses (public key DER and signatures).
package kmstest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Key specs, usages, algorithms and message types (the KMS API's strings).
const (
	SpecEd25519 = "ECC_NIST_EDWARDS25519"
	SpecP256    = "ECC_NIST_P256"

	AlgEd25519     = "ED25519_SHA_512"
	AlgEd25519ph   = "ED25519_PH_SHA_512"
	AlgECDSASHA256 = "ECDSA_SHA_256"

	MessageRaw    = "RAW"
	MessageDigest = "DIGEST"
)

// MaxMessage is the longest Sign message KMS accepts.
const MaxMessage = 4096

// Operations the server implements.
var Operations = []string{"CreateKey", "GetPublicKey", "Sign", "DescribeKey", "CreateAlias",
	"TagResource", "DisableKey", "EnableKey", "ScheduleKeyDeletion", "ListKeys"}

// Request is one request the server received (for assertions).
type Request struct {
	Op               string
	KeyID            string
	SigningAlgorithm string
	MessageType      string
	MessageLen       int
}

// Config configures a Server.
type Config struct {
	Region    string // default "us-east-1"
	AccountID string // default "111122223333"
	// Credentials, when set, makes the server verify each request's AWS
	// Signature Version 4 against them (UnrecognizedClientException for an
	// unknown access key, InvalidSignatureException for a bad signature).
	// When nil, only the presence of a SigV4 Authorization header for
	// service kms in Region is checked.
	Credentials *aws.Credentials
}

// Server is a test KMS. Start it with Start; it stops at Close.
type Server struct {
	cfg Config
	ln  net.Listener
	srv *http.Server
	// URL is the endpoint, "http://127.0.0.1:PORT".
	URL string

	mu       sync.Mutex
	keys     map[string]*key // by key id
	order    []string        // key ids in creation order
	aliases  map[string]string
	requests []Request
	faults   []*fault
	latency  time.Duration

	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	signs       atomic.Int64
}

type key struct {
	id, arn  string
	spec     string
	enabled  bool
	state    string // Enabled, Disabled, PendingDeletion
	created  time.Time
	deletion time.Time
	tags     map[string]string
	priv     crypto.Signer // nil for a replay key
	pubDER   []byte
	// replay: canned signatures by alg|type|hex(message), served in turn.
	replay map[string][][]byte
	served map[string]int
}

type fault struct {
	op      string // "" = any operation
	n       int
	code    string
	status  int
	message string
}

// Start starts a server on 127.0.0.1 (a free port). It is closed by Close.
func Start(cfg Config) (*Server, error) {
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.AccountID == "" {
		cfg.AccountID = "111122223333"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, ln: ln, URL: "http://" + ln.Addr().String(), keys: map[string]*key{}, aliases: map[string]string{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Region returns the server's region.
func (s *Server) Region() string { return s.cfg.Region }

// SetLatency delays every response by d (simulating KMS round trips).
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// FailNext makes the next n requests for op ("" for any) fail with the KMS
// error code at HTTP status (e.g. "ThrottlingException", 400;
// "KMSInternalException", 500).
func (s *Server) FailNext(op string, n int, code string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{op: op, n: n, code: code, status: status, message: "kmstest: injected " + code})
}

// Throttle makes the next n requests for op fail with ThrottlingException
// ("Rate exceeded"), as KMS does above the account's request quota.
func (s *Server) Throttle(op string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{op: op, n: n, code: "ThrottlingException", status: 400, message: "Rate exceeded"})
}

// Requests returns every request received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// MaxInFlight returns the most requests that were ever served at once.
func (s *Server) MaxInFlight() int { return int(s.maxInFlight.Load()) }

// Signs returns how many Sign requests succeeded.
func (s *Server) Signs() int64 { return s.signs.Load() }

// Tags returns a key's tags.
func (s *Server) Tags(keyID string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.resolve(keyID)
	if k == nil {
		return nil
	}
	out := map[string]string{}
	for n, v := range k.tags {
		out[n] = v
	}
	return out
}

// AliasTarget returns the key id an alias points to ("" if none).
func (s *Server) AliasTarget(alias string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aliases[alias]
}

// KeyState returns a key's KeyState ("" when there is no such key).
func (s *Server) KeyState(keyID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.resolve(keyID); k != nil {
		return k.state
	}
	return ""
}

// SeedKey adds an enabled SIGN_VERIFY key holding priv (ed25519.PrivateKey
// or a P-256 *ecdsa.PrivateKey) and returns its ARN.
func (s *Server) SeedKey(priv crypto.Signer) (string, error) {
	spec, err := specOf(priv.Public())
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addKey(spec, priv, der, nil, nil), nil
}

// Replay is a captured real key: its GetPublicKey DER and the signatures
// KMS returned for given inputs. Sign requests with any other input fail.
type Replay struct {
	PublicKeyDER []byte
	Signatures   []ReplaySignature
}

// ReplaySignature is what KMS returned for one Sign input. When several
// are given for the same input they are served in turn.
type ReplaySignature struct {
	SigningAlgorithm string
	MessageType      string
	Message          []byte
	Signature        []byte
}

// SeedReplay adds an enabled SIGN_VERIFY key that answers from captured
// responses, and returns its ARN. The key spec follows from the public key.
func (s *Server) SeedReplay(r Replay) (string, error) {
	pub, err := x509.ParsePKIXPublicKey(r.PublicKeyDER)
	if err != nil {
		return "", err
	}
	spec, err := specOf(pub)
	if err != nil {
		return "", err
	}
	canned := map[string][][]byte{}
	for _, sg := range r.Signatures {
		k := replayKey(sg.SigningAlgorithm, sg.MessageType, sg.Message)
		canned[k] = append(canned[k], sg.Signature)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addKey(spec, nil, append([]byte(nil), r.PublicKeyDER...), canned, nil), nil
}

func replayKey(alg, typ string, msg []byte) string {
	return alg + "|" + typ + "|" + hex.EncodeToString(msg)
}

func specOf(pub crypto.PublicKey) (string, error) {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return SpecEd25519, nil
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return SpecP256, nil
		}
	}
	return "", fmt.Errorf("kmstest: unsupported key %T", pub)
}

// addKey registers a key; s.mu must be held.
func (s *Server) addKey(spec string, priv crypto.Signer, der []byte, replay map[string][][]byte, tags map[string]string) string {
	var idb [16]byte
	_, _ = rand.Read(idb[:])
	h := hex.EncodeToString(idb[:])
	id := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	if tags == nil {
		tags = map[string]string{}
	}
	k := &key{id: id, arn: s.arn("key/" + id), spec: spec, enabled: true, state: "Enabled", created: time.Now(),
		tags: tags, priv: priv, pubDER: der, replay: replay, served: map[string]int{}}
	s.keys[id] = k
	s.order = append(s.order, id)
	return k.arn
}

func (s *Server) arn(resource string) string {
	return "arn:aws:kms:" + s.cfg.Region + ":" + s.cfg.AccountID + ":" + resource
}

// resolve finds a key by id, key ARN, alias name or alias ARN; s.mu held.
func (s *Server) resolve(id string) *key {
	if strings.HasPrefix(id, "arn:") {
		prefix := s.arn("")
		rest, ok := strings.CutPrefix(id, prefix)
		if !ok {
			return nil
		}
		id = rest
		if kid, ok := strings.CutPrefix(id, "key/"); ok {
			id = kid
		}
	}
	if strings.HasPrefix(id, "alias/") {
		id = s.aliases[id]
	}
	return s.keys[id]
}

// apiError is a KMS error response.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errorf(status int, code, format string, a ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, a...)}
}

func validation(format string, a ...any) *apiError {
	return errorf(400, "ValidationException", format, a...)
}

// ServeHTTP implements the KMS JSON 1.1 protocol.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	s.mu.Lock()
	latency := s.latency
	s.mu.Unlock()
	if latency > 0 {
		time.Sleep(latency)
	}
	out, aerr := s.handle(r)
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", "kmstest")
	if aerr != nil {
		w.Header().Set("X-Amzn-ErrorType", aerr.code)
		w.WriteHeader(aerr.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": aerr.code, "message": aerr.message})
		return
	}
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) handle(r *http.Request) (any, *apiError) {
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		return nil, errorf(404, "UnknownOperationException", "kmstest: POST / only")
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-amz-json-1.1" {
		return nil, errorf(400, "SerializationException", "kmstest: Content-Type %q, want application/x-amz-json-1.1", ct)
	}
	op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "TrentService.")
	if !ok {
		return nil, errorf(400, "UnknownOperationException", "kmstest: X-Amz-Target %q", r.Header.Get("X-Amz-Target"))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, errorf(400, "SerializationException", "kmstest: %v", err)
	}
	if aerr := s.authenticate(r, body); aerr != nil {
		return nil, aerr
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, errorf(400, "SerializationException", "kmstest: body is not a JSON object: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	req := Request{Op: op}
	_ = getString(in, "KeyId", &req.KeyID)
	_ = getString(in, "SigningAlgorithm", &req.SigningAlgorithm)
	_ = getString(in, "MessageType", &req.MessageType)
	var msg []byte
	if raw, ok := in["Message"]; ok {
		_ = json.Unmarshal(raw, &msg)
		req.MessageLen = len(msg)
	}
	s.requests = append(s.requests, req)
	for i, f := range s.faults {
		if f.op == "" || f.op == op {
			f.n--
			if f.n <= 0 {
				s.faults = append(s.faults[:i], s.faults[i+1:]...)
			}
			return nil, &apiError{status: f.status, code: f.code, message: f.message}
		}
	}
	switch op {
	case "CreateKey":
		return s.createKey(in)
	case "GetPublicKey":
		return s.getPublicKey(in)
	case "Sign":
		return s.sign(in)
	case "DescribeKey":
		return s.describeKey(in)
	case "CreateAlias":
		return s.createAlias(in)
	case "TagResource":
		return s.tagResource(in)
	case "DisableKey":
		return s.setEnabled(in, false)
	case "EnableKey":
		return s.setEnabled(in, true)
	case "ScheduleKeyDeletion":
		return s.scheduleKeyDeletion(in)
	case "ListKeys":
		return s.listKeys(in)
	}
	return nil, errorf(400, "UnknownOperationException", "kmstest: operation %s is not implemented", op)
}

var authRE = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$`)

// authenticate checks the SigV4 Authorization header, and the signature
// itself when the server has credentials.
func (s *Server) authenticate(r *http.Request, body []byte) *apiError {
	m := authRE.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		return errorf(400, "MissingAuthenticationTokenException", "kmstest: request is not signed with AWS Signature Version 4")
	}
	akid, region, service, signed := m[1], m[3], m[4], m[5]
	if region != s.cfg.Region || service != "kms" {
		return errorf(400, "InvalidSignatureException", "Credential should be scoped to a valid region (%s) and service kms, not %s/%s", s.cfg.Region, region, service)
	}
	c := s.cfg.Credentials
	if c == nil {
		return nil
	}
	if akid != c.AccessKeyID {
		return errorf(400, "UnrecognizedClientException", "The security token included in the request is invalid.")
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return errorf(400, "IncompleteSignatureException", "kmstest: X-Amz-Date missing or malformed")
	}
	// Re-sign a copy holding only the signed headers, and compare.
	cp, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	cp.Host = r.Host
	for _, h := range strings.Split(signed, ";") {
		if h == "host" || h == "content-length" {
			continue
		}
		for _, v := range r.Header.Values(h) {
			cp.Header.Add(h, v)
		}
	}
	cp.ContentLength = int64(len(body))
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), *c, cp, hex.EncodeToString(sum[:]), "kms", s.cfg.Region, at); err != nil {
		return errorf(500, "KMSInternalException", "kmstest: re-signing: %v", err)
	}
	got := authRE.FindStringSubmatch(cp.Header.Get("Authorization"))
	if got == nil || got[6] != m[6] {
		return errorf(400, "InvalidSignatureException", "The request signature we calculated does not match the signature you provided.")
	}
	return nil
}

func getString(in map[string]json.RawMessage, name string, out *string) *apiError {
	raw, ok := in[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return errorf(400, "SerializationException", "kmstest: %s must be a string", name)
	}
	return nil
}

func required(in map[string]json.RawMessage, name string) (string, *apiError) {
	var v string
	if aerr := getString(in, name, &v); aerr != nil {
		return "", aerr
	}
	if v == "" {
		return "", validation("1 validation error detected: Value null at '%s' failed to satisfy constraint: Member must not be null", lowerFirst(name))
	}
	return v, nil
}

func lowerFirst(s string) string { return strings.ToLower(s[:1]) + s[1:] }

// lookup resolves KeyId to a key; s.mu held.
func (s *Server) lookup(in map[string]json.RawMessage) (*key, *apiError) {
	id, aerr := required(in, "KeyId")
	if aerr != nil {
		return nil, aerr
	}
	k := s.resolve(id)
	if k == nil {
		if strings.HasPrefix(id, "alias/") {
			return nil, errorf(400, "NotFoundException", "Alias %s is not found.", s.arn(id))
		}
		return nil, errorf(400, "NotFoundException", "Key '%s' does not exist", s.arn("key/"+strings.TrimPrefix(strings.TrimPrefix(id, s.arn("")), "key/")))
	}
	return k, nil
}

// usable refuses keys that cannot be used for cryptography.
func usable(k *key) *apiError {
	switch k.state {
	case "PendingDeletion":
		return errorf(400, "KMSInvalidStateException", "%s is pending deletion.", k.arn)
	case "Disabled":
		return errorf(400, "DisabledException", "%s is disabled.", k.arn)
	}
	return nil
}

func algorithms(spec string) []string {
	if spec == SpecEd25519 {
		return []string{AlgEd25519ph, AlgEd25519}
	}
	return []string{AlgECDSASHA256}
}

func (k *key) metadata() map[string]any {
	md := map[string]any{
		"AWSAccountId":          strings.Split(k.arn, ":")[4],
		"Arn":                   k.arn,
		"KeyId":                 k.id,
		"CreationDate":          float64(k.created.UnixMilli()) / 1000,
		"Enabled":               k.enabled,
		"Description":           "",
		"KeyManager":            "CUSTOMER",
		"KeyState":              k.state,
		"KeyUsage":              "SIGN_VERIFY",
		"KeySpec":               k.spec,
		"CustomerMasterKeySpec": k.spec,
		"Origin":                "AWS_KMS",
		"MultiRegion":           false,
		"SigningAlgorithms":     algorithms(k.spec),
	}
	if !k.deletion.IsZero() {
		md["DeletionDate"] = float64(k.deletion.Unix())
	}
	return md
}

var tagKeyRE = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]{1,128}$`)

func parseTags(in map[string]json.RawMessage) (map[string]string, *apiError) {
	raw, ok := in["Tags"]
	if !ok {
		return nil, nil
	}
	var tags []struct{ TagKey, TagValue string }
	if err := json.Unmarshal(raw, &tags); err != nil {
		return nil, errorf(400, "SerializationException", "kmstest: Tags: %v", err)
	}
	out := map[string]string{}
	for i, t := range tags {
		if !tagKeyRE.MatchString(t.TagKey) || strings.HasPrefix(t.TagKey, "aws:") {
			return nil, errorf(400, "TagException", "kmstest: tag %d: invalid TagKey %q", i+1, t.TagKey)
		}
		if len(t.TagValue) > 256 {
			return nil, errorf(400, "TagException", "kmstest: tag %d: TagValue longer than 256", i+1)
		}
		out[t.TagKey] = t.TagValue
	}
	return out, nil
}

func (s *Server) createKey(in map[string]json.RawMessage) (any, *apiError) {
	var spec, usage string
	if aerr := getString(in, "KeySpec", &spec); aerr != nil {
		return nil, aerr
	}
	if aerr := getString(in, "KeyUsage", &usage); aerr != nil {
		return nil, aerr
	}
	if spec != SpecEd25519 && spec != SpecP256 {
		return nil, errorf(400, "UnsupportedOperationException", "kmstest: KeySpec %q is not supported (only %s and %s)", spec, SpecEd25519, SpecP256)
	}
	if usage == "" {
		return nil, validation("You must specify a KeyUsage value for an asymmetric KMS key.")
	}
	if usage != "SIGN_VERIFY" {
		return nil, validation("KeyUsage %s is not compatible with KeySpec %s", usage, spec)
	}
	tags, aerr := parseTags(in)
	if aerr != nil {
		return nil, aerr
	}
	var priv crypto.Signer
	var err error
	if spec == SpecEd25519 {
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	} else {
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return nil, errorf(500, "KMSInternalException", "kmstest: %v", err)
	}
	der, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return nil, errorf(500, "KMSInternalException", "kmstest: %v", err)
	}
	arn := s.addKey(spec, priv, der, nil, tags)
	return map[string]any{"KeyMetadata": s.resolve(arn).metadata()}, nil
}

func (s *Server) describeKey(in map[string]json.RawMessage) (any, *apiError) {
	k, aerr := s.lookup(in)
	if aerr != nil {
		return nil, aerr
	}
	return map[string]any{"KeyMetadata": k.metadata()}, nil
}

func (s *Server) getPublicKey(in map[string]json.RawMessage) (any, *apiError) {
	k, aerr := s.lookup(in)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := usable(k); aerr != nil {
		return nil, aerr
	}
	return map[string]any{
		"KeyId": k.arn, "PublicKey": k.pubDER, "KeySpec": k.spec, "CustomerMasterKeySpec": k.spec,
		"KeyUsage": "SIGN_VERIFY", "SigningAlgorithms": algorithms(k.spec),
	}, nil
}

func (s *Server) sign(in map[string]json.RawMessage) (any, *apiError) {
	var msg []byte
	raw, ok := in["Message"]
	if !ok {
		return nil, validation("1 validation error detected: Value null at 'message' failed to satisfy constraint: Member must not be null")
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		return nil, errorf(400, "SerializationException", "kmstest: Message must be base64")
	}
	if len(msg) < 1 || len(msg) > MaxMessage {
		return nil, validation("1 validation error detected: Value at 'message' failed to satisfy constraint: Member must have length less than or equal to %d", MaxMessage)
	}
	alg, aerr := required(in, "SigningAlgorithm")
	if aerr != nil {
		return nil, aerr
	}
	typ := MessageRaw
	if aerr := getString(in, "MessageType", &typ); aerr != nil {
		return nil, aerr
	}
	if typ != MessageRaw && typ != MessageDigest {
		return nil, validation("1 validation error detected: Value '%s' at 'messageType' failed to satisfy constraint: Member must satisfy enum value set: [RAW, DIGEST, EXTERNAL_MU]", typ)
	}
	k, aerr := s.lookup(in)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := usable(k); aerr != nil {
		return nil, aerr
	}
	valid := algorithms(k.spec)
	if !contains(valid, alg) {
		return nil, errorf(400, "InvalidKeyUsageException", "Algorithm %s is incompatible with key spec %s.", alg, k.spec)
	}
	switch {
	case alg == AlgEd25519 && typ != MessageRaw:
		return nil, validation("Message type %s is incompatible with algorithm %s.", typ, alg)
	case alg == AlgEd25519ph && typ != MessageDigest:
		return nil, validation("Message type %s is incompatible with algorithm %s.", typ, alg)
	case alg == AlgEd25519ph && len(msg) != sha512.Size:
		return nil, validation("Digest is invalid length for algorithm %s.", alg)
	case alg == AlgECDSASHA256 && typ == MessageDigest && len(msg) != sha256.Size:
		return nil, validation("Digest is invalid length for algorithm %s.", alg)
	}
	var sig []byte
	if k.priv == nil {
		rk := replayKey(alg, typ, msg)
		list := k.replay[rk]
		if len(list) == 0 {
			return nil, errorf(500, "KMSInternalException", "kmstest: replay key %s has no captured signature for this input", k.id)
		}
		sig = list[k.served[rk]%len(list)]
		k.served[rk]++
	} else {
		var err error
		switch alg {
		case AlgEd25519:
			sig, err = k.priv.Sign(rand.Reader, msg, crypto.Hash(0))
		case AlgEd25519ph:
			// AWS treats the 64-byte digest as the message of Ed25519ph:
			// PH(M) = SHA-512(digest) (RFC 8032 §5.1).
			ph := sha512.Sum512(msg)
			sig, err = k.priv.Sign(rand.Reader, ph[:], &ed25519.Options{Hash: crypto.SHA512})
		case AlgECDSASHA256:
			d := msg
			if typ == MessageRaw {
				sum := sha256.Sum256(msg)
				d = sum[:]
			}
			sig, err = k.priv.Sign(rand.Reader, d, crypto.SHA256)
		}
		if err != nil {
			return nil, errorf(500, "KMSInternalException", "kmstest: %v", err)
		}
	}
	s.signs.Add(1)
	return map[string]any{"KeyId": k.arn, "Signature": sig, "SigningAlgorithm": alg}, nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

var aliasRE = regexp.MustCompile(`^alias/[a-zA-Z0-9:/_-]+$`)

func (s *Server) createAlias(in map[string]json.RawMessage) (any, *apiError) {
	name, aerr := required(in, "AliasName")
	if aerr != nil {
		return nil, aerr
	}
	target, aerr := required(in, "TargetKeyId")
	if aerr != nil {
		return nil, aerr
	}
	if len(name) > 256 || !aliasRE.MatchString(name) {
		return nil, validation("1 validation error detected: Value '%s' at 'aliasName' failed to satisfy constraint: Member must satisfy regular expression pattern: ^[a-zA-Z0-9:/_-]+$", name)
	}
	if strings.HasPrefix(name, "alias/aws/") {
		return nil, errorf(400, "NotAuthorizedException", "kmstest: alias names starting with alias/aws/ are reserved")
	}
	if _, ok := s.aliases[name]; ok {
		return nil, errorf(400, "AlreadyExistsException", "An alias with the name %s already exists", s.arn(name))
	}
	k := s.resolve(target)
	if k == nil || strings.HasPrefix(target, "alias/") {
		return nil, errorf(400, "NotFoundException", "Key '%s' does not exist", target)
	}
	if k.state == "PendingDeletion" {
		return nil, errorf(400, "KMSInvalidStateException", "%s is pending deletion.", k.arn)
	}
	s.aliases[name] = k.id
	return map[string]any{}, nil
}

func (s *Server) tagResource(in map[string]json.RawMessage) (any, *apiError) {
	k, aerr := s.lookup(in)
	if aerr != nil {
		return nil, aerr
	}
	tags, aerr := parseTags(in)
	if aerr != nil {
		return nil, aerr
	}
	for n, v := range tags {
		k.tags[n] = v
	}
	return map[string]any{}, nil
}

func (s *Server) setEnabled(in map[string]json.RawMessage, enabled bool) (any, *apiError) {
	k, aerr := s.lookup(in)
	if aerr != nil {
		return nil, aerr
	}
	if k.state == "PendingDeletion" {
		return nil, errorf(400, "KMSInvalidStateException", "%s is pending deletion.", k.arn)
	}
	k.enabled = enabled
	k.state = "Disabled"
	if enabled {
		k.state = "Enabled"
	}
	return map[string]any{}, nil
}

func (s *Server) scheduleKeyDeletion(in map[string]json.RawMessage) (any, *apiError) {
	k, aerr := s.lookup(in)
	if aerr != nil {
		return nil, aerr
	}
	days := 30
	if raw, ok := in["PendingWindowInDays"]; ok {
		if err := json.Unmarshal(raw, &days); err != nil {
			return nil, errorf(400, "SerializationException", "kmstest: PendingWindowInDays must be a number")
		}
	}
	if days < 7 || days > 30 {
		return nil, validation("1 validation error detected: Value '%d' at 'pendingWindowInDays' failed to satisfy constraint: Member must have value between 7 and 30", days)
	}
	if k.state == "PendingDeletion" {
		return nil, errorf(400, "KMSInvalidStateException", "%s is pending deletion.", k.arn)
	}
	k.state, k.enabled = "PendingDeletion", false
	k.deletion = time.Now().Add(time.Duration(days) * 24 * time.Hour).Truncate(time.Second)
	return map[string]any{"KeyId": k.arn, "DeletionDate": float64(k.deletion.Unix()), "KeyState": k.state, "PendingWindowInDays": days}, nil
}

func (s *Server) listKeys(in map[string]json.RawMessage) (any, *apiError) {
	limit := 100
	if raw, ok := in["Limit"]; ok {
		if err := json.Unmarshal(raw, &limit); err != nil || limit < 1 || limit > 1000 {
			return nil, validation("1 validation error detected: Value at 'limit' failed to satisfy constraint: Member must have value between 1 and 1000")
		}
	}
	var marker string
	if aerr := getString(in, "Marker", &marker); aerr != nil {
		return nil, aerr
	}
	ids := append([]string(nil), s.order...)
	sort.SliceStable(ids, func(i, j int) bool { return s.keys[ids[i]].created.Before(s.keys[ids[j]].created) })
	start := 0
	if marker != "" {
		start = -1
		for i, id := range ids {
			if id == marker {
				start = i
			}
		}
		if start < 0 {
			return nil, errorf(400, "InvalidMarkerException", "kmstest: unknown marker")
		}
	}
	type entry struct{ KeyId, KeyArn string }
	out := []entry{}
	end := min(start+limit, len(ids))
	for _, id := range ids[start:end] {
		out = append(out, entry{KeyId: id, KeyArn: s.keys[id].arn})
	}
	res := map[string]any{"Keys": out, "Truncated": end < len(ids)}
	if end < len(ids) {
		res["NextMarker"] = ids[end]
	}
	return res, nil
}
