package outboxasynq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// The admin page and the CLI take them as consume's interfaces.
var _ interface {
	consume.DeadLetterReader
	consume.DeadLetterReplayer
} = (*outboxasynq.DeadLetters)(nil)

// A queue's archive read back a page at a time, oldest first, and
// replayed: the replayed tasks run again and leave the archive; an id that
// is not an archived task is skipped.
func TestDeadLettersListPageAndReplay(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, addr))
	var ids []string
	for i := range 5 {
		ids = append(ids, fmt.Sprintf("ev-%d", i))
		must(t, pub.Publish(t.Context(), &outbox.Envelope{ID: ids[i], Type: "t", Topic: q, Payload: []byte(`{}`)}))
	}
	var fixed atomic.Bool
	var mu sync.Mutex
	handled := map[string]int{}
	mux := asynq.NewServeMux()
	mux.Handle("t", outboxasynq.Handler(handle(func(_ context.Context, e *outbox.Envelope) error {
		if !fixed.Load() {
			return outbox.Permanent(errors.New("no such customer"))
		}
		mu.Lock()
		defer mu.Unlock()
		handled[e.ID]++
		return nil
	}), consume.WithLogger(testLogger(t))))
	startServer(t, addr, q, 1, mux, serveWithPolicy)
	ins := newInspector(t, addr)
	waitFor(t, 15*time.Second, "five archived tasks", func() bool {
		qi, err := ins.GetQueueInfo(q)
		return err == nil && qi.Archived == 5
	})

	dl := outboxasynq.NewDeadLetters(newRedis(t, addr), q)
	var all []consume.DeadMessage
	var sizes []int
	for cursor := ""; ; {
		page, next, err := dl.DeadLetters(t.Context(), cursor, 2)
		must(t, err)
		all, sizes = append(all, page...), append(sizes, len(page))
		if next == "" {
			break
		}
		cursor = next
	}
	if fmt.Sprint(sizes) != "[2 2 1]" {
		t.Errorf("pages of %v, want [2 2 1]", sizes)
	}
	for i, m := range all {
		if i >= len(ids) || m.ID != ids[i] || m.Envelope == nil || m.Envelope.ID != ids[i] || m.Source != "asynq queue "+q ||
			m.Deliveries != 1 || !strings.Contains(m.Reason, "no such customer") || time.Since(m.DeadAt) > time.Minute {
			t.Errorf("dead letter %d: %+v", i, m)
		}
	}

	fixed.Store(true)
	n, err := dl.ReplayDead(t.Context(), ids[0], ids[2], ids[4], "no-such-task")
	must(t, err)
	if n != 3 {
		t.Errorf("replayed %d, want 3", n)
	}
	waitFor(t, 15*time.Second, "the replayed tasks run again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 3
	})
	left, _, err := dl.DeadLetters(t.Context(), "", 10)
	must(t, err)
	if len(left) != 2 || left[0].ID != ids[1] || left[1].ID != ids[3] {
		t.Errorf("archive after the replay holds %+v, want ev-1 and ev-3", left)
	}
	if empty, next, err := outboxasynq.NewDeadLetters(newRedis(t, addr), "no-such-queue").DeadLetters(t.Context(), "", 10); err != nil || len(empty) != 0 || next != "" {
		t.Errorf("the archive of a queue that does not exist: %v, %q, %v", empty, next, err)
	}
}
