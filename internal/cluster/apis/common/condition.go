// Package common holds types shared by the foreign kinds.
//
// +kubebuilder:object:generate=true
package common

// Condition is the condition shape of Rancher, Harvester, Longhorn and
// system-upgrade-controller objects (wrangler's GenericCondition), which is
// also a superset of KubeVirt's.
type Condition struct {
	// Type of the condition, e.g. Imported or Ready.
	Type string `json:"type"`
	// Status is True, False or Unknown.
	Status string `json:"status"`
	// +optional
	LastUpdateTime string `json:"lastUpdateTime,omitempty"`
	// +optional
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// FindCondition returns the condition of the given type, or nil.
func FindCondition(conds []Condition, conditionType string) *Condition {
	for i := range conds {
		if conds[i].Type == conditionType {
			return &conds[i]
		}
	}
	return nil
}

// IsTrue reports whether the condition of the given type is True.
func IsTrue(conds []Condition, conditionType string) bool {
	c := FindCondition(conds, conditionType)
	return c != nil && c.Status == "True"
}

// IsFalse reports whether the condition of the given type is False.
func IsFalse(conds []Condition, conditionType string) bool {
	c := FindCondition(conds, conditionType)
	return c != nil && c.Status == "False"
}

// SetCondition sets or replaces the condition of c.Type and reports whether
// anything changed. Timestamps are the caller's business.
func SetCondition(conds *[]Condition, c Condition) bool {
	if old := FindCondition(*conds, c.Type); old != nil {
		if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			return false
		}
		if c.LastTransitionTime == "" && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		*old = c
		return true
	}
	*conds = append(*conds, c)
	return true
}
