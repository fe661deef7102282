package vmledger

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// A ledger is kept in ConfigMaps of ShardSize VMs each, the VMs in the
// ledger's order: the first, <plan>-vm-ledger, then <plan>-vm-ledger-1 and
// on. The keeper rewrites a whole ConfigMap when one of its VMs changes, so
// a ledger in one object would cost each change in proportion to every VM
// of the cluster (at 200 nodes, 457 writes of up to 48 KiB, each also sent
// to every watcher); in shards each change costs the same at any size. A
// cluster of up to ShardSize VMs keeps its ledger in one ConfigMap, as
// before shards.
const ShardSize = 50

// KeyShards, in the first ConfigMap, is how many ConfigMaps the ledger has,
// when more than one.
const KeyShards = "shards"

// Key is where a plan's ledger begins (its first ConfigMap).
func Key(plan string) client.ObjectKey { return ShardKey(plan, 0) }

// ShardKey is where a plan's ledger keeps its i-th ShardSize VMs.
func ShardKey(plan string, i int) client.ObjectKey {
	name := names.VMLedger(plan)
	if i > 0 {
		name = names.Join(name, strconv.Itoa(i))
	}
	return client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: name}
}

// Shards is how many ConfigMaps a ledger of n VMs takes.
func Shards(n int) int { return max(1, (n+ShardSize-1)/ShardSize) }

// ShardOf is the ConfigMap that keeps the ledger's i-th record.
func ShardOf(i int) int { return i / ShardSize }

// shardRecords are the records the i-th ConfigMap keeps.
func shardRecords(l *Ledger, i int) []Record {
	return l.Records[min(i*ShardSize, len(l.Records)):min((i+1)*ShardSize, len(l.Records))]
}

// EncodeShard returns the data and binaryData of the ledger's i-th
// ConfigMap.
func EncodeShard(l *Ledger, i int) (map[string]string, map[string][]byte, error) {
	data, binary, err := Encode(&Ledger{Started: l.Started, Records: shardRecords(l, i)})
	if err != nil {
		return nil, nil, err
	}
	if n := Shards(len(l.Records)); i == 0 && n > 1 {
		data[KeyShards] = strconv.Itoa(n)
	}
	return data, binary, nil
}

// NewConfigMaps are the ConfigMaps of a plan's ledger, the first first:
// owned by the plan, so that they go when the plan is deleted, and not
// labelled with it, so that the plan's cleanup keeps them, as the record of
// what happened to the VMs. The first is the ledger's mark of existence:
// create it last.
func NewConfigMaps(plan *v1beta1.UpgradePlan, l *Ledger) ([]*corev1.ConfigMap, error) {
	out := make([]*corev1.ConfigMap, Shards(len(l.Records)))
	for i := range out {
		data, binary, err := EncodeShard(l, i)
		if err != nil {
			return nil, err
		}
		key := ShardKey(plan.Name, i)
		out[i] = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: key.Name,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: v1beta1.GroupVersion.String(), Kind: "UpgradePlan", Name: plan.Name, UID: plan.UID,
				}},
			},
			Data: data, BinaryData: binary,
		}
	}
	return out, nil
}

// Read reads a plan's ledger and its ConfigMaps, the first first; nil
// without an error when the plan has none (it has not started, or started
// before the toolkit kept ledgers).
func Read(ctx context.Context, c client.Reader, plan string) (*Ledger, []*corev1.ConfigMap, error) {
	var cms []*corev1.ConfigMap
	parts, err := read(ctx, c, plan, func(_ int, cm *corev1.ConfigMap) (*Ledger, error) {
		cms = append(cms, cm)
		return Decode(cm.Data, cm.BinaryData)
	})
	if err != nil || parts == nil {
		return nil, nil, err
	}
	return join(parts), cms, nil
}

// read gets the ledger's ConfigMaps one by one and decodes each through
// decode: the parts, the first first.
func read(ctx context.Context, c client.Reader, plan string, decode func(i int, cm *corev1.ConfigMap) (*Ledger, error), opts ...client.GetOption) ([]*Ledger, error) {
	var parts []*Ledger
	for i, n := 0, 1; i < n; i++ {
		key := ShardKey(plan, i)
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, key, cm, opts...); err != nil {
			if i == 0 && apierrors.IsNotFound(err) {
				return nil, nil
			}
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("the VM ledger %s continues in %s, which is missing: %w", Key(plan), key, err)
			}
			return nil, fmt.Errorf("reading the VM ledger %s: %w", key, err)
		}
		if s, ok := cm.Data[KeyShards]; ok && i == 0 {
			var err error
			if n, err = strconv.Atoi(s); err != nil || n < 1 {
				return nil, fmt.Errorf("the VM ledger %s: %s %q is not a count of ConfigMaps", key, KeyShards, s)
			}
		}
		part, err := decode(i, cm)
		if err != nil {
			return nil, fmt.Errorf("the VM ledger %s: %w", key, err)
		}
		parts = append(parts, part)
	}
	return parts, nil
}

// join makes one ledger of its parts.
func join(parts []*Ledger) *Ledger {
	if len(parts) == 0 {
		return nil
	}
	if len(parts) == 1 {
		return parts[0]
	}
	out := &Ledger{Started: parts[0].Started}
	for _, p := range parts {
		out.Records = append(out.Records, p.Records...)
	}
	return out
}

// Cache reads ledgers like Read, parsing each version of a ConfigMap of the
// last ledger read once: the plan's passes and the keeper read it on every
// pass, and a ledger of a thousand VMs is some hundred KiB of text. The
// ledgers it returns are shared: read them, never change them.
type Cache struct {
	mu     sync.Mutex
	plan   string
	shards []cachedShard
	ledger *Ledger
}

type cachedShard struct {
	resourceVersion string
	ledger          *Ledger
}

// Read is Read through the cache, without the ConfigMaps.
func (c *Cache) Read(ctx context.Context, r client.Reader, plan string) (*Ledger, error) {
	l, _, err := c.ReadShards(ctx, r, plan)
	return l, err
}

// ReadShards is Read through the cache. The ConfigMaps it returns are the
// reader's own (a cache's objects, not copied): read them, never change
// them.
func (c *Cache) ReadShards(ctx context.Context, r client.Reader, plan string) (*Ledger, []*corev1.ConfigMap, error) {
	if c == nil {
		return Read(ctx, r, plan)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.plan != plan {
		c.plan, c.shards, c.ledger = plan, nil, nil
	}
	var cms []*corev1.ConfigMap
	changed := false
	parts, err := read(ctx, r, plan, func(i int, cm *corev1.ConfigMap) (*Ledger, error) {
		cms = append(cms, cm)
		if i < len(c.shards) && c.shards[i].resourceVersion == cm.ResourceVersion {
			return c.shards[i].ledger, nil
		}
		part, err := Decode(cm.Data, cm.BinaryData)
		if err != nil {
			return nil, err
		}
		if i >= len(c.shards) {
			c.shards = append(c.shards, make([]cachedShard, i+1-len(c.shards))...)
		}
		c.shards[i], changed = cachedShard{cm.ResourceVersion, part}, true
		return part, nil
	}, client.UnsafeDisableDeepCopy)
	if err != nil || parts == nil {
		return nil, nil, err
	}
	if changed || c.ledger == nil || len(c.shards) != len(parts) {
		c.shards = c.shards[:len(parts)]
		c.ledger = join(parts)
	}
	return c.ledger, cms, nil
}
