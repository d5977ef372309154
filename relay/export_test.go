package relay

import "time"

// SetAfter replaces the timer the source loops linger on, so a test sees each linger wait
// without waiting. Call it before Run.
func (r *Relay) SetAfter(after func(time.Duration) <-chan time.Time) { r.after = after }
