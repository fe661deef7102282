// Package window decides with an upgrade's maintenance windows
// (spec.nodeUpgradeOption.maintenanceWindows) whether a node may begin its
// upgrade at a moment, and when it next may: pure, over the windows and
// the moment. A window is a span of wall-clock time in its time zone that
// opens on the days it names; the windows of a plan are a union.
package window

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	// The manager's image need not have a time zone database: the one
	// built into the binary stands in.
	_ "time/tzdata"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// Path is where a plan's windows are, for messages.
const Path = "spec.nodeUpgradeOption.maintenanceWindows"

// Schedule is a plan's maintenance windows, parsed. The zero Schedule has
// no window: it is always open.
type Schedule struct {
	windows []window
}

// window is one parsed MaintenanceWindow.
type window struct {
	// days by time.Weekday: the days the window opens on.
	days [7]bool
	// start and end are minutes after midnight; end <= start ends on the
	// next day.
	start, end int
	loc        *time.Location
}

// Problem is what is wrong with one field of a window.
type Problem struct {
	// Index is the window's place in the list; Field is days, start, end
	// or timeZone.
	Index int
	Field string
	Value string
	// Detail says what is wrong and how to fix it.
	Detail string
}

// Path is the field's path in the plan.
func (p Problem) Path() string { return fmt.Sprintf("%s[%d].%s", Path, p.Index, p.Field) }

func (p Problem) Error() string { return fmt.Sprintf("%s: %q %s", p.Path(), p.Value, p.Detail) }

// Problems are what Parse refuses, every one of them.
type Problems []Problem

func (ps Problems) Error() string {
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.Error()
	}
	return strings.Join(msgs, "; ")
}

// Parse reads the windows. Its error is Problems: each field that cannot
// be read, with what to write instead. The CRD refuses most of them; the
// time zone's name only the webhook and Parse can judge.
func Parse(ws []v1beta1.MaintenanceWindow) (Schedule, error) {
	var s Schedule
	var problems Problems
	for i, w := range ws {
		pw := window{}
		problem := func(field, value, detail string) {
			problems = append(problems, Problem{Index: i, Field: field, Value: value, Detail: detail})
		}
		for _, d := range w.Days {
			day := slices.Index(v1beta1.MaintenanceWindowDays, d)
			if day < 0 {
				problem("days", d, "is not a day: name days as Mon, Tue, Wed, Thu, Fri, Sat and Sun")
				continue
			}
			pw.days[day] = true
		}
		if len(w.Days) == 0 {
			pw.days = [7]bool{true, true, true, true, true, true, true}
		}
		var ok bool
		if pw.start, ok = clock(w.Start); !ok {
			problem("start", w.Start, "is not a time of day: write it as HH:MM on the 24-hour clock, e.g. 22:00")
		}
		if pw.end, ok = clock(w.End); !ok {
			problem("end", w.End, "is not a time of day: write it as HH:MM on the 24-hour clock, e.g. 04:00 (an end not after the start closes the window the next day)")
		}
		var err error
		if pw.loc, err = location(w.TimeZone); err != nil {
			problem("timeZone", w.TimeZone, err.Error())
		}
		s.windows = append(s.windows, pw)
	}
	if len(problems) > 0 {
		return Schedule{}, problems
	}
	return s, nil
}

// clock reads HH:MM as minutes after midnight.
func clock(hhmm string) (int, bool) {
	t, err := time.Parse("15:04", hhmm)
	if err != nil || len(hhmm) != len("15:04") {
		return 0, false
	}
	return t.Hour()*60 + t.Minute(), true
}

// locations caches the time zones read, by name: a plan's windows are
// read on every pass.
var locations sync.Map

// location loads an IANA time zone; "" is UTC.
func location(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if name == "Local" {
		return nil, errors.New("is the manager's own time zone, which need not be the operator's: name the zone, e.g. Europe/Berlin or UTC")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, errors.New("is not a known time zone: use an IANA time zone name, e.g. Europe/Berlin, America/New_York or UTC " +
			"(the TZ identifiers of https://en.wikipedia.org/wiki/List_of_tz_database_time_zones; names are case-sensitive)")
	}
	locations.Store(name, loc)
	return loc, nil
}

// Always reports whether the schedule has no window: a node may begin at
// any time.
func (s Schedule) Always() bool { return len(s.windows) == 0 }

// Open reports whether a node may begin its upgrade at now: the schedule
// has no window, or now is inside one of them.
func (s Schedule) Open(now time.Time) bool {
	if s.Always() {
		return true
	}
	for _, w := range s.windows {
		if _, ok := w.containing(now); ok {
			return true
		}
	}
	return false
}

// Opening is when a window opens.
type Opening struct {
	At time.Time
	// Local is the window's start on its own clock, e.g. "Sat 22:00
	// Europe/Berlin".
	Local string
}

// String says it for messages: "2026-11-28T21:00:00Z (Sat 22:00
// Europe/Berlin)".
func (o Opening) String() string {
	return fmt.Sprintf("%s (%s)", o.At.UTC().Format(time.RFC3339), o.Local)
}

// NextOpen is the first moment at or after now at which a window is open:
// now itself while one is.
func (s Schedule) NextOpen(now time.Time) Opening {
	if s.Always() {
		return Opening{At: now, Local: "no maintenance window set"}
	}
	var next Opening
	for _, w := range s.windows {
		if _, ok := w.containing(now); ok {
			return Opening{At: now, Local: "open now"}
		}
		if at, ok := w.nextStart(now); ok && (next.At.IsZero() || at.Before(next.At)) {
			next = Opening{At: at, Local: at.In(w.loc).Format("Mon 15:04 ") + w.loc.String()}
		}
	}
	return next
}

// Closes is when the windows open at now close: the end of the window
// open then, and of any that is open as it closes. It is now when none is
// open, and zero when they never close (no window, or windows that join up
// all week).
func (s Schedule) Closes(now time.Time) time.Time {
	if s.Always() {
		return time.Time{}
	}
	t := now
	// Seven days of windows that each last at most one: past that they
	// join up for good.
	for range 8 * (len(s.windows) + 1) {
		var end time.Time
		for _, w := range s.windows {
			if e, ok := w.containing(t); ok && e.After(end) {
				end = e
			}
		}
		if end.IsZero() {
			return t
		}
		t = end
	}
	return time.Time{}
}

// span is the window that opens on the day of y, m, d in its zone, and
// whether it opens on that day at all. time.Date takes the wall clock
// through daylight saving time changes (a start in the hour skipped in
// spring is taken as an hour later).
func (w window) span(y int, m time.Month, d int) (start, end time.Time, ok bool) {
	start = time.Date(y, m, d, w.start/60, w.start%60, 0, 0, w.loc)
	endDay := d
	if w.end <= w.start {
		endDay++
	}
	end = time.Date(y, m, endDay, w.end/60, w.end%60, 0, 0, w.loc)
	day := time.Date(y, m, d, 12, 0, 0, 0, w.loc).Weekday()
	return start, end, w.days[day]
}

// containing returns when the window that holds t closes, and whether one
// does: one that opened on t's day or the day before (a window lasts at
// most a day).
func (w window) containing(t time.Time) (time.Time, bool) {
	local := t.In(w.loc)
	for _, back := range []int{0, -1} {
		s, e, ok := w.span(local.Year(), local.Month(), local.Day()+back)
		if ok && !t.Before(s) && t.Before(e) {
			return e, true
		}
	}
	return time.Time{}, false
}

// nextStart is the first start of the window after t, within a week.
func (w window) nextStart(t time.Time) (time.Time, bool) {
	local := t.In(w.loc)
	for ahead := 0; ahead <= 7; ahead++ {
		s, e, ok := w.span(local.Year(), local.Month(), local.Day()+ahead)
		// A window the skipped hour of spring swallows whole never opens.
		if ok && s.After(t) && e.After(s) {
			return s, true
		}
	}
	return time.Time{}, false
}

// Describe says the windows for people: "Sat,Sun 22:00-04:00
// Europe/Berlin; 01:00-05:00 UTC"; "" when there is none.
func Describe(ws []v1beta1.MaintenanceWindow) string {
	parts := make([]string, 0, len(ws))
	for _, w := range ws {
		tz := w.TimeZone
		if tz == "" {
			tz = "UTC"
		}
		days := ""
		if len(w.Days) > 0 {
			days = strings.Join(w.Days, ",") + " "
		}
		parts = append(parts, fmt.Sprintf("%s%s-%s %s", days, w.Start, w.End, tz))
	}
	return strings.Join(parts, "; ")
}
