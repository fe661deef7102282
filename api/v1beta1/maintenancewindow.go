package v1beta1

// MaintenanceWindow is a time of the week when a node may begin its upgrade
// (spec.nodeUpgradeOption.maintenanceWindows).
type MaintenanceWindow struct {
	// Days are the days the window opens on, in its time zone: Mon, Tue,
	// Wed, Thu, Fri, Sat or Sun. A window that crosses midnight belongs to
	// the day it opens on. Empty: every day.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
	Days []string `json:"days,omitempty"`

	// Start is when the window opens, as HH:MM on the 24-hour clock in its
	// time zone, e.g. 22:00.
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:XValidation:rule="self.matches('^([01][0-9]|2[0-3]):[0-5][0-9]$')",message="start must be a time of day as HH:MM on the 24-hour clock, e.g. 22:00"
	Start string `json:"start"`

	// End is when the window closes, as HH:MM. An end not after the start
	// closes the window on the next day: 22:00 to 04:00 lasts six hours,
	// 00:00 to 00:00 the whole day.
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:XValidation:rule="self.matches('^([01][0-9]|2[0-3]):[0-5][0-9]$')",message="end must be a time of day as HH:MM on the 24-hour clock, e.g. 04:00"
	End string `json:"end"`

	// TimeZone is the IANA name of the time zone the days and times are
	// in, e.g. Europe/Berlin; UTC when unset. The window follows the zone's
	// wall clock across daylight saving time changes.
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$')",message="timeZone must be an IANA time zone name, e.g. Europe/Berlin or UTC"
	TimeZone string `json:"timeZone,omitempty"`
}

// The days a MaintenanceWindow may name, Sunday first as time.Weekday.
var MaintenanceWindowDays = []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// MaintenanceWindows returns spec.nodeUpgradeOption.maintenanceWindows (nil
// when unset: a node may begin its upgrade at any time).
func (p *UpgradePlan) MaintenanceWindows() []MaintenanceWindow {
	if p.Spec.NodeUpgradeOption == nil {
		return nil
	}
	return p.Spec.NodeUpgradeOption.MaintenanceWindows
}
