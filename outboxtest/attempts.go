package outboxtest

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// attempts remembers the events whose delivery did not succeed during a
// Drain, so that those still undelivered at its end can be reported.
type attempts struct {
	mu   sync.Mutex
	ids  []string
	seen map[string]bool
}

func newAttempts() *attempts { return &attempts{seen: map[string]bool{}} }

func (a *attempts) note(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.seen[id] {
		a.seen[id] = true
		a.ids = append(a.ids, id)
	}
}

// wrap returns pub watched: every event it does not deliver is noted. The
// wrapper keeps pub's optional interfaces (BatchPublisher, Validator,
// Describer), so that the relay treats it as it would treat pub.
func (a *attempts) wrap(pub relay.Publisher) relay.Publisher {
	w := &watch{pub: pub, a: a}
	if bp, ok := pub.(relay.BatchPublisher); ok {
		return &batchWatch{watch: w, bp: bp}
	}
	return w
}

type watch struct {
	pub relay.Publisher
	a   *attempts
}

func (w *watch) Publish(ctx context.Context, e *outbox.Envelope) error {
	defer func() {
		if p := recover(); p != nil {
			w.a.note(e.ID)
			panic(p) // the relay recovers it and counts a failure
		}
	}()
	err := w.pub.Publish(ctx, e)
	if err != nil {
		w.a.note(e.ID)
	}
	return err
}

// Validate forwards to pub, for relay.New.
func (w *watch) Validate() error {
	if v, ok := w.pub.(relay.Validator); ok {
		return v.Validate()
	}
	return nil
}

// Describe forwards to pub.
func (w *watch) Describe() string {
	if d, ok := w.pub.(relay.Describer); ok {
		return d.Describe()
	}
	return fmt.Sprintf("%T", w.pub)
}

type batchWatch struct {
	*watch
	bp relay.BatchPublisher
}

func (w *batchWatch) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	defer func() {
		if p := recover(); p != nil {
			for _, e := range es {
				w.a.note(e.ID)
			}
			panic(p)
		}
	}()
	errs := w.bp.PublishBatch(ctx, es)
	for i, e := range es {
		if i >= len(errs) || errs[i] != nil {
			w.a.note(e.ID)
		}
	}
	return errs
}

// maxErrorShown bounds a last error in Drain's report.
const maxErrorShown = 300

// report fails t with the noted events that are not published now, each
// with its state and last error as the table records them.
func (a *attempts) report(t TB, db *gorm.DB) {
	t.Helper()
	a.mu.Lock()
	ids := append([]string(nil), a.ids...)
	a.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	table := tableOf(db)
	var rows []outbox.OutboxEvent
	for start := 0; start < len(ids); start += 1000 {
		var chunk []outbox.OutboxEvent
		err := session(db).Raw("SELECT id, event_id, type, status, attempts, last_error FROM "+table+
			" WHERE status <> 'published' AND event_id IN ? ORDER BY id", ids[start:min(len(ids), start+1000)]).Scan(&chunk).Error
		if err != nil {
			t.Errorf("outboxtest: Drain: reading the events that failed: %v", err)
			return
		}
		rows = append(rows, chunk...)
	}
	if len(rows) == 0 {
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "outboxtest: Drain: %d %s not delivered (AllowFailures() lets a test expect this):",
		len(rows), plural(len(rows), "event was", "events were"))
	for i, r := range rows {
		if i == maxListed {
			fmt.Fprintf(&sb, "\n    … %d more not shown", len(rows)-maxListed)
			break
		}
		last := "no error recorded"
		if r.LastError != nil {
			last = truncate(*r.LastError, maxErrorShown)
		}
		fmt.Fprintf(&sb, "\n    %s %s: %s after %d %s: %s", r.Type, r.EventID, r.Status,
			r.Attempts, plural(r.Attempts, "attempt", "attempts"), last)
	}
	t.Errorf("%s", sb.String())
}
