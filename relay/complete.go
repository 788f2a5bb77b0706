package relay

import (
	"context"
	"database/sql"
	"strings"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
)

// fence says whose claims a completion may apply to.
type fence int

const (
	// fenceMine: the claims this relay made, unless another relay took
	// the rows over since (a rescue or a claim bumps claim_version),
	// whether or not their lease has expired: a completion that reaches
	// the database after the lease (a stall, a lock wait) records its
	// outcomes if nobody took the rows over meanwhile.
	fenceMine fence = iota
	// fenceExpired: any claim whose lease has expired (rescue). It bumps
	// claim_version, so that the relay that lost the lease can tell.
	fenceExpired
)

// caseByID writes "CASE id WHEN ? THEN <value> … ELSE <otherwise> END" for
// the outcomes selected by keep; value writes one outcome's value.
func caseByID(b *dialect.Builder, outs []outcome, keep func(*outcome) bool, value func(*outcome), otherwise string) bool {
	opened := false
	for i := range outs {
		o := &outs[i]
		if !keep(o) {
			continue
		}
		if !opened {
			b.Add("CASE id")
			opened = true
		}
		b.Add(" WHEN ? THEN ", o.row.ID)
		value(o)
	}
	if opened {
		b.Add(" ELSE " + otherwise + " END")
	}
	return opened
}

func statusAfter(o *outcome) outbox.Status {
	switch o.kind {
	case published:
		return outbox.StatusPublished
	case failed:
		return outbox.StatusFailed
	case dead:
		return outbox.StatusDead
	default: // released: as it was before the claim
		if o.row.Attempts-1 > 0 {
			return outbox.StatusFailed
		}
		return outbox.StatusPending
	}
}

// completion builds the one conditional UPDATE that records every outcome
// of a batch. Each row is updated only if it is still publishing under the
// claim_version it was claimed with, and, for fenceMine, still locked by
// this relay; for fenceExpired, with its lease expired.
func (r *Relay) completion(outs []outcome, f fence) (string, []any) {
	b := r.kind.NewBuilder()
	if allPublished(outs) && f == fenceMine {
		// The common case, kept small: one value for every row.
		b.Add("UPDATE " + r.kind.Driver().ByID(r.table) + " SET status = 'published', locked_by = NULL, locked_until = NULL, published_at = ")
		b.Now()
	} else {
		r.setOutcomes(b, outs, f)
	}
	r.fenceClause(b, outs, f)
	return b.SQL(), b.Args()
}

func allPublished(outs []outcome) bool {
	for i := range outs {
		if outs[i].kind != published {
			return false
		}
	}
	return true
}

// setOutcomes writes "UPDATE … SET …" giving each row its own outcome.
func (r *Relay) setOutcomes(b *dialect.Builder, outs []outcome, f fence) {
	b.Add("UPDATE " + r.kind.Driver().ByID(r.table) + " SET status = ")
	caseByID(b, outs, func(*outcome) bool { return true }, func(o *outcome) { b.Add("?", string(statusAfter(o))) }, "status")
	b.Add(", locked_by = NULL, locked_until = NULL")
	if f == fenceExpired {
		b.Add(", claim_version = claim_version + 1")
	}
	b.Add(", attempts = ")
	if !caseByID(b, outs, func(o *outcome) bool { return o.kind == released }, func(o *outcome) { b.Add("?", o.row.Attempts-1) }, "attempts") {
		b.Add("attempts")
	}
	b.Add(", available_at = ")
	if !caseByID(b, outs, func(o *outcome) bool { return o.kind == failed || o.kind == released }, func(o *outcome) { b.NowPlus(o.delay) }, "available_at") {
		b.Add("available_at")
	}
	b.Add(", last_error = ")
	if !caseByID(b, outs, func(o *outcome) bool { return o.err != nil }, func(o *outcome) { b.Add("?", errorText(o.err)) }, "last_error") {
		b.Add("last_error")
	}
	b.Add(", published_at = ")
	if !caseByID(b, outs, func(o *outcome) bool { return o.kind == published }, func(*outcome) { b.Now() }, "published_at") {
		b.Add("published_at")
	}
}

// fenceClause writes the WHERE clause that lets an outcome through only
// while the claim it belongs to holds.
func (r *Relay) fenceClause(b *dialect.Builder, outs []outcome, f fence) {
	// Each row's claim_version, written as one id list per version: most
	// rows of a batch share one (their first claim), so this is usually
	// "claim_version = ? AND id IN (…)".
	versions := make([]int64, 0, 2)
	byVersion := make(map[int64][]int64, 2)
	for i := range outs {
		v := outs[i].row.ClaimVersion
		if _, ok := byVersion[v]; !ok {
			versions = append(versions, v)
		}
		byVersion[v] = append(byVersion[v], outs[i].row.ID)
	}
	b.Add(" WHERE (")
	for i, v := range versions {
		if i > 0 {
			b.Add(" OR ")
		}
		b.Add("(claim_version = ? AND ", v)
		b.IDList("id", byVersion[v])
		b.Add(")")
	}
	b.Add(") AND status = 'publishing'")
	switch f {
	case fenceMine:
		// No lease condition: claim_version is the fencing token. Every
		// claim and every rescue bumps it, so a row still publishing at
		// the version this relay claimed it with is held by no one else,
		// however late the completion comes. (A lease check refused the
		// outcomes of a completion that reached the database after the
		// lease, delayed by a stalled connection or, on PostgreSQL, whose
		// clock_timestamp() is read per row, by a lock wait: the events
		// were rescued and delivered again.)
		b.Add(" AND locked_by = ?", r.cfg.workerID)
	case fenceExpired:
		b.Add(" AND locked_until <= ")
		b.Now()
	}
	if lazy := r.kind.Driver().LazyCommit(); lazy != "" && !r.cfg.syncCommit {
		b.Add(" AND " + lazy)
	}
}

// maxErrorLen bounds last_error (TEXT holds 64 KiB on MySQL).
const maxErrorLen = 4000

func errorText(err error) string {
	s := err.Error()
	if len(s) > maxErrorLen {
		s = s[:maxErrorLen] + "…"
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "?")
}

// chunkRows bounds the rows of one completion statement. A row costs at
// most ten bind parameters (its id in the fence and in each CASE, its
// values), so a chunk stays well below the smallest limit of the
// databases (SQLite 32,766 per statement; PostgreSQL and MySQL 65,535),
// while ordinary batches are recorded in one statement.
const chunkRows = 1000

// apply records outs, in statements of at most chunkRows rows, and
// returns which of them the fence let through. On an error it returns the
// number of leading outcomes that were settled (recorded or refused) before
// it, with applied telling which; the rest were not tried or not recorded.
func (r *Relay) apply(ctx context.Context, outs []outcome, f fence, retry bool) (applied []bool, settled int, err error) {
	applied = make([]bool, len(outs))
	for settled < len(outs) {
		n := min(chunkRows, len(outs)-settled)
		if err := r.applyChunk(ctx, outs[settled:settled+n], f, retry, applied[settled:settled+n]); err != nil {
			return applied, settled, err
		}
		settled += n
	}
	return applied, settled, nil
}

// applyChunk records outs in one statement and sets applied[i] for each
// outcome the fence let through. retry says that an earlier try of the
// same outcomes failed.
func (r *Relay) applyChunk(ctx context.Context, outs []outcome, f fence, retry bool, applied []bool) error {
	db := r.db.WithContext(ctx)
	pos := make(map[int64]int, len(outs))
	for i := range outs {
		pos[outs[i].row.ID] = i
	}
	if !r.drv.returning() && f == fenceExpired {
		// Several relays may rescue the same rows at once, and without
		// RETURNING a row's state afterwards cannot tell who changed it:
		// lock the rows that pass the fence, then update exactly those.
		return r.applyLocked(ctx, outs, f, pos, applied)
	}
	sql, args := r.completion(outs, f)
	if r.attempts.logged() != "" {
		return r.applyLogged(db, outs, f, retry, pos, applied, sql, args)
	}
	if r.drv.returning() {
		var ids []int64
		if err := db.Raw(sql+" RETURNING id", args...).Scan(&ids).Error; err != nil {
			return err
		}
		for _, id := range ids {
			applied[pos[id]] = true
		}
		if len(ids) == len(outs) || f != fenceMine || !retry {
			return nil
		}
		// The try before may have committed without its answer reaching
		// the relay (a connection cut): refused rows may be rows it
		// recorded.
		return r.confirm(db, outs, pos, applied)
	}
	res := db.Exec(sql, args...)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == int64(len(outs)) {
		for i := range applied {
			applied[i] = true
		}
		return nil
	}
	return r.confirm(db, outs, pos, applied)
}

// confirm tells, for the outcomes of a completion (fenceMine) not known
// to be applied, whether they are recorded, by the state of their rows: a
// row that left publishing with the claim_version this relay claimed it
// with, in the state its outcome gives, was recorded by this relay, since
// only this relay holds that claim. A refused row was rescued or claimed
// since, which bumped its claim_version.
func (r *Relay) confirm(db *gorm.DB, outs []outcome, pos map[int64]int, applied []bool) error {
	var now []struct {
		ID           int64
		ClaimVersion int64
		Status       outbox.Status
	}
	ids := make([]int64, 0, len(outs))
	for i := range outs {
		if !applied[i] {
			ids = append(ids, outs[i].row.ID)
		}
	}
	if err := db.Table(r.table).Select("id, claim_version, status").Where("id IN ?", ids).Scan(&now).Error; err != nil {
		return err
	}
	for _, row := range now {
		i := pos[row.ID]
		applied[i] = row.ClaimVersion == outs[i].row.ClaimVersion && row.Status == statusAfter(&outs[i])
	}
	return nil
}

// applyLocked records outs (and their attempt records) in a transaction
// that first locks the rows that pass the fence: it knows exactly which
// outcomes it applied. It runs where UPDATE … RETURNING is missing (MySQL),
// READ COMMITTED and SKIP LOCKED: rows another relay has locked are that
// relay's to record (two rescuers of the same expired leases would
// otherwise lock each other's rows and deadlock), and no gap is locked.
func (r *Relay) applyLocked(ctx context.Context, outs []outcome, f fence, pos map[int64]int, applied []bool) error {
	return r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		b := r.kind.NewBuilder()
		b.Add("SELECT id FROM " + r.kind.Driver().ByID(r.table))
		r.fenceClause(b, outs, f)
		b.Add(" FOR UPDATE SKIP LOCKED")
		var ids []int64
		if err := tx.Raw(b.SQL(), b.Args()...).Scan(&ids).Error; err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		held := make([]outcome, 0, len(ids))
		for _, id := range ids {
			held = append(held, outs[pos[id]])
		}
		sql, args := r.completion(held, f)
		if err := tx.Exec(sql, args...).Error; err != nil {
			return err
		}
		if r.attempts.logged() != "" {
			if err := r.kind.Driver().InsertAttempts(tx, r.table, r.attemptRecords(held, f)); err != nil {
				return err
			}
		}
		for _, id := range ids {
			applied[pos[id]] = true
		}
		return nil
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
}
