package dispatch

import (
	"slices"
	"time"

	"github.com/courier-oss/courier"
)

// KeyCandidate is a ready task of a keyed queue's band, as the turns see it.
type KeyCandidate struct {
	TaskID    string
	Version   int64
	Key       string
	CreatedAt time.Time
}

// keyQueue is one key's ready tasks of a band while pickTurns hands out the slots.
type keyQueue struct {
	key    string
	weight int
	held   int
	next   []KeyCandidate
}

// before says whether this key's turn comes before o's: fewer held for its weight
// (held/weight compared without division), then the older next task, then the lower key.
func (k *keyQueue) before(o *keyQueue) bool {
	if l, r := k.held*o.weight, o.held*k.weight; l != r {
		return l < r
	}
	if !k.next[0].CreatedAt.Equal(o.next[0].CreatedAt) {
		return k.next[0].CreatedAt.Before(o.next[0].CreatedAt)
	}
	return k.key < o.key
}

// pickTurns chooses up to n of cands (grouped by key, each key's in claim order) for the slots,
// given the tasks each key has in Processing: slot by slot, to the key with the lowest
// in-flight count for its weight that is under the per-key limit (keyQueue.before). So every
// key with ready tasks gets its share of the limit, and a key with one task waiting gets the
// next free slot before a key already holding more; unkeyed tasks (key "") are one group that
// the per-key limit does not cap.
func pickTurns(q courier.Queue, cands []KeyCandidate, n int, inFlight map[string]int) []KeyCandidate {
	var keys []*keyQueue
	for i := 0; i < len(cands); {
		j := i
		for j < len(cands) && cands[j].Key == cands[i].Key {
			j++
		}
		k := cands[i].Key
		keys = append(keys, &keyQueue{key: k, weight: q.KeyWeight(k), held: inFlight[k], next: slices.Clip(cands[i:j])})
		i = j
	}
	var out []KeyCandidate
	for len(out) < n {
		var best *keyQueue
		for _, k := range keys {
			if len(k.next) == 0 || (k.key != "" && q.PerKeyLimit > 0 && k.held >= q.PerKeyLimit) {
				continue
			}
			if best == nil || k.before(best) {
				best = k
			}
		}
		if best == nil {
			break
		}
		out = append(out, best.next[0])
		best.next = best.next[1:]
		best.held++
	}
	return out
}
