package chaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// restartDelay is how soon a replica that died runs again, as the kubelet
// restarts a crashed container (without its growing back-off).
const restartDelay = 500 * time.Millisecond

// acquiredLease is what client-go's leader election logs when a replica
// becomes the leader.
const acquiredLease = "successfully acquired lease"

// Replicas runs the manager's replicas as processes of their own, each
// restarted when it dies, as a Deployment's pods are.
type Replicas struct {
	bin  string
	args []string
	env  []string
	logs io.Writer

	mu       sync.Mutex
	procs    []*replica
	stopping bool
	wg       sync.WaitGroup
	kills    int
	exits    int
}

type replica struct {
	cmd    *exec.Cmd
	leader bool
	starts int
}

// NewReplicas prepares replicas of bin run with args and the extra
// environment env; their output goes to logs.
func NewReplicas(bin string, args, env []string, logs io.Writer) *Replicas {
	return &Replicas{bin: bin, args: args, env: env, logs: logs}
}

// Start starts n replicas.
func (r *Replicas) Start(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range n {
		rep := &replica{}
		r.procs = append(r.procs, rep)
		r.wg.Add(1)
		go r.supervise(i, rep)
	}
}

// supervise runs a replica until Stop, starting it again whenever it ends.
func (r *Replicas) supervise(i int, rep *replica) {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		if r.stopping {
			r.mu.Unlock()
			return
		}
		cmd := exec.Command(r.bin, r.args...)
		cmd.Env = append(os.Environ(), r.env...)
		out, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = pw, pw
		// A killed test must not leave a manager running.
		exited, err := testenv.StartTied(cmd)
		if err != nil {
			r.mu.Unlock()
			_, _ = fmt.Fprintf(r.logs, "chaos: starting replica %d: %v\n", i, err)
			time.Sleep(restartDelay)
			continue
		}
		rep.cmd, rep.leader = cmd, false
		rep.starts++
		r.mu.Unlock()
		go func() {
			// Wait has copied all the output: the reader sees it all, then the end.
			_ = pw.CloseWithError(<-exited)
		}()

		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, acquiredLease) {
				r.mu.Lock()
				rep.leader = true
				r.mu.Unlock()
			}
			_, _ = fmt.Fprintf(r.logs, "[replica %d] %s\n", i, line)
		}
		// Until the process has ended and its output is closed.
		_, _ = io.Copy(io.Discard, out)
		r.mu.Lock()
		rep.cmd, rep.leader = nil, false
		stopping := r.stopping
		if !stopping {
			r.exits++
		}
		r.mu.Unlock()
		if stopping {
			return
		}
		time.Sleep(restartDelay)
	}
}

// Leader returns the replica that leads, -1 when none does now.
func (r *Replicas) Leader() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, rep := range r.procs {
		if rep.leader && rep.cmd != nil {
			return i
		}
	}
	return -1
}

// Kill kills replica i with SIGKILL; it is started again.
func (r *Replicas) Kill(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.procs[i]
	if rep.cmd == nil || rep.cmd.Process == nil {
		return false
	}
	if rep.cmd.Process.Signal(syscall.SIGKILL) != nil {
		return false
	}
	r.kills++
	return true
}

// Deaths returns how many times replicas were killed, and how many times
// they ended (kills included; the rest ended by themselves, e.g. a leader
// that could not renew its lease).
func (r *Replicas) Deaths() (kills, exits int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kills, r.exits
}

// Stop kills every replica and waits for them.
func (r *Replicas) Stop() {
	r.mu.Lock()
	r.stopping = true
	for _, rep := range r.procs {
		if rep.cmd != nil && rep.cmd.Process != nil {
			_ = rep.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
}
