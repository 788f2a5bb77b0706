package outboxasynq

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox/consume"
)

// DeadLetters reads the archive of an asynq queue, where asynq keeps the
// tasks Handler declared dead (and those whose retries ran out), and runs
// them again: a consume.DeadLetterReader and consume.DeadLetterReplayer,
// for the admin page and the CLI.
type DeadLetters struct {
	insp  *asynq.Inspector
	queue string
}

// NewDeadLetters returns the reader of queue's archive in rdb, asynq's
// Redis.
func NewDeadLetters(rdb redis.UniversalClient, queue string) *DeadLetters {
	return &DeadLetters{insp: asynq.NewInspectorFromRedisClient(rdb), queue: queue}
}

// DeadLetters returns up to limit (at least 1) archived tasks, oldest
// archived first (Inspector.ListArchivedTasks), and the cursor of the
// next page: a page number, so that a page shifts when tasks before it
// leave the archive meanwhile. A DeadMessage's ID is the task id; its
// Envelope is nil for a task that does not carry an outbox event.
func (d *DeadLetters) DeadLetters(ctx context.Context, cursor string, limit int) ([]consume.DeadMessage, string, error) {
	page := 1
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil || n < 1 {
			return nil, "", fmt.Errorf("outboxasynq: bad dead-letter cursor %q", cursor)
		}
		page = n
	}
	limit = max(limit, 1)
	infos, err := d.insp.ListArchivedTasks(d.queue, asynq.PageSize(limit), asynq.Page(page))
	var qi *asynq.QueueInfo
	if err == nil {
		qi, err = d.insp.GetQueueInfo(d.queue)
	}
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("outboxasynq: listing the archive of queue %q: %w", d.queue, err)
	}
	next := ""
	if qi.Archived > page*limit {
		next = strconv.Itoa(page + 1)
	}
	out := make([]consume.DeadMessage, len(infos))
	for i, t := range infos {
		out[i] = consume.DeadMessage{ID: t.ID, Source: "asynq queue " + t.Queue, Reason: t.LastErr,
			Deliveries: t.Retried + 1, DeadAt: t.LastFailedAt}
		out[i].Envelope, _ = Decode(asynq.NewTask(t.Type, t.Payload))
	}
	return out, next, nil
}

// ReplayDead runs the archived tasks of ids again (Inspector.RunTask: back
// to pending, consumed again by the queue's servers), and returns how many
// it replayed; ids that are not archived tasks of the queue are skipped. A
// replayed task keeps its retry count (RunTask does not reset it): one that
// went dead on its last counted run gets one run more.
func (d *DeadLetters) ReplayDead(_ context.Context, ids ...string) (int, error) {
	n := 0
	for _, id := range ids {
		info, err := d.insp.GetTaskInfo(d.queue, id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			continue
		case err != nil:
			return n, fmt.Errorf("outboxasynq: reading task %s of queue %q: %w", id, d.queue, err)
		case info.State != asynq.TaskStateArchived:
			continue
		}
		if err := d.insp.RunTask(d.queue, id); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			return n, fmt.Errorf("outboxasynq: running archived task %s of queue %q: %w", id, d.queue, err)
		}
		n++
	}
	return n, nil
}
