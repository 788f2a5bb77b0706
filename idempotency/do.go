package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// Do runs fn unless key already succeeded, and records its success. It
// returns nil without calling fn when the key succeeded before.
//
// While fn runs the key is held: a concurrent Do, DoTx or SideEffect of the
// same key returns ErrInProgress at once and does not run fn (retry it
// later). If fn fails, its error is returned and the key is released, so a
// retry runs fn again. If the holder dies, the key is free again after the
// lease (WithLease).
//
// Do records the outcome in its own statements, after fn: an effect of fn
// and its record do not commit atomically (use DoTx for writes to this
// database, or make fn itself idempotent).
func (s *Store) Do(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	_, err := s.run(ctx, key, func(ctx context.Context) ([]byte, error) { return nil, fn(ctx) })
	return err
}

// SideEffect calls fn, an external call such as a payment or an e-mail,
// once for effectKey, stores its result, and returns the stored result
// without calling fn again when it is retried (in a redelivered handler).
// A failed fn stores nothing and returns its error; the next call tries
// again. Concurrent calls of one key behave as in Do.
func (s *Store) SideEffect(ctx context.Context, effectKey string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	return s.run(ctx, effectKey, fn)
}

// SideEffectJSON is SideEffect for a result stored as JSON.
func SideEffectJSON[T any](ctx context.Context, s *Store, effectKey string, fn func(ctx context.Context) (T, error)) (T, error) {
	var out T
	b, err := s.SideEffect(ctx, effectKey, func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	})
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("idempotency: decoding the stored result of %q: %w", effectKey, err)
	}
	return out, nil
}

// DoTx runs fn in a database transaction together with the record of key,
// so that fn's writes and the record commit or roll back as one: for a
// handler whose effect is a write to this database, the effect happens
// exactly once. It returns nil without calling fn when key already
// succeeded.
//
// Concurrent DoTx calls of one key run fn once: the second waits for the
// first to commit (then skips) or roll back (then runs). On MySQL, when
// the first caller of a new key rolls back while two or more others wait
// for it, one of those can get InnoDB's deadlock error 1213; retry as with
// any deadlock. A key held by a running Do or
// SideEffect makes DoTx return ErrInProgress, until that holder's lease
// has expired (it died): then DoTx takes the key over.
func (s *Store) DoTx(ctx context.Context, key string, fn func(tx *gorm.DB) error) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		token := newToken()
		inserted, err := s.insert(tx, key, "succeeded", token, s.ttl)
		if err != nil {
			return err
		}
		if inserted {
			return fn(tx)
		}
		st, err := s.state(tx, key)
		switch {
		case err != nil:
			return err
		case st == nil: // deleted meanwhile by a failed Do: try once more
			if inserted, err = s.insert(tx, key, "succeeded", token, s.ttl); err != nil {
				return err
			} else if inserted {
				return fn(tx)
			}
			return fmt.Errorf("%w: %q", ErrInProgress, key)
		case st.Status == "succeeded":
			return nil
		case st.Expired:
			// A Do whose holder died: take the key over in this transaction.
			took, err := s.takeOver(tx, key, "succeeded", "", 0, s.ttl)
			if err != nil {
				return err
			}
			if took {
				return fn(tx)
			}
			return fmt.Errorf("%w: %q", ErrInProgress, key)
		default:
			return fmt.Errorf("%w: %q", ErrInProgress, key)
		}
	})
}

// run is Do and SideEffect: hold the key, call fn, record its result.
func (s *Store) run(ctx context.Context, key string, fn func(ctx context.Context) ([]byte, error)) (result []byte, err error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	token, done, err := s.hold(ctx, key)
	if err != nil || done != nil {
		return done, err
	}
	// Release or record with a context that outlives ctx's cancellation.
	rctx := context.WithoutCancel(ctx)
	defer func() {
		if p := recover(); p != nil {
			_ = s.releaseKey(rctx, key, token)
			panic(p)
		}
	}()
	result, err = fn(ctx)
	if err != nil {
		if rerr := s.releaseKey(rctx, key, token); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		return nil, err
	}
	if result == nil {
		result = []byte{}
	}
	if err := s.succeed(rctx, key, token, result); err != nil {
		return result, err
	}
	return result, nil
}

// hold takes key for this caller: it returns a token, or the stored result
// when the key already succeeded, or ErrInProgress.
func (s *Store) hold(ctx context.Context, key string) (string, []byte, error) {
	db := s.db.WithContext(ctx)
	token := newToken()
	for range 3 {
		inserted, err := s.insert(db, key, "running", token, s.lease)
		if err != nil {
			return "", nil, err
		}
		if inserted {
			return token, nil, nil
		}
		st, err := s.state(db, key)
		if err != nil {
			return "", nil, err
		}
		switch {
		case st == nil: // released meanwhile: try again
			continue
		case st.Status == "succeeded":
			if st.Result == nil {
				st.Result = []byte{}
			}
			return "", st.Result, nil
		case !st.Expired:
			return "", nil, fmt.Errorf("%w: %q", ErrInProgress, key)
		}
		// The holder died: take over, unless someone else just did.
		took, err := s.takeOver(db, key, "running", token, s.lease, s.lease)
		if err != nil {
			return "", nil, err
		}
		if took {
			return token, nil, nil
		}
		return "", nil, fmt.Errorf("%w: %q", ErrInProgress, key)
	}
	return "", nil, fmt.Errorf("%w: %q (contended)", ErrInProgress, key)
}

// insert adds a record of key holding token (unique to the caller) unless
// one exists, and reports whether it did. A running record is locked for
// the lease; every record expires after life.
func (s *Store) insert(db *gorm.DB, key, status, token string, life time.Duration) (bool, error) {
	p := sqldriver.InsertKeyParams{Table: s.table, Key: key, Status: status, Token: token, Life: life}
	if status == "running" {
		p.LockedFor = s.lease
	}
	inserted, err := s.drv.InsertKey(db, p)
	if err != nil {
		return false, fmt.Errorf("idempotency: recording %q: %w", key, err)
	}
	return inserted, nil
}

// takeOver takes key over from a holder whose lease expired, leaving it
// with status and token, locked for lockedFor (0: not locked) and
// expiring after life, and reports whether it did.
func (s *Store) takeOver(db *gorm.DB, key, status, token string, lockedFor, life time.Duration) (bool, error) {
	took, err := s.drv.TakeOverKey(db, sqldriver.TakeOverKeyParams{
		Table: s.table, Key: key, Status: status, Token: token, LockedFor: lockedFor, Life: life,
	})
	if err != nil {
		return false, fmt.Errorf("idempotency: taking over %q: %w", key, err)
	}
	return took, nil
}

type state struct {
	Status  string
	Result  []byte
	Expired bool
}

// state reads the record of key, or nil when there is none.
func (s *Store) state(db *gorm.DB, key string) (*state, error) {
	b := s.kind.NewBuilder()
	b.Add("SELECT status, result, CASE WHEN locked_until <= ")
	b.Now()
	b.Add(" THEN 1 ELSE 0 END AS expired FROM "+s.table+" WHERE idempotency_key = ?", key)
	var rows []struct {
		Status  string
		Result  []byte
		Expired int
	}
	if err := db.Raw(b.SQL(), b.Args()...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("idempotency: reading %q: %w", key, err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &state{Status: rows[0].Status, Result: rows[0].Result, Expired: rows[0].Expired == 1}, nil
}

func (s *Store) succeed(ctx context.Context, key, token string, result []byte) error {
	b := s.kind.NewBuilder()
	b.Add("UPDATE "+s.table+" SET status = 'succeeded', result = ?, locked_until = NULL, expires_at = ", result)
	b.NowPlus(s.ttl)
	b.Add(" WHERE idempotency_key = ? AND token = ? AND status = 'running'", key, token)
	res := s.db.WithContext(ctx).Exec(b.SQL(), b.Args()...)
	if res.Error != nil {
		return fmt.Errorf("idempotency: recording the success of %q: %w", key, res.Error)
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("%w: %q", ErrLeaseLost, key)
	}
	return nil
}

func (s *Store) releaseKey(ctx context.Context, key, token string) error {
	err := s.db.WithContext(ctx).Exec("DELETE FROM "+s.table+" WHERE idempotency_key = ? AND token = ? AND status = 'running'", key, token).Error
	if err != nil {
		return fmt.Errorf("idempotency: releasing %q: %w", key, err)
	}
	return nil
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
