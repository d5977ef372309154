package courier

import "math"

// Rate is a token-bucket rate a queue, a business type or an API key is configured with (the
// gateway's admission control enforces it: docs/admission.md): PerSecond tokens are added each
// second, up to Burst, and each admitted request takes one. The zero Rate is unlimited.
type Rate struct {
	PerSecond float64 // 0: unlimited
	Burst     int     // 0: PerSecond rounded up, at least 1
}

// Limits of a Rate.
const (
	MaxRatePerSecond = 100000
	MaxRateBurst     = 1000000
	// MaxQueuePending bounds a queue's max_pending.
	MaxQueuePending = 100000000
)

// Unlimited reports whether r admits everything.
func (r Rate) Unlimited() bool { return r.PerSecond <= 0 }

// EffectiveBurst is the bucket size: Burst, or PerSecond rounded up (at least 1) when unset.
func (r Rate) EffectiveBurst() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return max(1, int(math.Ceil(r.PerSecond)))
}

// CheckRate validates a configured rate: rateField is its per-second field and burstField its
// burst field, named in the validation_failed error.
func CheckRate(rateField, burstField string, r Rate) error {
	switch {
	case math.IsNaN(r.PerSecond) || r.PerSecond < 0 || r.PerSecond > MaxRatePerSecond:
		return badField(rateField, "%s must be from 0 (unlimited) to %d per second", rateField, MaxRatePerSecond)
	case r.Burst < 0 || r.Burst > MaxRateBurst:
		return badField(burstField, "%s must be from 0 (the rate, rounded up) to %d", burstField, MaxRateBurst)
	case r.Burst > 0 && r.PerSecond == 0:
		return badField(burstField, "%s needs %s: a burst without a rate limits nothing", burstField, rateField)
	}
	return nil
}

// InsertLimit is the queue's insert rate (tasks inserted per second on each gateway).
func (q Queue) InsertLimit() Rate { return Rate{PerSecond: q.InsertRate, Burst: q.InsertBurst} }

// checkAdmission validates the queue's admission settings.
func (q Queue) checkAdmission() error {
	if err := CheckRate("insert_rate_per_second", "insert_burst", q.InsertLimit()); err != nil {
		return err
	}
	if q.MaxPending < 0 || q.MaxPending > MaxQueuePending {
		return badField("max_pending", "max_pending must be from 0 (unbounded) to %d", MaxQueuePending)
	}
	return nil
}

// InsertLimit is the business type's insert rate (timers created per second on each gateway).
func (b BizType) InsertLimit() Rate { return Rate{PerSecond: b.InsertRate, Burst: b.InsertBurst} }
