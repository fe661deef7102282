package window

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

func mustParse(t *testing.T, ws ...v1beta1.MaintenanceWindow) Schedule {
	t.Helper()
	s, err := Parse(ws)
	if err != nil {
		t.Fatalf("Parse(%+v): %v", ws, err)
	}
	return s
}

func at(t *testing.T, zone, when string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := time.ParseInLocation("2006-01-02 15:04", when, loc)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// 2026-11-28 is a Saturday.
func TestOpenNextOpenCloses(t *testing.T) {
	utc := func(when string) time.Time { return at(t, "UTC", when) }
	berlin := func(when string) time.Time { return at(t, "Europe/Berlin", when) }
	weekendNights := v1beta1.MaintenanceWindow{Days: []string{"Sat", "Sun"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}
	office := v1beta1.MaintenanceWindow{Days: []string{"Mon", "Tue", "Wed", "Thu", "Fri"}, Start: "09:00", End: "17:00"}
	for _, c := range []struct {
		name    string
		windows []v1beta1.MaintenanceWindow
		now     time.Time
		open    bool
		next    time.Time // zero: now
		closes  time.Time // zero: never
		local   string
	}{
		{name: "no window: always open", now: utc("2026-11-28 12:00"), open: true},
		{name: "inside, same day", windows: []v1beta1.MaintenanceWindow{office}, now: utc("2026-11-27 10:00"), open: true, closes: utc("2026-11-27 17:00")},
		{name: "at the start it is open", windows: []v1beta1.MaintenanceWindow{office}, now: utc("2026-11-27 09:00"), open: true, closes: utc("2026-11-27 17:00")},
		{name: "at the end it is closed", windows: []v1beta1.MaintenanceWindow{office}, now: utc("2026-11-27 17:00"),
			next: utc("2026-11-30 09:00"), local: "Mon 09:00 UTC"},
		{name: "a day not named: the next named day", windows: []v1beta1.MaintenanceWindow{office}, now: utc("2026-11-28 10:00"),
			next: utc("2026-11-30 09:00"), local: "Mon 09:00 UTC"},
		{name: "before the start", windows: []v1beta1.MaintenanceWindow{office}, now: utc("2026-11-27 08:59"),
			next: utc("2026-11-27 09:00"), local: "Fri 09:00 UTC"},
		{name: "crossing midnight, before midnight", windows: []v1beta1.MaintenanceWindow{weekendNights}, now: berlin("2026-11-28 23:00"),
			open: true, closes: berlin("2026-11-29 04:00")},
		{name: "crossing midnight, after midnight on the next day", windows: []v1beta1.MaintenanceWindow{weekendNights}, now: berlin("2026-11-29 03:59"),
			open: true, closes: berlin("2026-11-29 04:00")},
		{name: "crossing midnight: the day named is the day it opens", windows: []v1beta1.MaintenanceWindow{weekendNights}, now: berlin("2026-11-28 03:00"),
			next: berlin("2026-11-28 22:00"), local: "Sat 22:00 Europe/Berlin"},
		{name: "Sunday night's window ends Monday morning", windows: []v1beta1.MaintenanceWindow{weekendNights}, now: berlin("2026-11-30 02:00"),
			open: true, closes: berlin("2026-11-30 04:00")},
		{name: "after the weekend: next Saturday", windows: []v1beta1.MaintenanceWindow{weekendNights}, now: berlin("2026-11-30 04:00"),
			next: berlin("2026-12-05 22:00"), local: "Sat 22:00 Europe/Berlin"},
		{name: "the time zone counts, not UTC", windows: []v1beta1.MaintenanceWindow{weekendNights}, now: utc("2026-11-28 21:30"),
			open: true, closes: berlin("2026-11-29 04:00")},
		{name: "every day when no day is named", windows: []v1beta1.MaintenanceWindow{{Start: "01:00", End: "05:00"}}, now: utc("2026-11-28 06:00"),
			next: utc("2026-11-29 01:00"), local: "Sun 01:00 UTC"},
		{name: "a union: the earliest next", windows: []v1beta1.MaintenanceWindow{weekendNights, office}, now: utc("2026-11-27 18:00"),
			next: berlin("2026-11-28 22:00"), local: "Sat 22:00 Europe/Berlin"},
		{name: "a union: open in either", windows: []v1beta1.MaintenanceWindow{weekendNights, office}, now: utc("2026-11-30 10:00"),
			open: true, closes: utc("2026-11-30 17:00")},
		{name: "windows that join up close at the end of the last",
			windows: []v1beta1.MaintenanceWindow{{Start: "20:00", End: "00:00"}, {Start: "00:00", End: "02:00"}, {Start: "01:00", End: "03:00"}},
			now:     utc("2026-11-28 21:00"), open: true, closes: utc("2026-11-29 03:00")},
		{name: "a whole day", windows: []v1beta1.MaintenanceWindow{{Days: []string{"Sat"}, Start: "00:00", End: "00:00"}}, now: utc("2026-11-28 23:59"),
			open: true, closes: utc("2026-11-29 00:00")},
		{name: "every whole day never closes", windows: []v1beta1.MaintenanceWindow{{Start: "00:00", End: "00:00"}}, now: utc("2026-11-28 12:00"), open: true},
		// Europe/Berlin leaves summer time on 2026-10-25 at 03:00 (back to
		// 02:00) and enters it on 2026-03-29 at 02:00 (on to 03:00).
		{name: "DST ends inside the window: it follows the wall clock, an hour longer",
			windows: []v1beta1.MaintenanceWindow{{Start: "01:00", End: "05:00", TimeZone: "Europe/Berlin"}},
			now:     time.Date(2026, 10, 24, 23, 0, 0, 0, time.UTC) /* 01:00 CEST */, open: true, closes: time.Date(2026, 10, 25, 4, 0, 0, 0, time.UTC) /* 05:00 CET */},
		{name: "DST begins inside the window: an hour shorter",
			windows: []v1beta1.MaintenanceWindow{{Start: "01:00", End: "05:00", TimeZone: "Europe/Berlin"}},
			now:     time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC) /* 01:00 CET */, open: true, closes: time.Date(2026, 3, 29, 3, 0, 0, 0, time.UTC) /* 05:00 CEST */},
		{name: "a start in the hour DST skips opens as the clock jumps",
			windows: []v1beta1.MaintenanceWindow{{Start: "02:30", End: "06:00", TimeZone: "Europe/Berlin"}},
			now:     time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC), next: time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC) /* 03:30 CEST */, local: "Sun 03:30 Europe/Berlin"},
		{name: "New York, west of UTC", windows: []v1beta1.MaintenanceWindow{{Days: []string{"Fri"}, Start: "20:00", End: "23:00", TimeZone: "America/New_York"}},
			now: utc("2026-11-28 00:30") /* Fri 19:30 EST */, next: utc("2026-11-28 01:00"), local: "Fri 20:00 America/New_York"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := mustParse(t, c.windows...)
			if got := s.Open(c.now); got != c.open {
				t.Fatalf("Open(%s) = %v, want %v", c.now.UTC(), got, c.open)
			}
			next := s.NextOpen(c.now)
			want := c.next
			if want.IsZero() {
				want = c.now
			}
			if !next.At.Equal(want) {
				t.Errorf("NextOpen(%s) = %s, want %s", c.now.UTC(), next.At.UTC(), want.UTC())
			}
			if c.local != "" && next.Local != c.local {
				t.Errorf("NextOpen says %q, want %q", next.Local, c.local)
			}
			if !c.open && !s.Open(next.At) {
				t.Errorf("closed at its next opening %s", next.At.UTC())
			}
			closes := s.Closes(c.now)
			switch {
			case !c.open && !closes.Equal(c.now):
				t.Errorf("Closes of closed windows = %s, want now", closes.UTC())
			case c.open && !closes.Equal(c.closes):
				t.Errorf("Closes(%s) = %s, want %s", c.now.UTC(), closes.UTC(), c.closes.UTC())
			case c.open && !closes.IsZero() && (s.Open(closes) || !s.Open(closes.Add(-time.Second))):
				t.Errorf("the windows are not open up to %s and closed then", closes.UTC())
			}
		})
	}
}

// TestOpeningSaysWhen: the message of a closed window names the moment in
// UTC and on the window's own clock.
func TestOpeningSaysWhen(t *testing.T) {
	s := mustParse(t, v1beta1.MaintenanceWindow{Days: []string{"Sat"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"})
	got := s.NextOpen(at(t, "UTC", "2026-11-27 12:00")).String()
	if want := "2026-11-28T21:00:00Z (Sat 22:00 Europe/Berlin)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

func TestParseRefusesWhatItCannotRead(t *testing.T) {
	for _, c := range []struct {
		name   string
		window v1beta1.MaintenanceWindow
		path   string
		says   string
	}{
		{"unknown time zone", v1beta1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "Europe/Berln"}, "maintenanceWindows[0].timeZone", "is not a known time zone: use an IANA time zone name"},
		{"lower-case zone", v1beta1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "europe/berlin"}, "maintenanceWindows[0].timeZone", "case-sensitive"},
		{"the manager's own zone", v1beta1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "Local"}, "maintenanceWindows[0].timeZone", "the manager's own time zone"},
		{"hour 24", v1beta1.MaintenanceWindow{Start: "24:00", End: "04:00"}, "maintenanceWindows[0].start", "HH:MM on the 24-hour clock"},
		{"no leading zero", v1beta1.MaintenanceWindow{Start: "22:00", End: "4:00"}, "maintenanceWindows[0].end", "HH:MM"},
		{"a long day name", v1beta1.MaintenanceWindow{Days: []string{"Monday"}, Start: "22:00", End: "04:00"}, "maintenanceWindows[0].days", "Mon, Tue"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]v1beta1.MaintenanceWindow{c.window})
			var problems Problems
			if !errors.As(err, &problems) || len(problems) != 1 {
				t.Fatalf("Parse = %v, want one problem", err)
			}
			if !strings.HasSuffix(problems[0].Path(), c.path) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%q at %s, want %s saying %q", err, problems[0].Path(), c.path, c.says)
			}
		})
	}
	if _, err := Parse([]v1beta1.MaintenanceWindow{{Start: "22:00", End: "04:00"}, {Days: []string{"Sun"}, Start: "00:00", End: "00:00", TimeZone: "Asia/Kolkata"}}); err != nil {
		t.Errorf("valid windows refused: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	got := Describe([]v1beta1.MaintenanceWindow{{Days: []string{"Sat", "Sun"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}, {Start: "01:00", End: "05:00"}})
	if want := "Sat,Sun 22:00-04:00 Europe/Berlin; 01:00-05:00 UTC"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
