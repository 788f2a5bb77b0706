package outboxredis_test

import (
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/admin"
)

// A consumer's dead-letter stream on the admin page, beside the outbox's
// own dead events: its Consumers page lists the messages and replays them,
// and its overview names the dead letter while it holds any. (Needs
// Redis, so it is compiled, not run.)
func ExampleNewDeadLetters_admin() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	h, err := admin.NewHandler(db, // the application's *gorm.DB
		admin.WithPrefix("/outbox"),
		admin.WithMiddleware(admin.BasicAuth("ops", "correct horse")),
		admin.WithDeadLetters("shop:orders / order-stats", outboxredis.NewDeadLetters(rdb, "shop:orders:dead")),
	)
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/outbox/", h)
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", nil))
}
