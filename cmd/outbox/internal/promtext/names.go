package promtext

import (
	"strings"
)

// Name returns the Prometheus name of an OpenTelemetry metric, following
// the OpenTelemetry-to-Prometheus compatibility rules: characters other
// than letters, digits, underscores and colons become underscores (so
// "outbox.publish.duration" becomes "outbox_publish_duration"); the unit
// is appended as a word ("s" as "_seconds", "By" as "_bytes", "1" on a
// gauge as "_ratio"; annotations in braces such as "{event}" are
// dropped); and a monotonic counter ends in "_total".
func Name(name, unit string, counter, gauge bool) string {
	n := sanitize(name)
	if suffix := unitSuffix(unit, gauge); suffix != "" && !strings.HasSuffix(n, "_"+suffix) {
		n += "_" + suffix
	}
	if counter && !strings.HasSuffix(n, "_total") {
		n += "_total"
	}
	return n
}

// LabelName returns the Prometheus label name of an attribute key.
func LabelName(key string) string {
	n := sanitizeWith(key, false)
	if n != "" && n[0] >= '0' && n[0] <= '9' {
		n = "key_" + n
	}
	return n
}

func sanitize(s string) string {
	n := sanitizeWith(s, true)
	if n != "" && n[0] >= '0' && n[0] <= '9' {
		n = "_" + n
	}
	return n
}

// sanitizeWith replaces invalid characters by underscores and collapses
// runs of underscores.
func sanitizeWith(s string, colons bool) string {
	var sb strings.Builder
	last := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || colons && c == ':'
		if !ok {
			c = '_'
		}
		if c == '_' && last == '_' {
			continue
		}
		sb.WriteByte(c)
		last = c
	}
	return sb.String()
}

// units maps UCUM units to their Prometheus words.
var units = map[string]string{
	"d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds",
	"By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes", "GiBy": "gibibytes", "TiBy": "tibibytes",
	"KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes", "TBy": "terabytes",
	"m": "meters", "V": "volts", "A": "amperes", "J": "joules", "W": "watts", "g": "grams",
	"Cel": "celsius", "Hz": "hertz", "%": "percent",
}

// perUnits maps the denominators of "X/Y" units.
var perUnits = map[string]string{
	"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year",
}

// unitSuffix returns the word a unit adds to a metric name, or "".
func unitSuffix(unit string, gauge bool) string {
	// Annotations ("{event}", "By{packet}") say nothing Prometheus keeps.
	for {
		i := strings.IndexByte(unit, '{')
		j := strings.IndexByte(unit, '}')
		if i < 0 || j < i {
			break
		}
		unit = unit[:i] + unit[j+1:]
	}
	unit = strings.TrimSpace(unit)
	if unit == "1" {
		if gauge {
			return "ratio"
		}
		return ""
	}
	if unit == "" {
		return ""
	}
	main, per, hasPer := strings.Cut(unit, "/")
	word := words(main, units)
	if hasPer {
		if p := words(per, perUnits); p != "" {
			if word == "" {
				return "per_" + p
			}
			return word + "_per_" + p
		}
	}
	return word
}

func words(u string, table map[string]string) string {
	if w, ok := table[u]; ok {
		return w
	}
	return strings.Trim(sanitizeWith(u, false), "_")
}
