package dispatch

import "github.com/courier-oss/courier"

// Chooser hands out slots to bands in proportion to their weights, counting only bands that have
// work: an empty band's share goes to the others in proportion to theirs. It uses smooth
// weighted round robin, so shares are exact over any run of picks, not only on average, and a
// band never waits longer than the sum of weights over its own weight. Not safe for concurrent
// use.
type Chooser struct {
	w       courier.BandWeights
	current [courier.PriorityBands]int
}

// NewChooser returns a chooser with the given weights, which courier.BandWeights.Validate
// accepted (a band with a zero weight would never be picked).
func NewChooser(w courier.BandWeights) *Chooser {
	return &Chooser{w: w}
}

// Pick returns the band (1 to courier.PriorityBands) that gets the next slot among those for which hasWork is true,
// or false if no band with a positive weight has work.
func (c *Chooser) Pick(hasWork func(band int) bool) (int, bool) {
	total, best := 0, -1
	for i := range courier.PriorityBands {
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
