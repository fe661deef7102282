package bench

import (
	"fmt"
	"strings"
	"testing"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// captureSizesEnv replaces the sizes BenchmarkCapture upgrades (default
// 10,200).
const captureSizesEnv = "BENCH_CAPTURE_NODES"

// BenchmarkCapture measures what the capture of the upgrade's logs costs:
// the same upgrade with the capture on and off, with kubelets that answer
// and with kubelets that refuse the API server (logs and stats; the
// disk-space check is then skipped, on and off alike). It prints, per size
// and kubelet, the capture's cost in wall time, manager CPU and API bytes.
func BenchmarkCapture(b *testing.B) {
	var summary strings.Builder
	for _, nodes := range sizesFrom(b, captureSizesEnv, []int{10, 200}) {
		for _, refuse := range []bool{false, true} {
			kubelets := "answer"
			u := upgradeRun{nodes: nodes}
			if refuse {
				kubelets = "refuse"
				u.refuseKubelets = true
				u.annotations = map[string]string{v1beta1.AnnotationSkipGCThresholdCheck: "true"}
			}
			measured := map[bool]*result{}
			for _, capture := range []bool{false, true} {
				u := u
				if !capture {
					u.managerArgs = []string{"--upgrade-log=false"}
				}
				b.Run(fmt.Sprintf("nodes=%d/kubelets=%s/capture=%v", nodes, kubelets, capture), func(b *testing.B) {
					for range b.N {
						r := upgrade(b, u)
						measured[capture] = r
						b.ReportMetric(r.wall.Seconds(), "wall-s")
						b.ReportMetric(r.cpu.Seconds()*1000/float64(nodes), "cpu-ms/node")
						b.ReportMetric(float64(r.sent+r.received)/1024/float64(nodes), "KiB/node")
						fmt.Println(r.String())
					}
				})
			}
			if on, off := measured[true], measured[false]; on != nil && off != nil {
				fmt.Fprintf(&summary, "  %4d nodes, kubelets %-6s  wall %7.1f s -> %7.1f s (%.3fx)  manager CPU %6.0f -> %6.0f ms/node (%.3fx)  API %7.1f -> %7.1f KiB/node (%.3fx)\n",
					nodes, kubelets, off.wall.Seconds(), on.wall.Seconds(), on.wall.Seconds()/off.wall.Seconds(),
					ms(off)/float64(nodes), ms(on)/float64(nodes), ms(on)/ms(off),
					kib(off)/float64(nodes), kib(on)/float64(nodes), kib(on)/kib(off))
			}
		}
	}
	fmt.Printf("The capture's cost (off -> on):\n%s", summary.String())
}

func ms(r *result) float64  { return r.cpu.Seconds() * 1000 }
func kib(r *result) float64 { return float64(r.sent+r.received) / 1024 }
