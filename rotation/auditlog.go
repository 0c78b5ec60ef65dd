package rotation

import (
	"context"
	"log/slog"

	"github.com/keysvc/keysvc/store"
)

// auditLogStore is the Manager's view of key history: after a transaction
// commits, it logs one line per audit event the transaction appended
// ("lifecycle change": action, actor, key, kid, reason, audit seq), so
// every lifecycle change reaches the service log whichever path made it —
// direct or two-person, API or scheduler (issue 16). Nothing is logged for
// a transaction that rolls back or is retried.
type auditLogStore struct {
	store.Store
	log *slog.Logger
}

func (s auditLogStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	var evs []store.AuditEvent
	err := s.Store.InTx(ctx, func(tx store.Tx) error {
		evs = evs[:0]
		return fn(auditLogTx{Tx: tx, evs: &evs})
	})
	if err != nil {
		return err
	}
	for _, ev := range evs {
		s.log.Info("lifecycle change", "action", ev.Action, "actor", ev.Actor, "key", ev.KeyName, "kid", ev.KID, "reason", ev.Reason, "audit_seq", ev.Seq)
	}
	return nil
}

// auditLogTx records the audit events appended through it.
type auditLogTx struct {
	store.Tx
	evs *[]store.AuditEvent
}

func (t auditLogTx) AppendAudit(ctx context.Context, ev store.AuditEvent) (store.AuditEvent, error) {
	out, err := t.Tx.AppendAudit(ctx, ev)
	if err == nil {
		*t.evs = append(*t.evs, out)
	}
	return out, err
}
