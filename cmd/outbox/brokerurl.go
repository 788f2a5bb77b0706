package main

import (
	"net/url"
	"slices"
	"strings"
)

// brokerURLs reads a broker's address flag (or its variable env when the
// flag is empty), checks each of its comma-separated URLs before a client
// library parses it, so that no library's error echoes it, and registers
// their secrets: a password, or a user without one (a NATS token).
func (f *relayFlags) brokerURLs(flag string, value *string, env, example string, schemes ...string) ([]*url.URL, error) {
	if *value == "" {
		*value = f.c.getenv(env)
	}
	if *value == "" {
		return nil, usagef("--to %s needs %s (or %s)", f.to, flag, env)
	}
	var out []*url.URL
	for _, raw := range strings.Split(*value, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Host == "" || !slices.Contains(schemes, u.Scheme) {
			return nil, usagef("%s %s: not a valid %s URL%s: want %s", flag, maskUserinfo(*value), schemes[0], urlProblem(err), example)
		}
		if pw, ok := u.User.Password(); ok {
			f.c.secrets.add(pw, url.PathEscape(pw), url.QueryEscape(pw))
		} else if u.User != nil {
			f.c.secrets.add(u.User.Username())
		}
		out = append(out, u)
	}
	return out, nil
}

// maskUserinfo masks what maskDSN masks and the user of every URL of a
// comma-separated list too (a NATS token is a user without a password).
func maskUserinfo(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if start := strings.Index(p, "://"); start >= 0 {
			if at := strings.LastIndex(p, "@"); at > start {
				p = p[:start+3] + mask + p[at:]
			}
		}
		parts[i] = maskDSN(p)
	}
	return strings.Join(parts, ",")
}

// hosts lists the URLs' host:port, for descriptions.
func hosts(us []*url.URL) string {
	hs := make([]string, len(us))
	for i, u := range us {
		hs[i] = u.Host
	}
	return strings.Join(hs, ",")
}
