package vmledger

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// Key is where a plan's ledger lives.
func Key(plan string) client.ObjectKey {
	return client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.VMLedger(plan)}
}

// NewConfigMap is the ConfigMap of a plan's ledger: owned by the plan, so
// that it goes when the plan is deleted, and not labelled with it, so that
// the plan's cleanup keeps it, as the record of what happened to the VMs.
func NewConfigMap(plan *v1beta1.UpgradePlan, l *Ledger) (*corev1.ConfigMap, error) {
	data, binary, err := Encode(l)
	if err != nil {
		return nil, err
	}
	key := Key(plan.Name)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: key.Name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1beta1.GroupVersion.String(), Kind: "UpgradePlan", Name: plan.Name, UID: plan.UID,
			}},
		},
		Data: data, BinaryData: binary,
	}, nil
}

// Read reads a plan's ledger; nil without an error when the plan has none
// (it has not started, or started before the toolkit kept ledgers).
func Read(ctx context.Context, c client.Reader, plan string) (*Ledger, *corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, Key(plan), cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("reading the VM ledger %s: %w", Key(plan), err)
	}
	l, err := Decode(cm.Data, cm.BinaryData)
	if err != nil {
		return nil, nil, fmt.Errorf("the VM ledger %s: %w", Key(plan), err)
	}
	return l, cm, nil
}

// Cache reads ledgers like Read, parsing each version of the last ledger
// read once: the plan's passes read it on every pass, and a ledger of a
// thousand VMs is some hundred KiB of text. The ledgers it returns are
// shared: read them, never change them.
type Cache struct {
	mu                    sync.Mutex
	plan, resourceVersion string
	ledger                *Ledger
}

// Read is Read through the cache.
func (c *Cache) Read(ctx context.Context, r client.Reader, plan string) (*Ledger, error) {
	if c == nil {
		l, _, err := Read(ctx, r, plan)
		return l, err
	}
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, Key(plan), cm, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the VM ledger %s: %w", Key(plan), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.plan == plan && c.resourceVersion == cm.ResourceVersion {
		return c.ledger, nil
	}
	l, err := Decode(cm.Data, cm.BinaryData)
	if err != nil {
		return nil, fmt.Errorf("the VM ledger %s: %w", Key(plan), err)
	}
	c.plan, c.resourceVersion, c.ledger = plan, cm.ResourceVersion, l
	return l, nil
}
