package outboxkafka

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
)

// logBatch logs one debug line for a batch: how many events were
// published and failed, how many rounds produced again the records of a
// rejected record batch, and the offsets written per partition
// ("topic/partition@first-last", as receipts).
func (p *Publisher) logBatch(ctx context.Context, b *batch, rounds int, took time.Duration) {
	if !p.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	span := map[string][2]int64{}
	published := 0
	for _, r := range b.produced {
		if r == nil {
			continue
		}
		published++
		k := r.Topic + "/" + strconv.Itoa(int(r.Partition))
		if s, ok := span[k]; ok {
			span[k] = [2]int64{min(s[0], r.Offset), max(s[1], r.Offset)}
		} else {
			span[k] = [2]int64{r.Offset, r.Offset}
		}
	}
	parts := make([]string, 0, len(span))
	for k, s := range span {
		parts = append(parts, fmt.Sprintf("%s@%d-%d", k, s[0], s[1]))
	}
	slices.Sort(parts)
	p.cfg.Logger.DebugContext(ctx, "outboxkafka: batch produced", "events", len(b.es), "published", published,
		"failed", len(b.es)-published, "rounds_after_rejection", rounds, "offsets", strings.Join(parts, " "), "took", took)
}
