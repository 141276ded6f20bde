package cluster

import (
	"strconv"
	"strings"
)

// The node API answers list and find with each value formatted as the ctl
// programs print it: a string bare, or quoted when it holds a space or one
// of ,={}[]":; a set "[a, b]"; a map "{k=v, k2=v2}". These read them back.

// Text is a scalar value: a quoted string unquoted, "[]" (an empty
// optional value) "".
func Text(s string) string {
	s = strings.TrimSpace(s)
	if s == "[]" {
		return ""
	}
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}

// Set reads "[a, b]" (or a bare scalar, a set of one).
func Set(s string) []string {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		if s == "" {
			return nil
		}
		return []string{Text(s)}
	}
	var out []string
	for _, item := range splitTop(s[1 : len(s)-1]) {
		out = append(out, Text(item))
	}
	return out
}

// Map reads "{k=v, k2=v2}".
func Map(s string) map[string]string {
	s = strings.TrimSpace(s)
	out := map[string]string{}
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return out
	}
	for _, item := range splitTop(s[1 : len(s)-1]) {
		k, v := cutUnquoted(item, '=')
		out[Text(k)] = Text(v)
	}
	return out
}

// splitTop splits on ", " outside quotes.
func splitTop(s string) []string {
	var out []string
	start, inQuote := 0, false
	for i := 0; i < len(s); i++ {
		switch {
		case inQuote && s[i] == '\\':
			i++
		case s[i] == '"':
			inQuote = !inQuote
		case !inQuote && s[i] == ',' && i+1 < len(s) && s[i+1] == ' ':
			out = append(out, s[start:i])
			start = i + 2
			i++
		}
	}
	if rest := s[start:]; strings.TrimSpace(rest) != "" {
		out = append(out, rest)
	}
	return out
}

// cutUnquoted cuts s at the first sep outside quotes.
func cutUnquoted(s string, sep byte) (string, string) {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch {
		case inQuote && s[i] == '\\':
			i++
		case s[i] == '"':
			inQuote = !inQuote
		case !inQuote && s[i] == sep:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// Opt reads an optional value (a set of at most one): "" when empty.
func Opt(s string) string {
	if v := Set(s); len(v) > 0 {
		return v[0]
	}
	return ""
}
