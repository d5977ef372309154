package courier

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ScheduleTiming is when a schedule fires: Cron (five fields, in TimeZone) or Interval (fire
// times are the multiples of Interval since the Unix epoch, as Temporal's), each fire time
// moved later by up to Jitter. A schedule that rides the timer wheel computes its triggers
// with it.
type ScheduleTiming struct {
	Cron     string
	Interval time.Duration
	TimeZone string // IANA name; empty is UTC
	Jitter   time.Duration
}

// scheduleParser reads the five standard fields and the @-descriptors (@daily, @hourly, …).
var scheduleParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CompiledTiming is a ScheduleTiming checked and ready to compute fire times.
type CompiledTiming struct {
	t     ScheduleTiming
	loc   *time.Location
	sched cron.Schedule
}

// Compile checks t: a cron expression the parser reads (its error says why not), or an
// interval of at least a second; a known time zone.
func (t ScheduleTiming) Compile() (CompiledTiming, error) {
	c := CompiledTiming{t: t, loc: time.UTC}
	if t.TimeZone != "" {
		loc, err := time.LoadLocation(t.TimeZone)
		if err != nil {
			return c, fmt.Errorf("unknown time zone %q", t.TimeZone)
		}
		c.loc = loc
	}
	switch {
	case (t.Cron == "") == (t.Interval == 0):
		return c, fmt.Errorf("give cron or interval, exactly one")
	case t.Cron != "":
		if strings.HasPrefix(strings.TrimSpace(t.Cron), "CRON_TZ=") || strings.HasPrefix(strings.TrimSpace(t.Cron), "TZ=") {
			return c, fmt.Errorf("give the time zone as time_zone, not in the cron expression")
		}
		s, err := scheduleParser.Parse(t.Cron)
		if err != nil {
			return c, err
		}
		c.sched = s
	case t.Interval < time.Second:
		return c, fmt.Errorf("interval must be at least 1s")
	}
	if t.Jitter < 0 {
		return c, fmt.Errorf("jitter must not be negative")
	}
	return c, nil
}

// Next is the first nominal fire time strictly after after (zero when the cron expression
// never fires again). Cron times are wall-clock times in the schedule's zone: a time that a
// daylight-saving change skips does not fire that day (02:30 on the spring-forward night), and
// a time that a change repeats fires at both occurrences (01:30 EDT and 01:30 EST).
func (c CompiledTiming) Next(after time.Time) time.Time {
	if c.t.Interval > 0 {
		iv := c.t.Interval
		n := after.UnixNano()
		next := (n/int64(iv))*int64(iv) + int64(iv)
		if n < 0 && n%int64(iv) != 0 {
			next -= int64(iv)
		}
		return time.Unix(0, next).UTC()
	}
	if c.sched == nil {
		return time.Time{}
	}
	return c.sched.Next(after.In(c.loc)).UTC()
}

// FireAt is when the trigger of nominal time nominal fires: nominal moved later by the
// schedule's jitter, a delay that the schedule id and nominal time decide, so every worker
// computes the same one.
func (c CompiledTiming) FireAt(id string, nominal time.Time) time.Time {
	if c.t.Jitter <= 0 {
		return nominal
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	_, _ = fmt.Fprintf(h, "@%d", nominal.UnixNano())
	steps := uint64(c.t.Jitter / time.Millisecond)
	if steps == 0 {
		return nominal
	}
	return nominal.Add(time.Duration(h.Sum64()%steps) * time.Millisecond)
}

// ScheduleRecord is a schedule that rides the timer wheel (its business type is bucketed): a
// row in courier's database that holds its timing and state, and whose triggers are bucketed
// timers (ScheduleTriggerID), each written by the claim of the one before.
type ScheduleRecord struct {
	ID            string
	BizType       string
	Timing        ScheduleTiming
	CatchupWindow time.Duration
	Payload       []byte
	Spec          []byte // the API's spec as it was given, shown back by GET
	Paused        bool
	Note          string
	// Version goes up with every update, pause and unpause; a trigger carries the version it
	// was written under, and only a trigger of the current version writes the next one.
	Version   int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ScheduleFilter selects schedules for a list page.
type ScheduleFilter struct {
	BizType string
	Paused  *bool
	After   string // continue after this schedule id
	Limit   int
}

// ScheduleTriggerID is the biz_id of a wheel schedule's trigger for a nominal fire time: the
// (schedule, fire time) pair is the timer's key, so a trigger exists once.
func ScheduleTriggerID(id string, nominal time.Time) string {
	return id + "@" + nominal.UTC().Format(time.RFC3339Nano)
}

// ScheduleManualTriggerID is the biz_id of a trigger asked for by hand (trigger now).
func ScheduleManualTriggerID(id string, at time.Time) string {
	return id + "@now/" + at.UTC().Format(time.RFC3339Nano)
}

// ScheduleMissedError is the last_error of a trigger found past its catch-up window: it was
// not delivered.
const ScheduleMissedError = "missed: past the schedule's catchup_window"

// ScheduleTriggers is what a wheel schedule's triggers say about it, over the rows kept (its
// business type's timer retention).
type ScheduleTriggers struct {
	Next        *time.Time  // the pending trigger's fire time
	NextNominal time.Time   // and its nominal fire time (before jitter)
	Recent      []time.Time // the latest fire times claimed, newest first (up to 10)
	Runs        int         // triggers claimed
	Missed      int         // triggers found past the catch-up window
}
