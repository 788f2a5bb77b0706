package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gormoutbox/outbox/admin"
)

// Environment variables of the admin page's basic authentication.
const (
	adminUserEnv     = "OUTBOX_ADMIN_USER"
	adminPasswordEnv = "OUTBOX_ADMIN_PASSWORD"
)

func runAdmin(ctx context.Context, c *cli, args []string) error {
	f := newFlags(c, "admin", "admin [--listen ADDR] [--prefix PATH] [--read-only] [flags]",
		"Serves the admin page: counts, lag, relays, the last hour, events by filter, one\n"+
			"event, blocked keys, and actions (replay, redeliver, purge, skip a key's head),\n"+
			"each confirmed first. Until SIGINT/SIGTERM.\n\n"+
			"Basic authentication with $"+adminUserEnv+" and $"+adminPasswordEnv+" is required\n"+
			"unless --listen is a loopback address (then it is used when both are set): without it,\n"+
			"anyone who reaches the address (any local user or process) reads payloads and repairs\n"+
			"events, and a warning says so at start.\n\n"+
			"Only requests whose Host is a loopback address, localhost or a name given to\n"+
			"--allow-host are answered (403 otherwise): a web page cannot reach the admin page\n"+
			"through DNS rebinding. Behind a proxy, allow the name it forwards.\n\n"+
			"With --dead-letters, the Consumers page lists each consumer's dead letter beside the\n"+
			"outbox's dead events (the overview names those holding messages), and replays a\n"+
			"message, confirmed first, unless --read-only.\n\n"+deadLettersHelp)
	var hosts stringList
	f.fs.Var(&hosts, "allow-host", "also answer requests for this `host` (name[:port], repeatable; * for any, with authentication only)")
	listen := f.fs.String("listen", "127.0.0.1:8080", "serve on this `address`")
	prefix := f.fs.String("prefix", "", "serve under this `path`, e.g. /outbox")
	readOnly := f.fs.Bool("read-only", false, "refuse every change (GET only)")
	dlValues := f.withDeadLetters()
	if err := f.parse(args); err != nil {
		return err
	}
	sources, err := f.deadLetters(*dlValues)
	if err != nil {
		return err
	}
	user, password, err := adminCredentials(c, *listen, hosts)
	if err != nil {
		return err
	}
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.stderr, nil))
	opts := []admin.Option{admin.WithTable(f.table), admin.WithPrefix(*prefix), admin.WithLogger(log), admin.WithAllowedHosts(hosts...)}
	for _, s := range sources {
		opts = append(opts, admin.WithDeadLetters(s.name, s))
	}
	if *readOnly {
		opts = append(opts, admin.WithReadOnly())
	}
	if user != "" {
		opts = append(opts, admin.WithMiddleware(admin.BasicAuth(user, password)))
	} else {
		fmt.Fprintf(c.stderr, "WARNING: serving the admin page without authentication: anyone who reaches %s (any local user or process) reads payloads and repairs events; set %s and %s\n",
			*listen, adminUserEnv, adminPasswordEnv)
	}
	h, err := admin.NewHandler(db, opts...)
	if err != nil {
		if errors.Is(err, admin.ErrInvalidOption) {
			return usagef("%v", err)
		}
		return err
	}
	return serveAdmin(ctx, c, *listen, strings.TrimRight(*prefix, "/"), h)
}

// adminCredentials returns the basic authentication's credentials, and
// refuses to serve without them beyond loopback.
func adminCredentials(c *cli, listen string, hosts []string) (user, password string, err error) {
	user, password = c.getenv(adminUserEnv), c.getenv(adminPasswordEnv)
	c.secrets.add(password)
	switch {
	case (user == "") != (password == ""):
		return "", "", usagef("set both %s and %s, or neither", adminUserEnv, adminPasswordEnv)
	case user == "" && !loopback(listen):
		return "", "", usagef("--listen %s is not a loopback address: set %s and %s (basic authentication)", listen, adminUserEnv, adminPasswordEnv)
	case user == "" && slices.Contains(hosts, "*"):
		return "", "", usagef("--allow-host * answers any host, which lets a web page reach the admin page through DNS rebinding: set %s and %s (basic authentication), or allow names", adminUserEnv, adminPasswordEnv)
	}
	return user, password, nil
}

// serveAdmin serves h on addr until ctx ends.
func serveAdmin(ctx context.Context, c *cli, addr, prefix string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(prefix+"/", h)
	if prefix != "" {
		mux.Handle(prefix, h)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(c.stdout, "serving the admin page at http://%s%s/\n", ln.Addr(), prefix)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
