package helper

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// Event source components, as `kubectl describe upgradeplan` shows them.
const (
	ComponentDetector  = "vm-live-migrate-detector"
	ComponentRestoreVM = "restore-vm"
)

// +kubebuilder:rbac:groups="",resources=events,verbs=create

// Recorder records events on an UpgradePlan. It writes each event with one
// synchronous create instead of client-go's asynchronous broadcaster: a job
// command exits right after its last event, which a broadcaster could still
// hold in its queue.
type Recorder struct {
	Client client.Client
	// Component is the event's source component.
	Component string
	// Host is the node the command runs on, if any.
	Host string
}

// Event records an event on the plan. A failure to record it is logged, not
// returned: events inform, they never decide.
func (r *Recorder) Event(ctx context.Context, plan *v1beta1.UpgradePlan, eventType, reason, format string, args ...any) {
	now := metav1.NewTime(time.Now())
	msg := fmt.Sprintf(format, args...)
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// Events of cluster-scoped objects live in "default", as
			// client-go's recorder (and so the manager) puts them.
			Namespace: metav1.NamespaceDefault,
			Name:      fmt.Sprintf("%s.%x", plan.Name, now.UnixNano()),
		},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: v1beta1.GroupVersion.String(), Kind: "UpgradePlan",
			Name: plan.Name, UID: plan.UID, ResourceVersion: plan.ResourceVersion,
		},
		Reason: reason, Message: msg, Type: eventType,
		Source:         corev1.EventSource{Component: r.Component, Host: r.Host},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	logger := log.FromContext(ctx)
	if err := r.Client.Create(ctx, ev); err != nil {
		logger.Error(err, "recording an event on the UpgradePlan", "plan", plan.Name, "reason", reason, "message", msg)
		return
	}
	logger.Info("event", "type", eventType, "reason", reason, "message", msg)
}
