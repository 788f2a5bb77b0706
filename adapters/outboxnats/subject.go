package outboxnats

import (
	"fmt"
	"strings"
	"unicode"
)

// checkSubject reports why subject cannot be published to, or nil: NATS
// subjects are tokens separated by ".", none empty, none a wildcard ("*"
// or ">"), with no white space or control character.
func checkSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("subject is empty")
	}
	if i := strings.IndexFunc(subject, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("subject %q holds white space or a control character", subject)
	}
	for tok := range strings.SplitSeq(subject, ".") {
		switch tok {
		case "":
			return fmt.Errorf("subject %q has an empty token", subject)
		case "*", ">":
			return fmt.Errorf("subject %q has the wildcard token %q", subject, tok)
		}
	}
	return nil
}

// checkPrefix reports why prefix cannot start subjects: prefix followed by
// a token must be a valid subject ("shop." and "shop.v1." are prefixes; so
// is "" and "shop-", which glues to the first token).
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := checkSubject(prefix + "x"); err != nil {
		return fmt.Errorf("subject prefix %q: %w", prefix, err)
	}
	return nil
}
