package store

// SetListenURL points the connections that LISTEN elsewhere than the database (to test what a
// cache does while its listener cannot connect).
func (s *Store) SetListenURL(u string) { s.url = u }

// TopicsRegexp is topicsRegexp, for the test that PostgreSQL's ~ agrees with MatchTopic.
var TopicsRegexp = topicsRegexp
