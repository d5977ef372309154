package courier

// Priorities run from 1 (high) to PriorityBands (low); each priority is a band of a queue's
// backlog, and a queue's slots are shared among the bands that have a backlog in proportion to
// their weights.
const (
	PriorityBands   = 5
	MaxPriority     = PriorityBands
	DefaultPriority = 3
)

// BandWeights are a queue's relative shares of its slots, one per band (index 0 is priority
// 1). Every weight is from 1 to MaxBandWeight: a zero weight would starve its band, so it is
// refused rather than read as "none" (leave the weights out for the defaults). An empty band's
// share goes to the others in proportion to theirs.
type BandWeights [PriorityBands]int

// MaxBandWeight bounds one band's weight.
const MaxBandWeight = 1000

// DefaultBandWeights give bands 1–3 about 80 % of the slots and bands 4–5 about 20 % while
// every band has a backlog.
var DefaultBandWeights = BandWeights{35, 25, 20, 12, 8}

// Validate refuses a weight outside 1..MaxBandWeight, naming the band.
func (w BandWeights) Validate() error {
	for i, v := range w {
		if v < 1 || v > MaxBandWeight {
			return badField("weights", "every priority weight must be from 1 to %d (weight of priority %d is %d): a zero weight would starve its band",
				MaxBandWeight, i+1, v)
		}
	}
	return nil
}

// BandWeightsOf reads weights as a request lists them: exactly one per band, each valid.
func BandWeightsOf(w []int) (BandWeights, error) {
	var out BandWeights
	if len(w) != PriorityBands {
		return out, badField("weights", "weights must list %d weights, for priorities 1 to %d", PriorityBands, PriorityBands)
	}
	copy(out[:], w)
	return out, out.Validate()
}
