package tlogfmt

// JSON bodies of the operator endpoints (prefix PathPrefix). Hashes in
// responses are unpadded base64url; sizes and indexes are JSON integers.

// Submission is one artifact to log: the body of POST add, and one entry
// of POST add-batch.
type Submission struct {
	ArtifactType string `json:"artifact_type"`
	ArtifactHash string `json:"artifact_hash"`
}

// AddBatchRequest is the body of POST add-batch (1..MaxBatchEntries
// entries).
type AddBatchRequest struct {
	Entries []Submission `json:"entries"`
}

// AddResponse answers POST add and POST add-batch.
type AddResponse struct {
	SEP string `json:"sep"`
}

// STHResponse answers GET sth: the newest STH and the C2SP checkpoint of
// the same tree (same size and root), with every witness cosignature
// obtained for it.
type STHResponse struct {
	STH        string `json:"sth"`
	Checkpoint string `json:"checkpoint"`
}

// ProofResponse answers GET proof: the attestation's tlog member (ADR
// 0006) plus the checkpoint of the same tree as STH.
type ProofResponse struct {
	LogID          string   `json:"log_id"`
	Leaf           Leaf     `json:"leaf"`
	LeafIndex      uint64   `json:"leaf_index"`
	TreeSize       uint64   `json:"tree_size"`
	InclusionProof []string `json:"inclusion_proof"`
	STH            string   `json:"sth"`
	Checkpoint     string   `json:"checkpoint"`
}

// ConsistencyResponse answers GET consistency (RFC 9162 §2.1.4).
type ConsistencyResponse struct {
	LogID            string   `json:"log_id"`
	First            uint64   `json:"first"`
	Second           uint64   `json:"second"`
	ConsistencyProof []string `json:"consistency_proof"`
}

// ArchivedSTH is one entry of the STH archive.
type ArchivedSTH struct {
	TreeSize   uint64 `json:"tree_size"`
	STH        string `json:"sth"`
	Checkpoint string `json:"checkpoint"`
}

// ArchiveResponse answers GET sth/archive: archived STHs, oldest first.
// Next, when set, is the after= value of the next page; it is null on the
// last page.
type ArchiveResponse struct {
	STHs []ArchivedSTH `json:"sths"`
	Next *uint64       `json:"next"`
}

// ErrorResponse is every error body: {"error":{"code","message"}}.
type ErrorResponse struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Stable error codes of the operator endpoints (besides the strict JSON
// decoder's codes, internal/strictjson).
const (
	CodeNotFound             = "not_found"              // 404: no such route, or the hash is not in a signed tree (yet)
	CodeInvalidRequest       = "invalid_request"        // 400: a parameter or member has a bad value
	CodeMethodNotAllowed     = "method_not_allowed"     // 405
	CodeUnauthorized         = "unauthorized"           // 401: the operator requires a submitter token for add/add-batch
	CodeForbidden            = "forbidden"              // 403: this log takes no submissions over HTTP (keysvc serve's embedded log)
	CodeUnsupportedMediaType = "unsupported_media_type" // 415
	CodeBodyTooLarge         = "body_too_large"         // 413
	CodeBatchTooLarge        = "batch_too_large"        // 400: more than MaxBatchEntries entries
	CodeLogUnavailable       = "log_unavailable"        // 503: the engine pushed back or failed; retry
	CodeInternal             = "internal"               // 500
)

// Endpoint paths under PathPrefix.
const (
	EndpointAdd         = "add"
	EndpointAddBatch    = "add-batch"
	EndpointSTH         = "sth"
	EndpointProof       = "proof"
	EndpointConsistency = "consistency"
	EndpointArchive     = "sth/archive"
	EndpointJWKS        = "jwks.json"
	EndpointVKey        = "vkey"
)
