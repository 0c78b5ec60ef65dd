// Package tlogclient is keysvc's transparency-log client (the node side of
// issue 12, ADR 0015): every JWS the signing API issues becomes a VRP
// Transparency Log v0.1 leaf
//
//	{"artifact_hash":"sha256:<hex of the exact compact JWS>","artifact_type":"vrp_attestation",
//	 "leaf_version":"vrp-tlog-v0.1","logged_at":"<set by the log>"}
//
// submitted to every configured log, and a receipt's attestation can then
// carry the log's inclusion proof (the tlog member that package verifier
// checks) so that it still verifies after its key version is revoked (VRP
// K4).
//
// # Durability
//
// The signing path never waits on the network. With Config.Spool (the
// default of keysvc serve, ADR 0024), Client.Record appends one 64-byte
// record per leaf to this replica's spool file and returns once the
// record is in the kernel's page cache: copied into the segment's shared
// mapping (SpoolSyncWrite, ADR 0033) or, with SpoolSyncFdatasync, once
// its group's write(2) and fdatasync(2) returned; senders read the spool
// in order from each log's cursor. Otherwise Client.Record writes one
// outbox row per leaf and log to key history (store.Outbox, migration
// 00006) and returns once the row is committed; concurrent requests share
// one commit (group commit: a request waits for at most the commit in
// flight and the next one). The signing API returns a JWS only after
// Record returned nil, so every returned JWS is in the outbox — on the
// PostgreSQL primary (synchronous_commit) or in the SQLite file — before
// the caller sees it, whatever happens to the process afterwards.
//
// In the background, one submitter per log sends the rows in batches
// (POST add-batch, at most MaxBatch entries, at most InFlight requests at
// once), checks the Signed Entry Promise (signature by a key of the log's
// JWKS, log_id, one entry per submitted hash in order) and only then
// deletes the rows. Rows carry a lease: a row whose writer died (kill -9)
// or could not deliver it before the lease ended is claimed by any
// replica's sweeper and submitted again. The log deduplicates by
// artifact_hash, so a leaf submitted twice is one entry.
//
// # Wire contract
//
// The log endpoints are those of the VRP Transparency Log v0.1 draft under
// /.well-known/vrp/log/v0.1/ with keysvc's add-batch extension, as fixed in
// docs/adr/0012-transparency-log.md (the operator's ADR).
package tlogclient
