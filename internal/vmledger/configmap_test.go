package vmledger

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// The storage's own rules, on a recording client: the keeper and the
// plan's passes read and write it against the API server in
// internal/controller (TestLedgerKeptInShards).

func TestShards(t *testing.T) {
	for n, want := range map[int]int{0: 1, 1: 1, ShardSize: 1, ShardSize + 1: 2, 3 * ShardSize: 3} {
		if got := Shards(n); got != want {
			t.Errorf("Shards(%d) = %d, want %d", n, got, want)
		}
	}
	if ShardOf(ShardSize-1) != 0 || ShardOf(ShardSize) != 1 {
		t.Errorf("ShardOf: %d %d", ShardOf(ShardSize-1), ShardOf(ShardSize))
	}
}

func TestConfigMapsReadBackAsOneLedger(t *testing.T) {
	ctx := context.Background()
	plan := &v1beta1.UpgradePlan{}
	plan.Name, plan.UID = "hvst-upgrade-a", types.UID("u-1")
	l := atScale(2*ShardSize+7, 5)
	cms, err := NewConfigMaps(plan, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(cms) != 3 || cms[0].Name != "hvst-upgrade-a-vm-ledger" || cms[2].Name != "hvst-upgrade-a-vm-ledger-2" || cms[0].Data[KeyShards] != "3" || cms[1].Data[KeyShards] != "" {
		t.Fatalf("ConfigMaps: %d, %s, %s, shards %q %q", len(cms), cms[0].Name, cms[len(cms)-1].Name, cms[0].Data[KeyShards], cms[1].Data[KeyShards])
	}
	c := fake.NewClientBuilder().Build()
	for _, cm := range cms {
		if cm.OwnerReferences[0].UID != plan.UID {
			t.Errorf("%s is not owned by the plan", cm.Name)
		}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	got, read, err := Read(ctx, c, plan.Name)
	if err != nil || len(read) != 3 || !reflect.DeepEqual(got, l) {
		t.Fatalf("Read: %d ConfigMaps, %v; the same ledger: %v", len(read), err, reflect.DeepEqual(got, l))
	}

	// Through the cache: a ConfigMap is parsed again only when it changed.
	var cache Cache
	first, err := cache.Read(ctx, c, plan.Name)
	if err != nil || !reflect.DeepEqual(first, l) {
		t.Fatalf("Cache.Read: %v", err)
	}
	if again, _ := cache.Read(ctx, c, plan.Name); again != first {
		t.Error("nothing changed, yet the cache made a new ledger")
	}
	parsed := cache.shards[0].ledger
	l.Records[len(l.Records)-1].Events = nil
	last := read[2].DeepCopy()
	if last.Data, last.BinaryData, err = EncodeShard(l, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, last); err != nil {
		t.Fatal(err)
	}
	changed, err := cache.Read(ctx, c, plan.Name)
	if err != nil || !reflect.DeepEqual(changed, l) {
		t.Fatalf("after the third ConfigMap changed, the cache reads %v, the same as written: %v", err, reflect.DeepEqual(changed, l))
	}
	if cache.shards[0].ledger != parsed {
		t.Error("the first ConfigMap did not change, yet it was parsed again")
	}

	// A part gone is an error that names it.
	if err := c.Delete(ctx, read[1]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(ctx, c, plan.Name); err == nil || !strings.Contains(err.Error(), "continues in harvester-system/hvst-upgrade-a-vm-ledger-1, which is missing") {
		t.Errorf("Read without the second ConfigMap: %v", err)
	}
	bad := read[0].DeepCopy()
	bad.Data[KeyShards] = "many"
	if err := c.Update(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(ctx, c, plan.Name); err == nil || !strings.Contains(err.Error(), `shards "many" is not a count`) {
		t.Errorf("Read with a bad count: %v", err)
	}
	if l, _, err := Read(ctx, c, "other"); l != nil || err != nil {
		t.Errorf("a plan without a ledger: %v %v", l, err)
	}
}
