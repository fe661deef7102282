package sim

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
)

// podLogs keeps what the work of each Job's pod logged, as the container
// runtime keeps a container's log, for the kubelets' /containerLogs: the
// toolkit quotes the end of a failed Job's log in the plan.
type podLogs struct {
	mu   sync.Mutex
	logs map[string]*bytes.Buffer
}

func podLogKey(namespace, pod string) string { return namespace + "/" + pod }

// logger returns a logger that writes the pod's log.
func (l *podLogs) logger(pod *corev1.Pod) logr.Logger {
	key := podLogKey(pod.Namespace, pod.Name)
	return funcr.New(func(prefix, args string) {
		l.write(key, strings.TrimSpace(prefix+" "+args))
	}, funcr.Options{})
}

func (l *podLogs) write(key, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.logs == nil {
		l.logs = map[string]*bytes.Buffer{}
	}
	b := l.logs[key]
	if b == nil {
		b = &bytes.Buffer{}
		l.logs[key] = b
	}
	fmt.Fprintln(b, line)
}

// tail returns the last lines of the pod's log (all of it for lines <= 0),
// and whether the pod has one.
func (l *podLogs) tail(namespace, pod string, lines int) ([]byte, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.logs[podLogKey(namespace, pod)]
	if !ok {
		return nil, false
	}
	all := strings.SplitAfter(strings.TrimSuffix(b.String(), "\n"), "\n")
	if lines > 0 && len(all) > lines {
		all = all[len(all)-lines:]
	}
	return []byte(strings.Join(all, "") + "\n"), true
}
