package store

import (
	"strings"
)

// Topic patterns in SQL: the claims leave out the records of paused topic patterns and, in
// the ordered mode, take the ordered records apart from the others, in the statement itself,
// so a paused or ordered backlog never fills a claim.

// topicMatchSQL is a condition on col that holds exactly when courier.MatchTopic(pattern, col)
// does, with its arguments, for every pattern of courier.CheckTopicPattern except one kind: a
// pattern ending in '>' with a literal token after a '*' ("*.created.>"), for which exact is
// false and the condition matches a superset. Literal tokens hold only letters, digits, '_'
// and '-', so the LIKE (PostgreSQL) and GLOB (SQLite, whose LIKE ignores case) patterns need
// no escape but '_' on PostgreSQL; the dot count pins the number of tokens, so a wildcard
// never spans a dot where the pattern has one.
func (s *Store) topicMatchSQL(col, pattern string) (cond string, args []any, exact bool) {
	toks := strings.Split(pattern, ".")
	tail := toks[len(toks)-1] == ">"
	exact = true
	star := false
	for _, tok := range toks {
		switch {
		case tok == "*":
			star = true
		case tok != ">" && star && tail:
			exact = false
		}
	}
	var like strings.Builder
	for i, tok := range toks {
		if i > 0 {
			like.WriteByte('.')
		}
		switch {
		case tok == "*" || tok == ">":
			if s.pg {
				like.WriteByte('%')
			} else {
				like.WriteByte('*')
			}
		case s.pg:
			like.WriteString(strings.ReplaceAll(tok, "_", "!_"))
		default:
			like.WriteString(tok)
		}
	}
	dots := "(length(" + col + ") - length(replace(" + col + ", '.', '')))"
	op := " = ?"
	if tail {
		op = " >= ?"
	}
	match := col + " GLOB ?"
	if s.pg {
		match = col + " LIKE ? ESCAPE '!'"
	}
	return "(" + match + " AND " + dots + op + ")", []any{like.String(), len(toks) - 1}, exact
}

// anyTopicSQL is a condition that holds when col matches one of patterns (false for none),
// and whether it is exact (topicMatchSQL).
func (s *Store) anyTopicSQL(col string, patterns []string) (cond string, args []any, exact bool) {
	if len(patterns) == 0 {
		return "(1 = 0)", nil, true
	}
	exact = true
	parts := make([]string, 0, len(patterns))
	for _, p := range patterns {
		c, a, ok := s.topicMatchSQL(col, p)
		parts = append(parts, c)
		args = append(args, a...)
		exact = exact && ok
	}
	return "(" + strings.Join(parts, " OR ") + ")", args, exact
}

// TopicPatternExact reports whether a claim can match pattern exactly in SQL (topicMatchSQL):
// every pattern but one ending in '>' with a literal token after a '*'.
func TopicPatternExact(pattern string) bool {
	var s Store
	_, _, exact := s.topicMatchSQL("topic", pattern)
	return exact
}
