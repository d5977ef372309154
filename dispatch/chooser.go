package dispatch

import "fmt"

// Bands is the number of priority bands: 1 (highest) to 5 (lowest).
const Bands = 5

// Weights are the relative shares of bands 1..5.
type Weights [Bands]int

// DefaultWeights gives bands 1–3 about 80 % of the slots and bands 4–5 about 20 % while every
// band has a backlog.
var DefaultWeights = Weights{35, 25, 20, 12, 8}

// Validate checks that no weight is negative and at least one is positive.
func (w Weights) Validate() error {
	sum := 0
	for i, v := range w {
		if v < 0 {
			return fmt.Errorf("weight of priority %d is negative", i+1)
		}
		sum += v
	}
	if sum == 0 {
		return fmt.Errorf("at least one priority weight must be positive")
	}
	return nil
}

// Chooser hands out slots to bands in proportion to their weights, counting only bands that have
// work: an empty band's share goes to the others in proportion to theirs. It uses smooth
// weighted round robin, so shares are exact over any run of picks, not only on average, and a
// band never waits longer than the sum of weights over its own weight. Not safe for concurrent
// use.
type Chooser struct {
	w       Weights
	current [Bands]int
}

// NewChooser returns a chooser with the given weights (DefaultWeights if all are zero).
func NewChooser(w Weights) *Chooser {
	if w == (Weights{}) {
		w = DefaultWeights
	}
	return &Chooser{w: w}
}

// Pick returns the band (1..5) that gets the next slot among those for which hasWork is true,
// or false if no band with a positive weight has work.
func (c *Chooser) Pick(hasWork func(band int) bool) (int, bool) {
	total, best := 0, -1
	for i := 0; i < Bands; i++ {
		if c.w[i] == 0 || !hasWork(i+1) {
			continue
		}
		c.current[i] += c.w[i]
		total += c.w[i]
		if best < 0 || c.current[i] > c.current[best] {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	c.current[best] -= total
	return best + 1, true
}
